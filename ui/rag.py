"""RAG tab: search the movie-plot table with year/genre prefilters, then let a tuned or base model answer
from the retrieved plots (streamed), checked against the films it was given. The table's own handlers (bundled
films, uploads, the Wikipedia CSV, the embedder) are in ui/rag_table.py."""

from __future__ import annotations

import html
import queue
import threading

import gradio as gr

from pipeline.rewards.grounding import check_answer, check_markdown, marked
from pipeline.run_folder import run_files
from pipeline.setup.config import RunConfig
from pipeline.setup.movie_questions import PROMPT_TOP_K
from pipeline.training.generate import (MAX_REPLY_TOKENS, ChatModelError, ModelCache, base_choice, chat_choices,
                                       empty_reply, generation_error_message, run_for_choice)
from retrieval import movies as movie_data
from retrieval.rag import REPETITION_PENALTY, build_messages, films_used, prompt_text, stream_answer
from retrieval.bundled_table import ensure_bundled_table
from retrieval.chunks import PlotChunks
from retrieval.glossary import expand
from retrieval.search import (DEFAULT_MODE, MAX_TOP_K, Hit, SearchError, SearchFilters, default_mode, search,
                              search_modes)
from retrieval.store import BUNDLED_EMBEDDER, MovieStore, StoreError
from ui.rag_table import MAP_FIELDS, UPLOAD_TYPES, bundled_genres, make_table_handlers, progress_fn, status_html, \
    table_state
from ui.tab import PageLoad, Tab, TabContext
from ui import watch
from ui.held_out import held_out_questions
from ui.model_choices import default_choice, dropdown_update, example_label, refreshed_choice

ANSWER_SOURCE = "movies"  # the prompts a run is tuned on to answer from retrieved plots (the Movie questions preset)


def choice_label(choice: str) -> str:
    """The answering model as the dropdown names it (the value itself for a model typed in)."""
    return next((label for label, value in chat_choices() if value == choice), str(choice))


EXAMPLES = [
    ["What's common in movies where the protagonist turns out to be the bad guy?", 0, 1989, []],
    ["A story told by someone who is already dead", 0, 0, []],
    ["Robots or computers that turn against their makers", 1960, 2000, ["Science Fiction"]],
    ["A heist where the crew is betrayed by one of its own", 0, 0, ["Crime", "Thriller"]],
]


TOKENS_STEP = 8  # the answer length slider's step


