"""Train tab: set up a GRPO run, start/stop it, and watch it live (charts, groups, health, log),
plus the runs list. Handlers read the form, call pipeline/, and return updates; the live view
follows the run directory (a poll in the page asks for a stamp per part of the view every second and the
parts whose stamp moved are redrawn), so a page reload or an app restart picks a run up again."""

from __future__ import annotations

import dataclasses
import functools
import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from pipeline import live, run_files, runner, runs, token_log
from pipeline.jobs import EVAL_LIMIT
from pipeline.config import PRESETS, BUNDLED_MODEL_ID, ConfigError, RunConfig, apply_preset
from pipeline.data import DatasetError, load_rows, read_table
from pipeline.models import catalog_choices, check_processes, gpu_count
from pipeline.preflight import SCAN_PROMPTS
from pipeline.rewards import reward_registry
from ui import token_views, uploads, views, watch
from ui.tab import PageLoad, Tab, TabContext, acting
from ui.form import (
    REWARD_COLUMNS, SOURCES, config_to_form, form_fields, form_keys, form_to_config, number_bounds, reward_rows,
)

# The "All settings" accordion is built open, so Gradio mounts its fields with the page, and folded once the
# page has loaded; until then studio.css keeps its content hidden. Built closed, a field typed into while
# the page was still loading was set back to its initial value (2 of 6 tries in a probe).
CLOSE_SETTINGS_JS = """() => {
  const header = document.querySelector('#all-settings button.label-wrap');
  if (header && header.classList.contains('open')) header.click();
  document.body.classList.add('gs-settings-ready');
}"""


def settings_accordion() -> gr.Accordion:
    """The "All settings" accordion: built open, folded on page load (CLOSE_SETTINGS_JS)."""
    return gr.Accordion("All settings", open=True, elem_id="all-settings")


TAB_LABEL = "Train"
UPLOAD_TYPES = [".csv", ".jsonl", ".json"]
# "problems" next to the state, so a damaged run's reason is seen without scrolling (empty for healthy runs).
RUN_COLUMNS = ["run", "state", "owner", "problems", "model", "dataset", "rewards", "step", "max_steps", "final_reward",
               "duration_s"]


def reward_docs() -> str:
    lines = ["| reward | what it scores | parameters |", "|---|---|---|"]
    for d in reward_registry.describe():
        params = ", ".join(f"`{k}` ({p['help']})" for k, p in d["params"].items()) or "none"
        lines.append(f"| `{d['name']}` | {d['description']} | {params} |")
    lines.append("\nWeight 0 makes a reward a **monitor**: scored, charted and shown in the group inspector, but "
                 "left out of the advantage. A warning shows when a trained reward rises while a monitor falls.")
    return "\n".join(lines)


def hyper_component(spec: dataclasses.Field, default: Any) -> gr.components.Component:
    """One setting's component, from its RunConfig field: label, help, choices and a number's bounds come from
    the metadata."""
    meta = spec.metadata
    kwargs = dict(label=meta["label"], info=meta["help"], value=default)
    if "choices" in meta:
        return gr.Dropdown(choices=list(meta["choices"]), **kwargs)
    if isinstance(default, bool):
        return gr.Checkbox(**kwargs)
    if isinstance(default, (int, float)):
        return gr.Number(precision=0 if isinstance(default, int) else None, **number_bounds(spec), **kwargs)
    return gr.Textbox(**kwargs)


# ---- handlers (thin: form -> config -> pipeline) -----------------------------------------------


def run_names() -> list[str]:
    return [p.name for p in runs.iter_run_dirs()]


def run_path(name: str | None) -> Path | None:
    return runs.resolve_run(name)


def store_upload(file_path: str | None) -> tuple[str, gr.Dropdown, gr.Dropdown, str]:
    """Copy an upload under the data directory and offer its columns."""
    nothing = ("", gr.Dropdown(choices=[]), gr.Dropdown(choices=[]))
    try:
        upload = uploads.store_upload(file_path, UPLOAD_TYPES)
    except uploads.UploadRefused as exc:
        return *nothing, f"❌ {exc}"
    if upload is None:
        return *nothing, ""
    try:
        _, columns = read_table(upload.path)
    except DatasetError as exc:
        upload.discard()
        return *nothing, f"❌ {upload.tell(str(exc))}"
    prompt = next((c for c in columns if c.lower() in ("prompt", "question", "text", "input")), columns[0])
    answer = next((c for c in columns if c.lower() in ("answer", "solution", "target", "label")), None)
    return (str(upload.path), gr.Dropdown(choices=columns, value=prompt),
            gr.Dropdown(choices=[""] + columns, value=answer or ""), f"✓ {upload.name}: {len(columns)} columns.")


