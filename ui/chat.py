"""Chat tab: talk to a tuned model (final or any checkpoint) or a base model, streamed; compare two
models side by side; score replies with the run's rewards; export a run."""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path

import gradio as gr

from pipeline import export, runner
from pipeline.models.gguf_export import DEFAULT_OUT_TYPE, OUT_TYPES, OUT_TYPES_HELP
from pipeline.run_folder import run_files
from pipeline.setup.config import BUNDLED_MODEL_ID, RunConfig
from pipeline.training.generate import (
    MAX_REPLY_TOKENS, ChatModelError, ModelCache, ModelChoice, chat_choices, empty_reply, error_reply, is_error_reply,
    run_for_choice, stream_chat,
)
from pipeline.rewards import build_rewards, score
from ui import views, watch
from ui.prompt_names import short_prompt
from ui.held_out import held_out_columns, held_out_offers, training_context
from ui.model_choices import default_choice, example_label, follow_runs, model_b, reread_models
from ui.tab import PageLoad, Tab, TabContext, acting

ASSETS = Path(__file__).resolve().parent.parent / "assets"
EXAMPLES = json.loads((ASSETS / "prompts" / "chat_examples.json").read_text(encoding="utf-8"))
SCORE_TIMEOUT_S = 30.0  # one reward scoring one reply: past this it counts as missing, and the reply's score says so


def _run_of(choice: str | None) -> Path | None:
    try:
        return run_for_choice(choice) if choice else None
    except ChatModelError:
        return None


def scoring_run(choice: str, partner: str | None = None) -> tuple[Path | None, str]:
    """The run whose rewards score a reply, and whose it is: the model's own run; for a base model, the run it is
    set beside (`partner`, the other side's model), so both replies are scored alike; (None, "") for neither."""
    for run_dir, whose in ((_run_of(choice), ""), (_run_of(partner), ", as the other side's run")):
        if run_dir is not None:
            return run_dir, whose
    return None, ""


def rewards_for(choice: str, partner: str | None = None) -> tuple[list, str]:
    """The reward specs a reply is scored with (those of `scoring_run`, else the default run's), and whose."""
    run_dir, whose = scoring_run(choice, partner)
    if run_dir is not None:
        return RunConfig.load(run_dir / run_files.CONFIG).rewards, f"rewards of {run_dir.name}{whose}"
    return RunConfig().rewards, "the default run's rewards"


def chat_scorable(specs: list, has_message: bool = True, has_answer: bool = False) -> tuple[list, list[str]]:
    """The rewards that can score a chat reply, and a note for each one left out. A message typed in the chat has no
    reference answer, so a reward that compares with one (numeric_tolerance, exact_answer) would only score
    "missing" (a run's held-out prompt brings its own: `has_answer`); a reward that compares with the text being
    summarised (post_similarity) compares with the user's message, as the reward test bench compares with its
    prompt, so it needs one.

    >>> from pipeline.setup.config import RewardSpec
    >>> specs = [RewardSpec("length_target", 1.0, {}), RewardSpec("post_similarity", 2.0, {}),
    ...          RewardSpec("numeric_tolerance", 2.0, {})]
    >>> kept, left = chat_scorable(specs)
    >>> [s.name for s in kept], left
    (['length_target', 'post_similarity'], ['numeric_tolerance (compares with a reference answer)'])
    >>> [s.name for s in chat_scorable(specs, has_message=False)[0]]
    ['length_target']
    >>> chat_scorable(specs, has_answer=True)[1]
    []
    """
    from pipeline.rewards.registry import reward_registry

    kept, left = [], []
    for spec in specs:
        if reward_registry.needs_answer(spec.name) and not has_answer:
            left.append(f"{spec.name} (compares with a reference answer)")
        elif reward_registry.needs_source(spec.name) and not has_message:
            left.append(f"{spec.name} (compares with the message replied to)")
        else:
            kept.append(spec)
    return kept, left


