"""RAG tab: search the movie-plot table with year/genre prefilters, then let a tuned or base model answer
from the retrieved plots (streamed). Also manages the table: bundled films, CSV uploads, the Wikipedia
CSV, and the embedder."""

from __future__ import annotations

import html
import queue
import threading
from pathlib import Path

import gradio as gr

from pipeline.run_folder.paths import data_dir
from pipeline.training.generate import (ChatModelError, ModelCache, base_choice, chat_choices,
                                       generation_error_message)
from retrieval import movies as movie_data
from retrieval.rag import REPETITION_PENALTY, build_messages, films_used, prompt_text, stream_answer
from retrieval.chunks import PlotChunks
from retrieval.glossary import expand
from retrieval.search import (DEFAULT_MODE, MAX_TOP_K, Hit, SearchError, SearchFilters, default_mode, search,
                              search_modes)
from retrieval.store import BUNDLED_EMBEDDER, MovieStore, StoreError, UpsertReport
from ui import uploads
from ui.tab import PageLoad, Tab, TabContext
from ui.chat import default_choice


def choice_label(choice: str) -> str:
    """The answering model as the dropdown names it (the value itself for a model typed in)."""
    return next((label for label, value in chat_choices() if value == choice), str(choice))

UPLOAD_TYPES = [".csv", ".tsv", ".jsonl"]
MAP_FIELDS = [("title", "Title"), ("release_year", "Release year"), ("plot", "Plot"), ("genre", "Genre"),
              ("director", "Director"), ("id", "Id")]
EXAMPLES = [
    ["What's common in movies where the protagonist turns out to be the bad guy?", 0, 1989, []],
    ["A story told by someone who is already dead", 0, 0, []],
    ["Robots or computers that turn against their makers", 1960, 2000, ["Science Fiction"]],
    ["A heist where the crew is betrayed by one of its own", 0, 0, ["Crime", "Thriller"]],
]


# ---- rendering (pure) --------------------------------------------------------------------------


def status_html(info) -> str:
    if not info.rows:
        return ("<div class='gs-empty'>No movie table yet. The first search builds it from the 330 bundled films "
                "(about 20 s on a laptop CPU), or open <b>Movie table</b> below to build it now or add your own "
                "CSV.</div>")
    years = f"{info.year_min}–{info.year_max}" if info.year_min is not None else "-"
    return (f"<div class='gs-ok'>{info.rows} films · {years} · {len(info.genres)} genres · embedder "
            f"<code>{html.escape(str(info.embedder))}</code> ({info.dims}-d) · LanceDB at "
            f"<code>{html.escape(shown_location(info.uri, data_dir()))}</code></div>")


def shown_location(uri: str, data: Path) -> str:
    """Where the table lives, as the page shows it: relative to the app's data folder `data` (the server's own
    paths stay off a page that other users of a shared app see); a location elsewhere shows its last folder only.

    >>> shown_location("/srv/studio/lancedb", Path("/srv/studio")), shown_location("/mnt/x/films.lance", Path("/srv"))
    ('<data folder>/lancedb', '…/films.lance')
    """
    path = Path(uri)
    try:
        return f"<data folder>/{path.relative_to(data)}"
    except ValueError:
        return f"…/{path.name}"


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
        if store.table() is None:
            report = store.upsert(movie_data.load_bundled(), progress=_progress_fn(progress))
            gr.Info(f"Built the movie table: {report.summary()}")
        if uses_chunks:
            # Sentences of films added since the last search are embedded once (nothing when none were).
            chunks.sync(progress=_progress_fn(progress))

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
        yield results_html(hits, filters, used) + note, gr.skip(), view("main"), used_markdown(hits, used), gr.skip(), \
            gr.skip()

    return do_search, do_answer


def _progress_fn(progress):
    def report(done: int, total: int, what: str) -> None:
        if total:
            progress((done, total), desc=what, unit="plots")
    return report