def keyed(handler: Callable[..., dict[str, Any]], components: dict[str, Any]) -> Callable[..., Any]:
    """Gradio's side of a handler that returns {name: update}: the same updates keyed by component. A name
    left out leaves its component as it is. The handler's name (and so its API name) is kept."""
    @functools.wraps(handler)
    def by_component(*args, **kwargs):
        updates = handler(*args, **kwargs)
        # An empty dict would read as one output's value: a single skip() leaves every output unchanged.
        return {components[name]: value for name, value in updates.items()} if updates else gr.skip()
    return by_component


def preview_dataset(progress=gr.Progress(), **form):
    try:
        cfg = form_to_config(form)
        progress(0.2, desc="Reading prompts")
        rows = load_rows(cfg.dataset)[:3]
        progress(0.5, desc="Loading the tokenizer (the bundled model is converted once, ~30 s)")
        from pipeline.models import count_prompt_tokens, load_tokenizer, resolve_model

        tok = load_tokenizer(resolve_model(cfg.model))
        shown = []
        for i, row in enumerate(rows, 1):
            text = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
            answer = f"\n[reference answer: {row['answer']}]" if "answer" in row else ""
            shown.append(f"--- prompt {i} ({count_prompt_tokens(tok, row['prompt'])} tokens) ---\n{text}{answer}")
        return "\n\n".join(shown)
    except Exception as exc:  # noqa: BLE001 - show the reason, keep serving
        return f"Can't preview: {exc}"


def run_preflight(allow_custom: bool, progress=gr.Progress(), **form):
    from pipeline.preflight import preflight

    try:
        cfg = form_to_config(form)
    except ConfigError as exc:
        return f"❌ {exc}"
    progress(0.3, desc="Checking data, model, budget and rewards")
    checks = preflight(cfg, allow_custom_rewards=allow_custom)
    lines = [f"{'✅' if c.ok else '❌'} **{c.name}**: {c.message}" for c in checks]
    verdict = "Ready to start." if all(c.ok for c in checks) else "Fix the ❌ items before starting."
    return "\n\n".join(lines + [f"**{verdict}**"])


def make_scanner(cache) -> Callable[..., tuple[str, Any]]:
    """The "Learnability scan" handler: samples with the app's one ModelCache (shared with Chat, RAG and the
    reward bench), then pipeline/preflight.py does the rest. Returns the scan's view and the prompts it kept."""

    def learnability_scan(allow_custom: bool, prompts, progress=gr.Progress(), **form):
        from pipeline.preflight import learnability_scan as scan

        try:
            cfg = form_to_config(form)
            progress(0.05, desc="Loading the model (or reusing the one Chat has loaded)")
            model, tokenizer = cache.get(cfg.model)
            report = scan(cfg, int(prompts or 0), allow_custom_rewards=allow_custom, model=model,
                          tokenizer=tokenizer, progress=progress)
        except Exception as exc:  # noqa: BLE001 - show the reason, keep serving
            return f"<div class='gs-error'>❌ Can't scan: {html.escape(str(exc))}</div>", gr.skip()
        return views.scan_html(report), report.kept

    return learnability_scan


def show_command(allow_custom: bool, nproc, **form):
    try:
        cfg = form_to_config(form)
    except ConfigError as exc:
        return f"# {exc}"
    placeholder = runs.runs_dir() / "NEW-RUN"
    single = runner.command_preview(runner.command("train", placeholder, allow_custom_rewards=allow_custom,
                                                   python=".venv/bin/python"), gpus=gpu_count())
    multi = runner.command_preview(runner.command("train", placeholder, nproc=max(int(nproc or 1), 2),
                                                  allow_custom_rewards=allow_custom, python=".venv/bin/python"))
    summary = (f"# {cfg.max_steps} steps, G={cfg.num_generations}, {cfg.max_completion_length} completion tokens, "
               f"rewards: {', '.join(r.name for r in cfg.rewards) or 'none'}")
    return (f"{summary}\n# 1. save this as {placeholder / run_files.CONFIG}\n# 2. run it headless:\n{single}\n"
            f"# ...or on 2 processes / GPUs:\n{multi}\n\n# config.json\n{cfg.to_json()}")