def held_out_settings(sample: list, choice: str | None) -> tuple:
    """A held-out question clicked: it is asked with the settings the run's evaluation answers with. The top-k its
    prompts were built with, over the whole table (no filters), greedy, no repetition penalty, at most the run's
    max_completion_length tokens (rounded up to the slider's step).
    (question, top-k, from year, to year, genres, max tokens, temperature, repetition penalty)"""
    try:
        cap = RunConfig.load(run_for_choice(choice) / run_files.CONFIG).max_completion_length if choice else None
    except (ChatModelError, OSError, ValueError):
        cap = None
    tokens = gr.skip() if cap is None else min(MAX_REPLY_TOKENS, max(TOKENS_STEP, -(-cap // TOKENS_STEP) * TOKENS_STEP))
    return (sample[0] if sample else "", PROMPT_TOP_K, 0, 0, [], tokens, 0.0, 1.0)


def held_out_examples(choice: str | None) -> gr.Dataset:
    """The answering model's held-out questions, hidden when it has none."""
    try:
        questions = held_out_questions(run_for_choice(choice)) if choice else []
    except ChatModelError:
        questions = []
    return gr.Dataset(samples=[[q] for q in questions], sample_labels=[example_label(q, 90) for q in questions],
                      visible=bool(questions))


# ---- rendering (pure) --------------------------------------------------------------------------


def results_html(hits: list[Hit], filters: SearchFilters | None = None, used: list[int] | None = None) -> str:
    if not hits:
        what = f" ({html.escape(filters.describe())})" if filters else ""
        return (f"<div class='gs-empty'>No film matches these filters{what}. Widen the year range or pick other "
                "genres.</div>")
    used = set(used or [])
    metric = "distance" if hits[0].metric == "distance" else "relevance"
    rows = []
    for number, hit in enumerate(hits, 1):
        mark = " class='gs-pos'" if number in used else ""
        plot = html.escape(hit.plot)
        short = plot if len(plot) <= 260 else plot[:260].rsplit(" ", 1)[0] + " …"
        body = short if short == plot else f"<details><summary>{short}</summary>{plot}</details>"
        rows.append(f"<tr{mark}><td>[{number}]</td><td><b>{html.escape(hit.title)}</b></td><td>{hit.release_year}</td>"
                    f"<td>{html.escape(hit.genre)}</td><td>{html.escape(hit.director)}</td>"
                    f"<td>{hit.distance:.3f}</td><td class='gs-text'>{body}</td></tr>")
    caption = f"<div class='gs-formula'>{len(hits)} films · {html.escape(filters.describe())}" if filters else "<div>"
    caption += " · highlighted: used in the answer</div>" if used else "</div>"
    return (caption + f"<table class='gs-table' id='rag-results-table'><tr><th>#</th><th>Title</th><th>Year</th>"
            f"<th>Genre</th><th>Director</th><th>{metric}</th><th>Plot</th></tr>" + "".join(rows) + "</table>")


def labelled(title: str, text: str) -> str:
    """An answer under the name of the model that gave it (side by side, each column says whose it is).

    >>> print(labelled("Base: bundled/SmolLM2-135M-Instruct", "Psycho [2]"))
    **Base: bundled/SmolLM2-135M-Instruct**
    <BLANKLINE>
    Psycho [2]
    """
    return f"**{title}**\n\n{text}"


def used_markdown(hits: list[Hit], used: list[int]) -> str:
    if not hits:
        return ""
    if not used:
        return "The answer names none of the retrieved films by number or title."
    return "**Drew on:** " + ", ".join(f"[{n}] {hits[n - 1].label}" for n in used)


def answer_checks(hits: list[Hit], answers: dict[str, str], source: str) -> dict[str, list]:
    """What each answer that came back says that the films given (shown to the models in `source`) lack."""
    return {key: check_answer(text, hits, source) for key, text in answers.items() if text.strip()}


def answer_notes(hits: list[Hit], used: list[int], checks: dict[str, list]) -> str:
    """Under the answers: the films the chosen model drew on (`used`, their numbers), then what each answer checked
    (the chosen model's, and the base model's when compared) says that the films given do not.

    >>> hit = Hit(1, "Psycho", 1960, "Horror", "Alfred Hitchcock", "A clerk steals money.", 0.3)
    >>> source = "[1] Psycho (1960, Horror, dir. Alfred Hitchcock): A clerk steals money."
    >>> checks = answer_checks([hit], {"main": "Psycho [1]", "base": "Psycho (1962)"}, source)
    >>> print(answer_notes([hit], [1], checks))
    **Drew on:** [1] Psycho (1960)
    <BLANKLINE>
    Tuned: Checked against the films given: found no film number, title, name, year, genre or director they lack.
    <BLANKLINE>
    Base: **Not in the films given:** `Psycho (1962)` ([1] is Psycho (1960, Horror, dir. Alfred Hitchcock))
    """
    lines = [used_markdown(hits, used)]
    for key, name in (("main", "Tuned"), ("base", "Base")):
        if key in checks:
            check = check_markdown(checks[key])
            lines.append(f"{name}: {check}" if "base" in checks else check)
    return "\n\n".join(line for line in lines if line)


# ---- handlers ----------------------------------------------------------------------------------


def keywords_note(query, mode) -> str:
    """What the storytelling glossary added to the keyword search, shown under the results."""
    if mode not in search_modes or not search_modes.get(mode).glossary:
        return ""
    added = expand(" ".join(str(query or "").split()))[1]
    return f"<div class='gs-formula'>Keywords also searched: {html.escape(' '.join(added))}</div>" if added else ""


def make_handlers(store: MovieStore, cache: ModelCache, chunks: PlotChunks | None = None):
    chunks = chunks or PlotChunks(store)

    def ensure_table(progress, mode=None) -> None:
        uses_chunks = mode is not None and search_modes.get(mode).uses_chunks  # an unknown mode fails first
        report = ensure_bundled_table(store, progress=progress_fn(progress))
        if report is not None:
            gr.Info(f"Built the movie table: {report.summary()}")
        if uses_chunks:
            # Sentences of films added since the last search are embedded once (nothing when none were).
            chunks.sync(progress=progress_fn(progress))

    def run_search(query, year_min, year_max, genres, top_k, mode, progress):
        ensure_table(progress, mode)
        info = store.info()
        # A number box can't be blank in Gradio: 0 there means "no bound".
        year_min, year_max = (None if y in (0, "0", "") else y for y in (year_min, year_max))
        filters = SearchFilters.parse(year_min, year_max, genres, top_k, known_genres=info.genres)
        return search(store.table(), query, filters, mode, chunks=chunks), filters

    def do_search(query, year_min, year_max, genres, top_k, mode, progress=gr.Progress()):
        try:
            hits, filters = run_search(query, year_min, year_max, genres, top_k, mode, progress)
        except (SearchError, StoreError, movie_data.MovieDataError) as exc:
            return f"<div class='gs-error'>⚠️ {html.escape(str(exc))}</div>", gr.skip(), "", ""
        prompt = prompt_text(build_messages(" ".join(str(query).split()), hits))
        return results_html(hits, filters) + keywords_note(query, mode), status_html(store.info()), "", prompt

    def do_answer(query, year_min, year_max, genres, top_k, mode, choice, compare, max_tokens, temperature, penalty,
                  progress=gr.Progress()):
        """Search, then stream the chosen model's answer; with `compare`, the base model it was trained from answers
        from the same films at the same time, in the column beside it."""
        try:
            hits, filters = run_search(query, year_min, year_max, genres, top_k, mode, progress)
        except (SearchError, StoreError, movie_data.MovieDataError) as exc:
            yield f"<div class='gs-error'>⚠️ {html.escape(str(exc))}</div>", gr.skip(), "", "", "", gr.skip()
            return
        text = " ".join(str(query).split())
        messages = build_messages(text, hits)
        note = keywords_note(query, mode)
        table = results_html(hits, filters) + note
        status = status_html(store.info())
        try:
            base = base_choice(choice) if compare else None
        except ChatModelError as exc:
            yield table, status, f"⚠️ {exc}", "", prompt_text(messages), gr.Markdown(visible=False)
            return
        if compare and base is None:
            side = gr.Markdown("*Compare with base needs a tuned run or checkpoint as the answering model: pick one "
                               "above.*", visible=True)
        else:
            side = gr.Markdown("" if base else None, visible=bool(base))
        if not hits:
            yield (table, status, "Nothing to answer from: no film passed the filters.", "", prompt_text(messages),
                   side)
            return
        targets = {"main": choice, **({"base": base} if base else {})}
        titles = {"main": f"Tuned: {choice_label(choice)}", "base": f"Base: {base}"} if base else {}
        shown = {key: "*Loading the model…*" for key in targets}

        def view(key):
            return labelled(titles[key], shown[key]) if titles else shown[key]

        yield table, status, view("main"), "", prompt_text(messages), (
            gr.Markdown(view("base"), visible=True) if base else side)
        answers = {key: "" for key in targets}
        updates: queue.Queue = queue.Queue()
        stop = threading.Event()

        def answer_with(key: str, picked: str):
            try:
                model, tokenizer = cache.get(picked)
                for partial in stream_answer(model, tokenizer, text, hits, max_new_tokens=int(max_tokens),
                                             temperature=float(temperature), repetition_penalty=float(penalty),
                                             stop=stop):
                    updates.put((key, partial, None))
            except Exception as exc:  # noqa: BLE001 - shown in the tab, never a stack trace
                updates.put((key, None, generation_error_message(exc)))
            finally:
                updates.put((key, None, ""))

        threads = [threading.Thread(target=answer_with, args=item, daemon=True) for item in targets.items()]
        for thread in threads:
            thread.start()
        pending, failed = len(threads), set()
        try:
            while pending:
                key, partial, error = updates.get()
                if partial is None:
                    if error:
                        failed.add(key)
                        shown[key] = error
                    else:
                        pending -= 1
                        continue
                else:
                    answers[key] = shown[key] = partial
                yield (gr.skip(), gr.skip(), view("main") if key == "main" else gr.skip(), gr.skip(), gr.skip(),
                       view("base") if key == "base" else gr.skip())
        finally:
            stop.set()  # Stop pressed or page closed: end generation
        if "main" in failed:
            yield gr.skip(), gr.skip(), view("main"), "", gr.skip(), gr.skip()
            return
        used = films_used(answers["main"], hits)
        said = {key: text for key, text in answers.items() if key not in failed and text.strip()}
        for key in answers.keys() - failed - said.keys():  # ended without a word: say so, not an empty box
            shown[key] = empty_reply()["content"]
        checks = answer_checks(hits, said, messages[-1]["content"])
        for key, items in checks.items():  # what the films lack, marked in the answer itself
            shown[key] = marked(answers[key], items)
        notes = answer_notes(hits, used, checks)
        yield (results_html(hits, filters, used) + note, gr.skip(), view("main"), notes, gr.skip(),
               view("base") if base else gr.skip())

    return do_search, do_answer


# ---- layout ------------------------------------------------------------------------------------


def build(ctx: TabContext) -> Tab:
    """Add the RAG tab. On page load it reads the table's state and the chat models on disk."""
    cache, store = ctx.cache, ctx.store
    do_search, do_answer = make_handlers(store, cache)
    build_bundled, receive_upload, add_upload, add_wiki, rebuild, cancel_ingest = make_table_handlers(store)
    with gr.Tab("RAG", id="rag"):
        gr.Markdown("Find films whose plots match an idea, filtered by release year and genre *before* the vector "
                    "search, then let a model answer from the films it found.")
        # Nothing here opens the database: the page-load handler (load, below) fills the table's status,
        # genres, embedder and starting mode, so the app starts without importing lancedb.
        status = gr.HTML("<div class='gs-empty'>Reading the movie table…</div>", elem_id="rag-status")
        with gr.Row():
            with gr.Column(scale=2):
                query = gr.Textbox(label="What should the films be about?", lines=2, elem_id="rag-query",
                                   placeholder="e.g. the protagonist turns out to be the bad guy")
                with gr.Row():
                    year_min = gr.Number(label="From year", value=0, precision=0, elem_id="rag-year-min",
                                         info="0 = any")
                    year_max = gr.Number(label="To year", value=0, precision=0, elem_id="rag-year-max",
                                         info="0 = any")
                genres = gr.CheckboxGroup(label="Genres (none ticked = all)", choices=bundled_genres(),
                                          elem_id="rag-genres")
                with gr.Row():
                    top_k = gr.Slider(1, MAX_TOP_K, value=5, step=1, label="Top-k films", elem_id="rag-top-k")
                    mode = gr.Radio(search_modes.choices(), value=DEFAULT_MODE, label="Search",
                                    elem_id="rag-mode")
                with gr.Column():  # stacked: a tuned run's name needs the column's whole width
                    model = gr.Dropdown(label="Answering model", choices=chat_choices(),
                                        value=default_choice(source=ANSWER_SOURCE), elem_id="rag-model",
                                        info="At first the newest run tuned on Movie questions, else the base "
                                             "model: a run tuned for another task answers film questions no "
                                             "better.")
                    compare = gr.Checkbox(label="Compare with base", value=False, elem_id="rag-compare",
                                          info="A tuned run's base model answers from the same films, beside it.")
                    offered = gr.State(model.value)  # the default given, to tell it from a user's pick
                    # Pressed by the page's poll when a run finishes or saves a checkpoint while the tab shows.
                    followed = gr.Button("Re-read the models", elem_id="rag-models-refresh",
                                         elem_classes=["gs-hidden"])
                with gr.Row():
                    search_btn = gr.Button("Search", elem_id="rag-search", scale=2, min_width=80)
                    answer_btn = gr.Button("Search & answer", variant="primary", elem_id="rag-answer", scale=3,
                                           min_width=120)
                    stop_btn = gr.Button("Stop", elem_id="rag-stop", scale=1, min_width=60)
                with gr.Accordion("Answer settings", open=False):
                    max_tokens = gr.Slider(TOKENS_STEP, MAX_REPLY_TOKENS, value=160, step=TOKENS_STEP,
                                           label="Max new tokens", elem_id="rag-max-tokens")
                    temperature = gr.Slider(0, 1.5, value=0.0, step=0.05, label="Temperature (0 = greedy)",
                                            elem_id="rag-temperature")
                    penalty = gr.Slider(1.0, 2.0, value=REPETITION_PENALTY, step=0.05, label="Repetition penalty",
                                        info="1 = off; small models loop without it", elem_id="rag-penalty")
            with gr.Column(scale=3):
                with gr.Row():
                    answer = gr.Markdown("<div class='gs-empty'>The answer appears here, streamed.</div>",
                                         elem_id="rag-answer-text")
                    base_answer = gr.Markdown(visible=False, elem_id="rag-base-answer-text")
                used = gr.Markdown(elem_id="rag-used")
                results = gr.HTML("<div class='gs-empty'>Results appear here: title, year, genre, distance and "
                                  "plot of each film found.</div>", elem_id="rag-results")
                with gr.Accordion("Prompt sent to the model", open=False):
                    prompt = gr.Textbox(show_label=False, lines=12, max_lines=40, interactive=False,
                                        elem_id="rag-prompt")
        gr.Examples(EXAMPLES, inputs=[query, year_min, year_max, genres], label="Example questions")
        held_out = gr.Dataset(components=[query], samples=[], visible=False, elem_id="rag-held-out",
                              label=f"Held-out questions of the answering model's run, never trained on: a click "
                                    f"asks one as its evaluation does (top-k {PROMPT_TOP_K}, no filters, greedy, no "
                                    "repetition penalty, answers as long as in training: see Answer settings)")
        with gr.Accordion("Movie table", open=False):
            table_msg = gr.Markdown()
            with gr.Row():
                embedder = gr.Textbox(label="Embedder", value=BUNDLED_EMBEDDER, scale=3,
                                      info="bundled/all-MiniLM-L6-v2 works offline; any sentence-transformers id "
                                           "(e.g. BAAI/bge-small-en-v1.5) when online")
                rebuild_btn = gr.Button("Re-embed all films", scale=1)
                bundled_btn = gr.Button("Add bundled films", scale=1)
            upload = gr.File(label="Your films (CSV / TSV / JSONL)", file_types=UPLOAD_TYPES, type="filepath")
            stored = gr.State(None)
            with gr.Row():
                mapping = [gr.Dropdown(label=label, choices=[], allow_custom_value=False) for _, label in MAP_FIELDS]
            with gr.Row():
                add_btn = gr.Button("Add these films", scale=3)
                cancel_btn = gr.Button("Cancel adding", elem_id="rag-cancel-ingest", scale=1, min_width=80)
            with gr.Row():
                wiki_rows = gr.Number(label="Wikipedia plots: rows to read", value=2000, precision=0, minimum=1,
                                      maximum=40000)
                wiki_btn = gr.Button("Add the seed's Wikipedia movie plots (online)")

    search_inputs = [query, year_min, year_max, genres, top_k, mode]
    search_btn.click(do_search, search_inputs, [results, status, used, prompt], concurrency_id="rag_search",
                     concurrency_limit=4)
    answer_inputs = search_inputs + [model, compare, max_tokens, temperature, penalty]
    answer_outputs = [results, status, answer, used, prompt, base_answer]
    answer_event = answer_btn.click(do_answer, answer_inputs, answer_outputs, concurrency_id="chat",
                                    concurrency_limit=2)
    submit_event = query.submit(do_answer, answer_inputs, answer_outputs, concurrency_id="chat", concurrency_limit=2)
    stop_btn.click(None, None, None, cancels=[answer_event, submit_event])
    table_outputs = [table_msg, status, genres, embedder]
    write = dict(concurrency_id="rag_write", concurrency_limit=1)
    bundled_btn.click(build_bundled, embedder, table_outputs, **write)
    upload.upload(receive_upload, upload, [stored, table_msg, *mapping])
    add_btn.click(add_upload, [stored, embedder, *mapping], table_outputs, **write)
    wiki_btn.click(add_wiki, [wiki_rows, embedder], table_outputs, **write)
    # Not in the write queue: it must run while an ingest holds that queue. The ingest ends itself.
    cancel_btn.click(cancel_ingest, None, table_msg, concurrency_id="rag_cancel", concurrency_limit=None)
    rebuild_btn.click(rebuild, embedder, table_outputs, **write)

    def models(choice, offered_value):
        """The answering models on disk; the choice follows the newest Movie questions run until the user picks."""
        choices = chat_choices()
        new = refreshed_choice(choice, offered_value, choices, source=ANSWER_SOURCE)
        return dropdown_update(choices, choice, new), default_choice(choices, source=ANSWER_SOURCE)

    def load(choice, offered_value):
        """Page load: the table's state, the chat models on disk, and the mode that suits the table's size."""
        info = store.info()
        return (*table_state(store, info), *models(choice, offered_value), gr.Radio(value=default_mode(info.rows)))

    followed.click(models, [model, offered], [model, offered], show_progress="hidden", trigger_mode="always_last",
                   api_visibility="private")
    model.change(held_out_examples, model, held_out, show_progress="hidden", api_visibility="private")
    # Cleared of filters: the run's questions were asked over the whole table.
    held_out.click(held_out_settings, [held_out, model],
                   [query, top_k, year_min, year_max, genres, max_tokens, temperature, penalty], show_progress="hidden",
                   api_visibility="private")
    follow_models = watch.follow("rag-model", "rag-models-refresh", ("models",))
    return Tab(loads=(PageLoad(load, [model, offered], [status, genres, embedder, model, offered, mode]),
                      PageLoad(held_out_examples, [model], [held_out])),
               scripts=(follow_models,))