def content_text(content) -> str:
    """Text of a Chatbot message: Gradio 6 sends content back as a list of {"type": "text", "text": ...}."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    if isinstance(content, dict):
        return str(content.get("text", ""))
    return ""


def _messages(history: list[dict], system: str) -> list[dict]:
    msgs = [{"role": "system", "content": system}] if (system or "").strip() else []
    # A reply that failed is shown in the chat but is not the model's words: it stays out of the context.
    return msgs + [{"role": m["role"], "content": content_text(m.get("content"))} for m in history
                   if m.get("role") in ("user", "assistant") and content_text(m.get("content"))
                   and not is_error_reply(m)]


def make_handlers(cache: ModelCache):
    def respond(message, hist_a, hist_b, choice_a, choice_b, side_by_side, system, max_tokens, temperature, top_p):
        """Stream one or two replies; both histories live in this browser session only."""
        message = (message or "").strip()
        if not message:
            yield hist_a, hist_b, gr.skip()
            return
        targets = [("a", choice_a, list(hist_a or []))]
        if side_by_side:
            targets.append(("b", choice_b, list(hist_b or [])))
        histories = {"a": list(hist_a or []), "b": list(hist_b or [])}
        for key, _, hist in targets:
            histories[key] = hist + [{"role": "user", "content": message}, {"role": "assistant", "content": ""}]
        yield histories["a"], histories["b"], ""

        updates: queue.Queue = queue.Queue()
        stop = threading.Event()

        def run(key: str, choice: str, hist: list[dict]):
            try:
                model, tok = cache.get(choice)
                msgs = _messages(hist + [{"role": "user", "content": message}], system)
                for text in stream_chat(model, tok, msgs, max_new_tokens=int(max_tokens),
                                        temperature=float(temperature), top_p=float(top_p), stop=stop):
                    updates.put((key, {"role": "assistant", "content": text}))
            except Exception as exc:  # noqa: BLE001 - shown in the chat, never a stack trace
                updates.put((key, error_reply(exc)))
            finally:
                updates.put((key, None))

        threads = [threading.Thread(target=run, args=t, daemon=True) for t in targets]
        for t in threads:
            t.start()
        pending = len(threads)
        try:
            while pending:
                key, reply = updates.get()
                if reply is None:
                    pending -= 1
                    continue
                histories[key][-1] = reply
                yield histories["a"], histories["b"], gr.skip()
        finally:
            stop.set()  # Stop pressed or page closed: end both generations
        blank = [key for key, _, _ in targets if not content_text(histories[key][-1].get("content")).strip()]
        for key in blank:  # ended on its own without a word: say so rather than leave an empty bubble
            histories[key][-1] = empty_reply()
        if blank:
            yield histories["a"], histories["b"], gr.skip()

    def score_replies(hist_a, hist_b, choice_a, choice_b, side_by_side):
        rows, reference = [], None
        for label, hist, choice in (("A", hist_a, choice_a), ("B", hist_b, choice_b)):
            if label == "B" and not side_by_side:
                continue
            # The last reply, and the user's message it answers: the text a summary reward compares with.
            reply = message = replied_to = None
            for m in hist or []:
                text = content_text(m.get("content"))
                if m.get("role") == "user":
                    message = text
                elif m.get("role") == "assistant" and text and not is_error_reply(m):
                    reply, replied_to = text, message
            if reply is None:
                continue
            partner = (choice_b if label == "A" else choice_a) if side_by_side else None
            specs, source = rewards_for(choice, partner)
            # A run's held-out prompt, sent as it is: its reference answer (and its post) score as in training.
            columns = held_out_columns(scoring_run(choice, partner)[0], replied_to)
            specs, left_out = chat_scorable(specs, has_message=bool((replied_to or "").strip()),
                                            has_answer="answer" in columns)
            not_scored = (f" Not scored here: {', '.join(left_out)}, which a typed message has none of (a held-out "
                          "prompt of the run brings its own)." if left_out else "")
            if not specs:
                rows.append(f"**{label}** ({source}): none of them can score a chat reply.{not_scored}")
                continue
            funcs, weights = build_rewards(specs, policy="skip", timeout_s=SCORE_TIMEOUT_S)
            extra = {key: [value] for key, value in columns.items()}
            if (replied_to or "").strip() and "source" not in extra:
                extra["source"] = [replied_to]
            result = score(funcs, weights, [reply], **extra)
            scores = ", ".join(f"{name} = {vals[0]:.3g}" if vals[0] is not None else f"{name} = -"
                               for name, vals in result["per_reward"].items())
            total = result["total"][0]
            rows.append(f"**{label}** ({source}): {scores}; weighted total **{total:.3g}**.{not_scored}"
                        if total is not None else f"**{label}**: could not be scored")
            rows += [f"⚠️ {warning}" for f in funcs for warning in f.warnings]  # a reward that failed or timed out
            if "answer" in columns:
                reference = short_prompt(str(columns["answer"]), 120).replace("`", "'")
        if reference is not None:  # once, under both replies
            rows.append(f"Reference answer of this held-out prompt: `{reference}`")
        return "\n\n".join(rows) or "Nothing to score yet: send a message first."

    return respond, score_replies


# ---- export ------------------------------------------------------------------------------------


# The Export panel before anything is zipped.
EXPORT_EMPTY = ("<div class='gs-empty'>Pick a tuned run or checkpoint as <b>Model A</b> above, then zip it: its merged "
                "model (loads with transformers alone) and its LoRA adapter (small; loads on top of the base model "
                "with peft) appear here as downloads, with the code that loads them. <b>GGUF</b> writes the merged "
                "model as one file that llama.cpp, Ollama and LM Studio run. <b>Push to hub</b> uploads the "
                "same two folders to a Hub repo of yours; it needs a network and a write token, which is used for "
                "that push only.</div>")


def exported_views(kind: str):
    """After an export: the downloads show once there is something to download (and hide again after an export
    that failed), with the code for what was exported ("zip": load it in Python; "gguf": run it)."""

    def views(files):
        return (gr.File(visible=bool(files)), gr.Code(visible=bool(files) and kind == "zip"),
                gr.Code(visible=bool(files) and kind == "gguf"))

    return views


def export_choice(choice: str) -> tuple[Path, int | None]:
    """The run and, for a checkpoint, the step behind model A's choice; ChatModelError or ExportError says
    why it can't be exported."""
    picked = ModelChoice.parse(choice)
    step = picked.step if picked.kind == "checkpoint" else None
    return export.exportable(run_for_choice(choice), step), step