def start_training(allow_custom: bool, nproc, request: gr.Request = None, **form):
    try:
        cfg = form_to_config(form)
        processes = check_processes(nproc, gpu_count())
        label = Path(cfg.model).name.replace("SmolLM2-135M-Instruct", "smollm2") + "-" + cfg.dataset.source
        # More than one process: the same entry point under torchrun, one rank per GPU. The run is the
        # logged-in user's (no one's without a login).
        run_dir = runner.start("train", cfg=cfg, label=label, nproc=processes, allow_custom_rewards=allow_custom,
                               actor=acting(request))
    except (ConfigError, runner.RunnerError, OSError, ValueError) as exc:
        return gr.Dropdown(), f"❌ {exc}"
    free_gpu_for_training()
    return (gr.Dropdown(choices=run_names(), value=run_dir.name),
            f"▶ Started **{run_dir.name}**. The first step appears after the model loads and one group is sampled.")


def free_gpu_for_training() -> None:
    """A trainer or an evaluator is a separate process on the same GPU: the app's chat models and embedders
    give their memory back (they load again on the next chat or search). Nothing to do without a GPU."""
    if not gpu_count():
        return
    from pipeline.generate import release_models
    from retrieval.embedder import release_embedders

    release_models()
    release_embedders()


def stop_training(run_name: str | None, operators=(), request: gr.Request = None):
    path = run_path(run_name)
    if path is None:
        return "Pick a run to stop."
    try:
        stopped = runner.stop("train", path, actor=acting(request, operators))
    except runner.RunnerError as exc:  # another user's run
        return f"❌ {exc}"
    if stopped:
        return f"⏹ Stop requested for **{run_name}**: it finishes the current step, then saves a checkpoint and the adapter."
    return f"**{run_name}** is not running."


def plot(frame, x_lim: list[int]) -> gr.LinePlot:
    """A line-plot update: its data and whole-step x-axis limits."""
    return gr.LinePlot(frame, x_lim=x_lim)


def snap_config(snap: runs.Snapshot) -> RunConfig | None:
    """The settings the run trains with (config.json plus recorded --steps overrides), from a snapshot of the
    run, as a RunConfig; None when config.json is missing or damaged (the progress header names the damage,
    see runs.run_problems, and the rest of the live view still shows)."""
    try:
        settings = snap.config  # {} when config.json is missing or unreadable
        return RunConfig.from_dict(settings) if settings else None
    except (OSError, ValueError, TypeError):  # ValueError covers ConfigError; TypeError a field of the wrong shape
        return None


# The live view's parts (pipeline/live.py stamps each one) and the outputs each part redraws, by name. Their
# order is the order the API returns the outputs in.
PART_OUTPUTS = {
    "progress": ("progress",),
    "charts": ("health", "reward_plot", *(f"plot_{key}" for key in views.CHARTS)),
    "probes": ("probe_plot", "probes", "probe_pick"),
    "jobs": ("eval_box",),
    "runs": ("runs_table",),
    "groups": ("groups", "group_step"),
    "tokens": ("groups",),  # the token view's record: drawn only in a shaded mode (groups_view)
    "log": ("log",),
}
ALL_PARTS = " ".join(PART_OUTPUTS)
# The group inspector's slider redraws the groups alone (the page's side; through the API, /refresh takes parts).
GROUPS_ONLY_JS = "(run, step, pick, action, mode, parts) => [run, step, pick, action, mode, 'groups']"


def live_view(run_name: str | None = None, group_step=0, probe_pick: str | None = "latest",
              action_name: str | None = None, token_mode: str = token_views.TEXT,
              parts: str | None = ALL_PARTS) -> dict[str, Any]:
    """The live view's one Refresh: redraws the parts named in `parts` (the page's poll names those whose stamp
    moved; a script leaves it out and gets them all) and leaves every other output as it is. `run_name` is the
    shown run, `action_name` the Runs panel's, `token_mode` the group inspector's view. Returns {output name: update}
    (PART_OUTPUTS)."""
    moved = set((parts or "").split()) & set(PART_OUTPUTS)
    if token_mode not in token_views.SCALES:
        moved.discard("tokens")  # the token record moved, but the inspector shows text: nothing to draw
    out = shown_run_view(run_name, moved & set(live.SHOWN_PARTS), group_step, probe_pick, token_mode)
    if "jobs" in moved:
        out["eval_box"] = eval_view(action_name)
    if "runs" in moved:
        out["runs_table"] = runs_table()
    return out