def bundled_genres() -> list[str]:
    return sorted({m.genre for m in movie_data.load_bundled()})


def genre_choices(info) -> list[str]:
    """The table's genres; before the first build, those of the bundled films it will be built from."""
    return info.genres if info.rows else bundled_genres()


def table_state(store: MovieStore, info=None):
    info = info or store.info()
    return (status_html(info), gr.CheckboxGroup(choices=genre_choices(info)),
            gr.Textbox(value=info.embedder or BUNDLED_EMBEDDER))


def _finished(report, what: str) -> str:
    """The message after an ingest: done, or cancelled with how to resume."""
    if report.cancelled:
        return f"⏹ {what}: {report.summary()}"
    return f"✓ {what}: {report.summary()}"


class IngestJobs:
    """The Cancel flag of each session's running ingest (writes are queued one at a time, so a session has
    at most one). Keyed by the Gradio session, so Cancel in one browser never stops another's upload."""

    def __init__(self):
        self._flags: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(request) -> str:
        return getattr(request, "session_hash", None) or "local"

    def start(self, request) -> threading.Event:
        flag = threading.Event()
        with self._lock:
            self._flags[self._key(request)] = flag
        return flag

    def finish(self, request, flag: threading.Event) -> None:
        with self._lock:
            if self._flags.get(self._key(request)) is flag:
                del self._flags[self._key(request)]

    def cancel(self, request) -> bool:
        with self._lock:
            flag = self._flags.get(self._key(request))
        if flag is None:
            return False
        flag.set()
        return True