def export_run(choice: str, operators=(), request: gr.Request = None, progress=gr.Progress()):
    """Zip model A's merged model and adapter (a run's, or a checkpoint's) under <data>/exports and show how
    to load them."""
    try:
        run_dir, step = export_choice(choice)
        files = export.export_zips(
            run_dir, lambda part: progress(0.1 if part == run_files.MERGED else 0.8, desc=f"Zipping {part}/"),
            actor=acting(request, operators), step=step)
    except ChatModelError as exc:
        return None, f"⚠️ {exc}", ""
    except export.ExportError as exc:
        return None, str(exc), ""
    name = export.export_name(run_dir, step)
    return files, f"Exported **{name}**: merged model and adapter.", export.load_snippet(name)


def export_gguf(choice: str, out_type: str, operators=(), request: gr.Request = None, progress=gr.Progress()):
    """Write model A's merged model (a run's, or a checkpoint's) as one GGUF file under <data>/exports and show
    how to run it."""
    try:
        run_dir, step = export_choice(choice)
        path = export.export_gguf(run_dir, out_type, lambda done: progress(done, desc=f"Writing {out_type} GGUF"),
                                  actor=acting(request, operators), step=step)
    except ChatModelError as exc:
        return None, f"⚠️ {exc}", ""
    except export.ExportError as exc:
        return None, str(exc), ""
    size = Path(path).stat().st_size / 2**20
    return ([path], f"Exported **{export.export_name(run_dir, step)}** as GGUF ({out_type}, {size:,.0f} MiB): one "
            "file for llama.cpp, Ollama or LM Studio.", export.gguf_snippet(Path(path).name))