def shown_run_view(run_name: str | None, parts: set[str], group_step=0, probe_pick="latest",
                   token_mode: str = token_views.TEXT) -> dict[str, Any]:
    """The named parts of the shown run's view, read from one snapshot of its folder; for no run, a run that is
    gone or a name that can't be a run, the header says which and the other parts clear."""
    if not parts:
        return {}
    path = run_path(run_name)
    if path is not None:
        try:
            return _draw_run(runs.snapshot(path), run_name, parts, group_step, probe_pick, token_mode)
        except FileNotFoundError:  # deleted between the check above and the reads
            pass
    refused = runs.run_name_problem(run_name) if run_name else None  # a NUL byte, 300 characters, a path
    head = (views.refused_run_html(refused) if refused else views.gone_html(run_name) if run_name
            else views.progress_html(None, {}, [], None))
    empty = {
        "progress": {"progress": head},
        "charts": {"health": "", "reward_plot": None, **{f"plot_{key}": None for key in views.CHARTS}},
        "groups": groups_view([], 0),
        "tokens": {"groups": views.groups_html(None)},
        "probes": {"probe_plot": None, "probes": views.probes_empty_html(RunConfig().to_dict()),
                   "probe_pick": _probe_picker(views.probe_choices([]), probe_pick)},
        "log": {"log": ""},
    }
    return {name: value for part in parts for name, value in empty[part].items()}


def _draw_run(snap: runs.Snapshot, run_name: str, parts: set[str], group_step, probe_pick,
              token_mode: str = token_views.TEXT) -> dict[str, Any]:
    cfg = snap_config(snap)  # with --steps overrides; None when damaged: the header says so, the rest shows
    max_steps = cfg.max_steps if cfg else None
    out: dict[str, Any] = {}
    if "progress" in parts:
        out["progress"] = views.progress_html(run_name, snap.status, snap.metrics, max_steps, snap.problems)
    if "charts" in parts:
        metrics = snap.metrics
        lim = views.step_axis(max_steps, [m["step"] for m in metrics])
        out.update({"health": views.health_html(metrics, snap.evals),
                    "reward_plot": plot(views.reward_frame(metrics), lim),
                    **{f"plot_{key}": plot(views.metric_frame(metrics, key), lim) for key in views.CHARTS}})
    if parts & {"groups", "tokens"}:
        # the largest files of a run: read only for their part, and the token record only for the step shown
        drawn = groups_view(snap.groups, group_step, snap.run_dir, token_mode)
        out.update(drawn if "groups" in parts else {"groups": drawn["groups"]})
    if "probes" in parts:
        evals, state = snap.evals, snap.state
        settings = cfg.to_dict() if cfg else {}
        lim = views.step_axis(settings.get("max_steps"), [e["step"] for e in evals])
        choices = views.probe_choices(evals, settings.get("max_steps"), state)
        out.update({"probe_plot": plot(views.probe_frame(evals), lim),
                    "probes": views.probes_html(evals, probe_pick, settings, state),
                    "probe_pick": _probe_picker(choices, probe_pick)})
    if "log" in parts:
        out["log"] = snap.log(30)
    return out


def groups_view(groups: list[dict], group_step, run_dir: Path | None = None,
                token_mode: str = token_views.TEXT) -> dict[str, Any]:
    """The group inspector at the picked step (0: the latest), and the step slider's range; in a shaded token
    mode, the step's token record is read (that line alone) and drawn."""
    steps = [g["step"] for g in groups]
    pick = int(group_step or 0)
    record = next((g for g in groups if g["step"] == pick), groups[-1] if groups else None)
    tokens = token_log.read_step(run_dir, record["step"]) \
        if record and run_dir is not None and token_mode in token_views.SCALES else None
    return {"groups": views.groups_html(record, tokens, token_mode),
            "group_step": gr.Slider(minimum=0, maximum=max(steps + [1]), step=1)}  # a slider needs max > min


def _probe_picker(choices: list[tuple[str, str]], pick) -> gr.Radio:
    # The value is only reset when the pick is gone: a redraw started before the user picked a step carries
    # the old pick and must not put it back (the next redraw has the new one).
    return gr.Radio(choices=choices) if pick in [v for _, v in choices] else gr.Radio(choices=choices, value="latest")


def picked_probes(run_name: str | None, pick) -> str:
    """The completions panel at the probe step the user picked."""
    return shown_run_view(run_name, {"probes"}, probe_pick=pick)["probes"]


def runs_table():
    import pandas as pd

    rows = runs.list_runs()
    # Whose run it is matters only once someone logged in started one: without owners the column stays out.
    columns = [c for c in RUN_COLUMNS if c != "owner" or any(r.get("owner") for r in rows)]
    return pd.DataFrame([[r.get(c) for c in columns] for r in rows], columns=columns)