def make_table_handlers(store: MovieStore):
    jobs = IngestJobs()

    def ingest(movies, embedder, progress, request) -> UpsertReport:
        flag = jobs.start(request)
        try:
            return store.upsert(movies, embedder=embedder, progress=_progress_fn(progress), cancel=flag)
        finally:
            jobs.finish(request, flag)

    def build_bundled(embedder, request: gr.Request = None, progress=gr.Progress()):
        try:
            report = ingest(movie_data.load_bundled(), embedder, progress, request)
        except (StoreError, movie_data.MovieDataError) as exc:
            return (f"⚠️ {exc}", *table_state(store))
        return (_finished(report, "Bundled films"), *table_state(store))

    def receive_upload(file_path):
        """Copy the upload under the data directory (kept server-side) and offer its columns."""
        empty = [gr.Dropdown(choices=[], value=None) for _ in MAP_FIELDS]
        try:
            upload = uploads.store_upload(file_path, UPLOAD_TYPES)
        except uploads.UploadRefused as exc:
            return None, f"⚠️ {exc}", *empty
        if upload is None:
            return None, "", *empty
        try:
            frame = movie_data.read_table(upload.path, max_rows=200)
        except movie_data.MovieDataError as exc:
            upload.discard()
            return None, f"⚠️ {upload.tell(str(exc))}", *empty
        columns = [str(c) for c in frame.columns]
        guess = movie_data.guess_mapping(columns)
        drops = [gr.Dropdown(choices=[""] + columns, value=guess.get(field) or "") for field, _ in MAP_FIELDS]
        return ({"path": str(upload.path), "name": upload.name},
                f"{upload.name}: {len(columns)} columns. Check the mapping, then add the films.", *drops)

    # One parameter per MAP_FIELDS entry, in its order: Gradio injects request and progress only into
    # parameters before any *args (with `*mapping_values` the upload showed no progress at all).
    def add_upload(stored, embedder, title_col, year_col, plot_col, genre_col, director_col, id_col,
                   request: gr.Request = None, progress=gr.Progress()):
        if not stored:
            return ("Upload a CSV first.", *table_state(store))
        columns = (title_col, year_col, plot_col, genre_col, director_col, id_col)
        mapping = {field: (value or None) for (field, _), value in zip(MAP_FIELDS, columns, strict=True)}
        try:
            movies, problems = movie_data.read_movies_file(stored["path"], mapping, skip_bad=True,
                                                           display_name=stored["name"])
            report = ingest(movies, embedder, progress, request)
        except (StoreError, movie_data.MovieDataError) as exc:
            return (f"⚠️ {exc}", *table_state(store))
        note = ""
        if problems:
            note = f"\n\n{len(problems)} row{'s' if len(problems) > 1 else ''} skipped, e.g. {problems[0]}"
        return (_finished(report, "Upload") + note, *table_state(store))

    def add_wiki(max_rows, embedder, request: gr.Request = None, progress=gr.Progress()):
        try:
            progress(0, desc="Downloading the Wikipedia movie-plots CSV")
            movies, problems = movie_data.read_wiki_plots(int(max_rows or 2000))
            report = ingest(movies, embedder, progress, request)
        except Exception as exc:  # noqa: BLE001 - offline, hub errors, parse errors: all shown, app keeps serving
            return (f"⚠️ {exc}", *table_state(store))
        return (_finished(report, "Wikipedia plots") + f" ({len(problems)} rows skipped)", *table_state(store))

    def rebuild(embedder, progress=gr.Progress()):
        try:
            if store.table() is None:
                report = store.upsert(movie_data.load_bundled(), embedder=embedder, progress=_progress_fn(progress))
            else:
                report = store.rebuild(embedder, progress=_progress_fn(progress))
        except StoreError as exc:
            return (f"⚠️ {exc}", *table_state(store))
        return (f"✓ Re-embedded every film with {embedder or BUNDLED_EMBEDDER}: {report.summary()}",
                *table_state(store))

    def cancel_ingest(request: gr.Request = None):
        if jobs.cancel(request):
            return ("Cancelling: the batch being embedded is finished and written first (a few seconds), so the "
                    "table only holds whole batches. Add the same films again later to resume.")
        return "Nothing is being added from this page."

    return build_bundled, receive_upload, add_upload, add_wiki, rebuild, cancel_ingest


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
                    top_k = gr.Slider(1, MAX_TOP_K, value=5, step=1, label="Top-k films")
                    mode = gr.Radio(search_modes.choices(), value=DEFAULT_MODE, label="Search",
                                    elem_id="rag-mode")
                with gr.Row():
                    model = gr.Dropdown(label="Answering model", choices=chat_choices(), value=default_choice(),
                                        elem_id="rag-model", scale=3)
                    compare = gr.Checkbox(label="Compare with base", value=False, elem_id="rag-compare", scale=1,
                                          info="a tuned run's base model answers from the same films, beside it")
                with gr.Row():
                    search_btn = gr.Button("Search", elem_id="rag-search", scale=2, min_width=80)
                    answer_btn = gr.Button("Search & answer", variant="primary", elem_id="rag-answer", scale=3,
                                           min_width=120)
                    stop_btn = gr.Button("Stop", elem_id="rag-stop", scale=1, min_width=60)
                with gr.Accordion("Answer settings", open=False):
                    max_tokens = gr.Slider(16, 512, value=160, step=16, label="Max new tokens", elem_id="rag-max-tokens")
                    temperature = gr.Slider(0, 1.5, value=0.0, step=0.05, label="Temperature (0 = greedy)")
                    penalty = gr.Slider(1.0, 2.0, value=REPETITION_PENALTY, step=0.05, label="Repetition penalty",
                                        info="1 = off; small models loop without it")
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

    def load(choice):
        """Page load: the table's state, the chat models on disk, and the mode that suits the table's size."""
        choices = chat_choices()
        values = [v for _, v in choices]
        info = store.info()
        return (*table_state(store, info), gr.Dropdown(choices=choices, value=choice if choice in values
                                                       else default_choice()),
                gr.Radio(value=default_mode(info.rows)))

    return Tab(loads=(PageLoad(load, [model], [status, genres, embedder, model, mode]),))