def push_to_hub(choice: str, repo_id: str, token: str, operators=(), request: gr.Request = None):
    """Start the push of model A's merged model as a runner job (kind "push") and return at once; the message
    then follows it (push_refresh). Whose run it is, then the Hub, are checked first, in seconds, so a refused or
    offline push says so at once."""
    from pipeline.models.hub import HubUnreachable, require_hub
    from pipeline.run_folder.owners import refusal

    try:
        run_dir = run_for_choice(choice)
        if ModelChoice.parse(choice).kind == "checkpoint":
            return ("Push to hub uploads a run's final model: pick the run's \"(tuned, final)\" entry as Model A, "
                    "or zip this checkpoint and upload that.")
    except ChatModelError as exc:
        return f"⚠️ {exc}"
    problem = export.push_problem(run_dir, repo_id, token)
    if problem:
        return problem
    actor = acting(request, operators)
    if (not_yours := refusal(run_dir, actor, "push it to the Hub")) is not None:
        return f"⚠️ {not_yours}"
    try:
        require_hub(f"repository '{repo_id}'", "Export the zip instead and upload it from a connected machine.")
        runner.start("push", run_dir, actor=actor, repo_id=repo_id, token=token)
    except (HubUnreachable, RuntimeError, OSError) as exc:  # RunnerError says why
        return f"⚠️ {exc}"
    return f"⏫ Pushing **{run_dir.name}** to `{repo_id.strip()}`..."


def push_message(run_dir: Path | None) -> str | None:
    """The push job's state in words; None when the run was never pushed."""
    return views.push_markdown(run_dir.name, runner.status("push", run_dir)) if run_dir is not None else None


def push_refresh(choice: str):
    """Model A's push message, redrawn when a push's state file changed (the page's poll, ui/watch.py); left as
    it is when model A is not a run, or a run that was never pushed."""
    try:
        message = push_message(run_for_choice(choice))
    except ChatModelError:
        return gr.skip()
    return gr.skip() if message is None else message


def held_out_pick(sample: list, choice_a: str | None):
    """A held-out prompt clicked: a new conversation as the run saw that prompt. Its system prompt and earlier
    turns (a worked example) go in, on both sides, and the prompt into the box; the last scores go with the
    conversation they scored. (box, system prompt, chat A, chat B, scores)"""
    text = sample[0] if sample else ""
    found = training_context(_run_of(choice_a), text)
    if found is None:  # the run changed under the page: the text alone
        return text, gr.skip(), gr.skip(), gr.skip(), gr.skip()
    system, turns = found
    return text, system, turns, [dict(m) for m in turns], ""


def held_out_examples(choice: str | None) -> gr.Dataset:
    """Model A's run's held-out prompts as examples to send (hidden for a base model): the prompts the run was
    probed and evaluated on, in the form it trained on, where what GRPO changed shows best."""
    try:
        offers = held_out_offers(run_for_choice(choice)) if choice else []
    except ChatModelError:
        offers = []
    return gr.Dataset(samples=[[text] for text, _ in offers], sample_labels=[example_label(name) for _, name in offers],
                      visible=bool(offers))


# ---- layout ------------------------------------------------------------------------------------


# What an empty conversation says: where models come from, and what to try first.
CHAT_PLACEHOLDER = (
    "**Send a message, or pick an example below.** The replies stream from Model A.\n\n"
    "A run joins the model list when it saves a checkpoint or finishes: its merged model, or the base model with "
    "a checkpoint's adapter. Tick *Side by side* to ask it and the model it started from the same thing.")
CHAT_PLACEHOLDER_B = "Model B answers every message you send, beside Model A."
CHAT_BUTTONS = ["copy", "copy_all"]