def refresh_runs(current: str | None) -> tuple[gr.Dropdown, Any, gr.CheckboxGroup, gr.Dropdown]:
    names = run_names()
    active = runner.active_run()
    value = current if current in names else (active.name if active else (names[0] if names else None))
    return (gr.Dropdown(choices=names, value=value), runs_table(), gr.CheckboxGroup(choices=names),
            gr.Dropdown(choices=names, value=value))


def compare_runs(selected: list[str]):
    metrics = {name: runs.read_metrics(p) for name in selected or [] if (p := run_path(name))}
    return plot(views.compare_frame(metrics), views.step_axis(None, [r["step"] for rows in metrics.values() for r in rows]))


def resume_training(name: str | None, allow_custom: bool, operators=(), request: gr.Request = None):
    path = run_path(name)
    if path is None:
        return gr.Dropdown(), "Pick a run to resume."
    try:
        runner.start("train", path, resume=True, allow_custom_rewards=allow_custom, actor=acting(request, operators))
    except runner.RunnerError as exc:
        return gr.Dropdown(), f"❌ {exc}"
    free_gpu_for_training()
    return gr.Dropdown(value=name), f"▶ Resuming **{name}** from its last complete checkpoint."


def evaluate_run(name: str | None, operators=(), request: gr.Request = None):
    """Start the run's evaluation (base vs tuned) as a runner job and return at once; the Runs panel's
    evaluation view follows it through the live view."""
    path = run_path(name)
    if path is None:
        return "Pick a finished run to evaluate."
    try:
        runner.start("eval", path, actor=acting(request, operators))
    except (RuntimeError, OSError) as exc:  # RunnerError says why; a full disk or a racing launch too
        return f"❌ {exc}"
    free_gpu_for_training()  # the evaluator loads the base and tuned models on the same GPU
    return (f"▶ Evaluating **{name}** on up to {EVAL_LIMIT} held-out prompts (greedy, base then tuned); "
            "progress shows below.")


def _stop_job(kind: str, what: str, name: str | None, operators=(), request: gr.Request = None) -> str:
    """Stop the Runs panel run's job of `kind` or, when that run has none running, the one running elsewhere."""
    path = run_path(name)
    running = [path] if path is not None and runner.is_active(kind, path) else runner.active(kind)
    if not running:
        return f"No {what} is running."
    try:
        runner.stop(kind, running[0], actor=acting(request, operators))
    except runner.RunnerError as exc:  # another user's run
        return f"❌ {exc}"
    return f"⏹ Stop requested for the {what} of **{running[0].name}**."


def stop_evaluation(name: str | None, operators=(), request: gr.Request = None):
    return _stop_job("eval", "evaluation", name, operators, request)


def stop_push(name: str | None, operators=(), request: gr.Request = None):
    return _stop_job("push", "push", name, operators, request)


def eval_view(name: str | None) -> str:
    """The Runs panel's jobs box: the jobs of its run, in words. Its evaluation (or, when it has none, one
    running elsewhere), read from eval_status.json and eval.json, then its push to the Hub (push_status.json),
    when it has one."""
    path = pushed = run_path(name)  # `path` may become a run evaluated elsewhere; the push is the shown run's
    status = runner.status("eval", path) if path is not None else None
    if status is None and (active := runner.active("eval")):
        path, status = active[0], runner.status("eval", active[0])
    result_file = path / run_files.EVAL_RESULT if path is not None else None
    state = (status or {}).get("state")
    push_line = views.push_markdown(pushed.name, runner.status("push", pushed)) if pushed is not None else None
    if path is None or (status is None and not result_file.exists()):
        return push_line or ""
    result = None
    if state not in views.EVAL_UNFINISHED:
        try:
            result = json.loads(result_file.read_text())
        except (OSError, ValueError) as exc:
            result = exc
    text = views.eval_markdown(path.name, status, result)
    return text + "\n\n" + push_line if push_line else text


def delete_run(name: str | None, confirmed: bool, operators=(), request: gr.Request = None):
    path = run_path(name)
    if path is None:
        return "Pick a run to delete.", False
    if not confirmed:
        return "Tick **Yes, delete it** first: this removes the run's folder, checkpoints and models.", False
    try:
        runs.delete_run(path, actor=acting(request, operators))
    except ValueError as exc:
        return f"❌ {exc}", False
    return f"🗑 Deleted **{name}**.", False