def build(ctx: TabContext) -> Tab:
    """Add the Chat tab (the tabs' contract, ui/tab.py). A page load re-reads the model lists."""
    respond, score_replies = make_handlers(ctx.cache)
    with gr.Tab("Chat", id="chat"):
        ops = gr.State(sorted(ctx.operators))  # logins that may export and push every run (the others: their own)
        gr.Markdown("Talk to a tuned model, a checkpoint, or a base model. Tick *side by side* to send each "
                    "message to two models at once and see what GRPO changed.")
        with gr.Row():
            # Filled again on every page load; the start-up list makes the API usable without a page.
            choice_a = gr.Dropdown(label="Model A", choices=chat_choices(), value=default_choice(),
                                   elem_id="chat-model-a", scale=3)
            side_by_side = gr.Checkbox(label="Side by side", value=False, elem_id="chat-side", scale=1)
            choice_b = gr.Dropdown(label="Model B", choices=chat_choices(), value=BUNDLED_MODEL_ID, visible=False,
                                   elem_id="chat-model-b", scale=3)
            refresh = gr.Button("↻ models", size="sm", scale=0, elem_id="chat-refresh")
            followed = gr.Button("Re-read the models", elem_id="chat-models-refresh", elem_classes=["gs-hidden"])
            offered_a = gr.State(choice_a.value)  # the default Model A was given, to tell it from a user's pick
            offered_b = gr.State(choice_b.value)  # likewise for Model B, which follows model A's base model
        with gr.Row():
            # No "share" button: it posts the conversation to Hugging Face Spaces discussions, which an offline or
            # shared app should not offer.
            chat_a = gr.Chatbot(label="A", height=420, elem_id="chat-a", placeholder=CHAT_PLACEHOLDER,
                                buttons=CHAT_BUTTONS)
            chat_b = gr.Chatbot(label="B", height=420, visible=False, elem_id="chat-b",
                                placeholder=CHAT_PLACEHOLDER_B, buttons=CHAT_BUTTONS)
        with gr.Row():
            box = gr.Textbox(placeholder="Ask something, or pick an example below", show_label=False, scale=6,
                             elem_id="chat-input")
            send = gr.Button("Send", variant="primary", scale=1, elem_id="chat-send")
            stop = gr.Button("Stop", scale=1, elem_id="chat-stop")
            clear = gr.Button("Clear", scale=1)
        gr.Examples([[e] for e in EXAMPLES], inputs=box, label="Example prompts")
        held_out = gr.Dataset(components=[box], samples=[], visible=False, elem_id="chat-held-out",
                              label="Held-out prompts of model A's run, never trained on. A click starts a new "
                                    "conversation as the run saw the prompt: its system prompt and any worked example "
                                    "included (see Generation settings)")
        with gr.Row():
            score_btn = gr.Button("Score last replies with the run's rewards", elem_id="chat-score")
        scores = gr.Markdown(elem_id="chat-scores")
        with gr.Accordion("Generation settings", open=False):
            system = gr.Textbox(label="System prompt", placeholder="Optional", elem_id="chat-system")
            with gr.Row():
                max_tokens = gr.Slider(8, MAX_REPLY_TOKENS, value=96, step=8, label="Max new tokens",
                                       elem_id="chat-max-tokens")
                temperature = gr.Slider(0, 1.5, value=0.7, step=0.05, label="Temperature (0 = greedy)")
                top_p = gr.Slider(0.1, 1.0, value=0.95, step=0.05, label="Top-p")
        with gr.Accordion("Export a run", open=False):
            with gr.Row(equal_height=True):
                export_btn = gr.Button("Zip merged model + adapter of model A", scale=2)
                gguf_type = gr.Dropdown(label="GGUF type", choices=[(label, name) for name, label in OUT_TYPES.items()],
                                        value=DEFAULT_OUT_TYPE, info=OUT_TYPES_HELP, scale=2, elem_id="chat-gguf-type")
                gguf_btn = gr.Button("GGUF of model A (llama.cpp, Ollama)", scale=1, elem_id="chat-gguf")
            export_msg = gr.Markdown(EXPORT_EMPTY, elem_id="chat-export-msg")
            # Shown once a run is zipped: its two zips, and the code that loads them.
            export_files = gr.File(label="Downloads", file_count="multiple", interactive=False, visible=False,
                                   elem_id="chat-export-files")
            snippet = gr.Code(label="Load it with transformers", language="python", visible=False,
                              elem_id="chat-export-code")
            run_snippet = gr.Code(label="Run it with llama.cpp or Ollama", language="shell", visible=False,
                                  elem_id="chat-gguf-code")
            with gr.Row():
                repo = gr.Textbox(label="Hub repo id", placeholder="your-name/my-grpo-model")
                token = gr.Textbox(label="Hub token", type="password")
                push = gr.Button("Push to hub", elem_id="chat-push")
            push_msg = gr.Markdown(elem_id="chat-push-msg")
        # The push's progress: the page's poll presses this hidden button when a push's state file changed.
        push_refreshed = gr.Button("Refresh the push message", elem_id="chat-push-refresh", elem_classes=["gs-hidden"])


    def follow_a(a, b, offered_b_value):
        """Model A changed: Model B moves to its base model, unless the user picked B."""
        choices_b, b = model_b(a, b, offered_b_value, chat_choices())
        return gr.Dropdown(choices=choices_b, value=b), b

    inputs = [box, chat_a, chat_b, choice_a, choice_b, side_by_side, system, max_tokens, temperature, top_p]
    send_event = send.click(respond, inputs, [chat_a, chat_b, box], concurrency_id="chat", concurrency_limit=2)
    submit_event = box.submit(respond, inputs, [chat_a, chat_b, box], concurrency_id="chat", concurrency_limit=2)
    stop.click(None, None, None, cancels=[send_event, submit_event])
    clear.click(lambda: ([], [], ""), None, [chat_a, chat_b, scores])
    side_by_side.change(lambda on: (gr.Dropdown(visible=on), gr.Chatbot(visible=on)), side_by_side,
                        [choice_b, chat_b])
    models = [choice_a, choice_b, offered_a, offered_b]
    refresh.click(reread_models, models, models, api_name="load_choices")  # the API name it has always had
    followed.click(follow_runs, [*models, chat_a], models, show_progress="hidden", trigger_mode="always_last",
                   api_visibility="private")
    choice_a.change(held_out_examples, choice_a, held_out, show_progress="hidden", api_visibility="private")
    choice_a.change(follow_a, [choice_a, choice_b, offered_b], [choice_b, offered_b], show_progress="hidden",
                    api_visibility="private")
    held_out.click(held_out_pick, [held_out, choice_a], [box, system, chat_a, chat_b, scores],
                   show_progress="hidden", api_visibility="private")
    score_btn.click(score_replies, [chat_a, chat_b, choice_a, choice_b, side_by_side], scores)
    export_btn.click(export_run, [choice_a, ops], [export_files, export_msg, snippet], api_name="export_run").then(
        exported_views("zip"), export_files, [export_files, snippet, run_snippet], show_progress="hidden",
        api_visibility="private")
    gguf_btn.click(export_gguf, [choice_a, gguf_type, ops], [export_files, export_msg, run_snippet],
                   api_name="export_gguf").then(
        exported_views("gguf"), export_files, [export_files, snippet, run_snippet], show_progress="hidden",
        api_visibility="private")
    # Private: Gradio keeps a public event's inputs in the browser's run history (localStorage), and these carry
    # the Hub token. A private event is kept out of it (and out of the API); the page still calls it.
    push.click(push_to_hub, [choice_a, repo, token, ops], push_msg, api_visibility="private")
    push_refreshed.click(push_refresh, choice_a, push_msg, show_progress="hidden", trigger_mode="always_last",
                         api_visibility="private")
    # Only a push that starts or moves while the page is open is shown (the message starts empty, as it loads).
    follow_push = watch.follow("chat-push", "chat-push-refresh", ("push",), draw_first=False)
    # The model lists follow the runs (the hidden button above): once when the tab is first seen (a run may
    # have ended since the page loaded), then whenever a run finishes or saves a checkpoint.
    follow_models = watch.follow("chat-model-a", "chat-models-refresh", ("models",))
    # The held-out prompts follow Model A: on a page load, and on every change of it (a pick, or a newer run).
    return Tab(loads=(PageLoad(reread_models, models, models), PageLoad(held_out_examples, [choice_a], [held_out])),
               scripts=(follow_push, follow_models))