def fill_preset(name: str, allow_custom: bool = False) -> dict[str, Any]:
    """A preset fills the whole form but an uploaded file's path: model, prompts, the rewards table (the
    length + diversity pair is a preset) and the settings. {form key: value}."""
    values = config_to_form(apply_preset(RunConfig(), name), allow_custom=allow_custom)
    return {key: value for key, value in values.items() if key != "path"}


# ---- layout ------------------------------------------------------------------------------------


def build(ctx: TabContext) -> Tab:
    """Add the Train tab to the enclosing gr.Blocks. On page load it offers the runs on disk (refresh_runs: a
    reload finds the active or latest run again), folds the settings and follows the run files (ui/watch.py)."""
    allow_custom = ctx.allow_custom_rewards
    defaults = config_to_form(RunConfig())
    with gr.Tab(TAB_LABEL, id="train"):
        allow = gr.State(allow_custom)
        ops = gr.State(sorted(ctx.operators))  # logins that may act on every run (the others: on their own)
        with gr.Row(equal_height=False):
            with gr.Column(scale=2, min_width=380):
                gr.Markdown("### 1. Model and data")
                model_choice = gr.Dropdown(choices=catalog_choices(), value=BUNDLED_MODEL_ID, label="Model",
                                           info="The bundled model works offline; hub models need a network.")
                model_custom = gr.Textbox(label="…or a hub id / local folder", placeholder="org/name or /path/to/model")
                source = gr.Radio(list(SOURCES), value="TL;DR (bundled)", label="Prompts")
                with gr.Group(visible=False) as file_box:
                    upload = gr.File(label="CSV / JSONL / JSON", file_types=UPLOAD_TYPES,
                                     type="filepath")
                    upload_msg = gr.Markdown()
                    with gr.Row():
                        prompt_col = gr.Dropdown(label="Prompt column", choices=[], allow_custom_value=True)
                        answer_col = gr.Dropdown(label="Answer column (optional)", choices=[], allow_custom_value=True)
                with gr.Group(visible=False) as hub_box:
                    with gr.Row():
                        hub_id = gr.Textbox(label="Hub dataset id", placeholder="mlabonne/smoltldr")
                        hub_config = gr.Textbox(label="Config (subset)", placeholder="e.g. main (optional)")
                        hub_split = gr.Textbox(label="Split", value="train")
                system = gr.Textbox(label="System prompt (optional)", lines=2,
                                    placeholder="Leave empty for the dataset's default instruction.")
                stored_path = gr.State("")
                preview_btn = gr.Button("Preview prompts as the model sees them", size="sm")
                preview = gr.Code(label="Prompt preview", language=None, lines=8, visible=True)

                gr.Markdown("### 2. Rewards")
                rewards = gr.Dataframe(value=reward_rows(allow_custom=allow_custom), headers=REWARD_COLUMNS,
                                       datatype=["bool", "str", "number", "str"], interactive=True,
                                       column_count=(4, "fixed"), label="Tick to use; set weight (0 = monitor) and parameters",
                                       elem_id="rewards-table")
                with gr.Accordion("What each reward does", open=False):
                    gr.Markdown(reward_docs())

                gr.Markdown("### 3. Hyperparameters")
                preset = gr.Dropdown(choices=list(PRESETS), value="Quick CPU demo", label="Preset")
                with settings_accordion():  # one component per RunConfig field marked for the form
                    hyper = {spec.name: hyper_component(spec, defaults[spec.name]) for spec in form_fields()}

                gpus = gpu_count()
                nproc = gr.Slider(1, max(gpus, 2), value=max(gpus, 1), step=1, visible=gpus > 1,
                                  label=f"Processes (one per GPU; {gpus} visible)",
                                  info="More than one starts the same trainer under torchrun (data parallel).")
                with gr.Row():
                    check_btn = gr.Button("Pre-flight check")
                    scan_btn = gr.Button("Learnability scan", elem_id="scan-btn")
                    cmd_btn = gr.Button("Show command")
                    start_btn = gr.Button("Start", variant="primary", elem_id="start-btn")
                message = gr.Markdown(elem_id="train-message")
                scan_prompts = gr.Number(value=SCAN_PROMPTS, precision=0, minimum=1, maximum=256,
                                         label="Prompts to scan", elem_id="scan-prompts",
                                         info=f"The learnability scan samples G completions for this many training "
                                              f"prompts. {SCAN_PROMPTS} take under a minute on 2 CPU cores with the "
                                              "bundled model and the default settings; more give a surer picture "
                                              "and keep more prompts.")
                scan_view = gr.HTML(views.scan_empty_html(), elem_id="scan")
                kept_prompts = gr.State([])  # the prompts the last scan found signal on (RunConfig.signal_prompts)
                command = gr.Code(label="Equivalent command and config", language="shell", visible=True, lines=6,
                                  elem_id="train-command")

            with gr.Column(scale=3, min_width=520):
                with gr.Row():
                    run_select = gr.Dropdown(label="Run", choices=[], scale=4, elem_id="run-select")
                    stop_btn = gr.Button("Stop", variant="stop", scale=1, elem_id="stop-btn")
                progress_box = gr.HTML(views.progress_html(None, {}, [], None), elem_id="progress")
                health = gr.HTML(elem_id="health")
                with gr.Row():
                    reward_plot = gr.LinePlot(None, x="step", y="value", color="series",
                                              title="Train reward: total and per function (mean)", height=260,
                                              elem_id="reward-plot")
                    probe_plot = gr.LinePlot(None, x="step", y="value", color="series",
                                             title="Held-out reward (probe prompts, greedy)", height=260,
                                             elem_id="probe-plot")
                plots = {}
                chart_items = list(views.CHARTS.items())
                for i in range(0, len(chart_items), 2):
                    with gr.Row():
                        for key, (title, _) in chart_items[i:i + 2]:
                            plots[f"plot_{key}"] = gr.LinePlot(
                                None, x="step", y="value", color="series", title=title, height=200,
                                elem_id=f"plot-{key}", y_lim=views.CHART_Y_LIMITS.get(key))
                gr.Markdown(views.LOSS_NOTE, elem_id="loss-note")
                gr.Markdown("#### Completions over time\nThe same held-out prompts, answered greedily at step 0 "
                            "(the base model), every few steps and at the end. Pick a step to see its answers.")
                probe_pick = gr.Radio(choices=views.probe_choices([]), value="latest", label="Probe step",
                                      elem_id="probe-step")
                probes_panel = gr.HTML(views.probes_empty_html(RunConfig().to_dict()), elem_id="probes")
                gr.Markdown("#### Group inspector\nEach prompt's G completions, best advantage first. "
                            "Green rows were reinforced, red rows discouraged.")
                group_step = gr.Slider(0, 1, value=0, step=1, label="Step (0 = latest)", elem_id="group-step")
                token_mode = gr.Radio(list(token_views.MODES), value=token_views.TEXT, label="Show completions as",
                                      info="Log-prob shades the tokens the policy found surprising; Entropy, where "
                                           "it was unsure what to write. Hover a token for its values.",
                                      elem_id="token-mode")
                groups = gr.HTML(views.groups_html(None), elem_id="groups")
                log = gr.Textbox(label="Log tail", lines=8, max_lines=8, interactive=False, elem_id="log")

        with gr.Accordion("Runs", open=True):
            with gr.Row():
                refresh_btn = gr.Button("Refresh list", size="sm")
            table = gr.Dataframe(runs_table(), interactive=False, label="All runs", elem_id="runs-table")
            with gr.Row():
                with gr.Column():
                    compare = gr.CheckboxGroup(label="Overlay reward curves", choices=[], elem_id="compare")
                    compare_plot = gr.LinePlot(None, x="step", y="value", color="series",
                                               title="Total reward by run", height=240)
                with gr.Column():
                    action_run = gr.Dropdown(label="Run", choices=[], elem_id="action-run")
                    with gr.Row():
                        resume_btn = gr.Button("Resume")
                        eval_btn = gr.Button("Evaluate base vs tuned", elem_id="eval-btn")
                        eval_stop_btn = gr.Button("Stop evaluation", size="sm", elem_id="eval-stop-btn")
                        push_stop_btn = gr.Button("Stop push", size="sm", elem_id="push-stop-btn")
                    with gr.Row():
                        confirm = gr.Checkbox(label="Yes, delete it", value=False)
                        delete_btn = gr.Button("Delete", variant="stop")
                    action_msg = gr.Markdown()
                    eval_box = gr.Markdown(elem_id="eval-status")

        # The form by name (RunConfig / DatasetSpec field names), in form_keys order, which is also the order
        # the API takes: handlers get it as keyword arguments and ui.form.form_to_config turns it into a config.
        parts = {"model": model_choice, "model_custom": model_custom, "source": source, "path": stored_path,
                 "prompt_column": prompt_col, "answer_column": answer_col, "system_prompt": system,
                 "hub_id": hub_id, "hub_config": hub_config, "hub_split": hub_split, "rewards": rewards,
                 "signal_prompts": kept_prompts, **hyper}
        form = {key: parts[key] for key in form_keys()}
        # The live view: the page's poll (ui/watch.py) presses this hidden button when a part's stamp moved, and its
        # event hands the handler those parts (its last input, filled in by the poll's js).
        live_refresh = gr.Button("Refresh the live view", elem_id="live-refresh", elem_classes=["gs-hidden"])
        moved_parts = gr.Textbox(ALL_PARTS, label="Live view parts to redraw", elem_classes=["gs-hidden"])
        # The live view's outputs by name (PART_OUTPUTS), in the order the API returns them.
        shown = {"progress": progress_box, "health": health, "reward_plot": reward_plot, **plots, "groups": groups,
                 "group_step": group_step, "log": log, "probe_plot": probe_plot, "probes": probes_panel,
                 "probe_pick": probe_pick, "eval_box": eval_box, "runs_table": table}
        live_outputs = {name: shown[name] for names in PART_OUTPUTS.values() for name in names}
        live_inputs = [run_select, group_step, probe_pick, action_run, token_mode, moved_parts]

        source.change(lambda s: (gr.Group(visible=SOURCES[s] == "file"), gr.Group(visible=SOURCES[s] == "hub")),
                      source, [file_box, hub_box])
        upload.upload(store_upload, upload, [stored_path, prompt_col, answer_col, upload_msg])
        preview_btn.click(preview_dataset, None, preview, inputs_kwargs=form, concurrency_id="model",
                          concurrency_limit=1)
        preset_outputs = {key: parts[key] for key in form_keys() if key != "path"}
        preset.change(keyed(lambda name: fill_preset(name, allow_custom), preset_outputs), preset,
                      list(preset_outputs.values()))
        check_btn.click(run_preflight, allow, message, inputs_kwargs=form, concurrency_id="model",
                        concurrency_limit=1)
        scan_btn.click(make_scanner(ctx.cache), [allow, scan_prompts], [scan_view, kept_prompts], inputs_kwargs=form,
                       concurrency_id="model", concurrency_limit=1, api_name="learnability_scan")
        cmd_btn.click(show_command, [allow, nproc], command, inputs_kwargs=form)
        start_btn.click(start_training, [allow, nproc], [run_select, message], inputs_kwargs=form,
                        concurrency_limit=1, concurrency_id="start").then(
            refresh_runs, run_select, [run_select, table, compare, action_run])
        stop_btn.click(stop_training, [run_select, ops], message)
        # A step picked in the group inspector redraws the groups. Through the API (/refresh) it is the live view's
        # Refresh, every part unless told which.
        group_step.release(keyed(live_view, live_outputs), live_inputs, list(live_outputs.values()),
                           js=GROUPS_ONLY_JS, show_progress="hidden", api_name="refresh")
        token_mode.change(keyed(live_view, live_outputs), live_inputs, list(live_outputs.values()),
                          js=GROUPS_ONLY_JS, show_progress="hidden", api_visibility="private")
        probe_pick.input(picked_probes, [run_select, probe_pick], probes_panel, show_progress="hidden")
        run_select.change(lambda: "latest", None, probe_pick)
        refresh_btn.click(refresh_runs, run_select, [run_select, table, compare, action_run])
        compare.change(compare_runs, compare, compare_plot)
        resume_btn.click(resume_training, [action_run, allow, ops], [run_select, action_msg]).then(
            refresh_runs, run_select, [run_select, table, compare, action_run])
        # The evaluation is a runner job: the click returns at once; its files' changes show its progress and result.
        eval_btn.click(evaluate_run, [action_run, ops], action_msg, api_name="evaluate_run").then(
            eval_view, [action_run], eval_box, show_progress="hidden")
        eval_stop_btn.click(stop_evaluation, [action_run, ops], action_msg, api_name="stop_evaluation")
        push_stop_btn.click(stop_push, [action_run, ops], action_msg, api_name="stop_push")
        delete_btn.click(delete_run, [action_run, confirm, ops], [action_msg, confirm]).then(
            refresh_runs, run_select, [run_select, table, compare, action_run])
        live_refresh.click(keyed(live_view, live_outputs), live_inputs, list(live_outputs.values()),
                           js=watch.take_moved_js("live-refresh", len(live_inputs)), show_progress="hidden",
                           trigger_mode="always_last", api_visibility="private")
        follow_runs = watch.follow("progress", "live-refresh", tuple(PART_OUTPUTS))
    return Tab(loads=(PageLoad(refresh_runs, [run_select], [run_select, table, compare, action_run]),),
               scripts=(CLOSE_SETTINGS_JS, follow_runs))
