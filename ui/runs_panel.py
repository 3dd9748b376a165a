"""The Train tab's Runs panel: the runs on disk as a table, reward curves overlaid, and the jobs on one run
(Stop, Resume, Evaluate, Stop evaluation, Stop push, Delete) with its jobs box. Also the run lookups the
form and the live view share."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import gradio as gr

from pipeline import runner
from pipeline.run_folder import disk, run_files, runs, stages
from pipeline.run_folder.jobs import EVAL_LIMIT
from pipeline.models.loading import gpu_count
from pipeline.setup import steering
from pipeline.setup.config import RunConfig
from ui import answers_view, charts, compare_view, probes_view, steer_view, views
from ui.form import config_to_form
from ui.tab import acting


# What tells runs apart first, from the left: its state (and, for a damaged run, why), how far it got, its last train
# reward and its held-out reward before and after (the base model at step 0, the last probe), its time and size;
# then what it was. Whose it is, what was steered and what is damaged show once some run has them.
RUN_COLUMNS = ["run", "state", "problems", "step", "train reward", "held-out", "time", "disk", "owner", "steered",
               "model", "dataset", "rewards"]
OPTIONAL_COLUMNS = ("owner", "steered", "problems")


def run_names() -> list[str]:
    return [p.name for p in runs.iter_run_dirs()]


NO_RUNS = ("**No runs yet.** Set up a run above and press **Start**. Every run you start is listed here, with its "
           "steps, reward and state: resume, evaluate or delete it, and tick two or more to overlay their curves.")


def runs_hint() -> gr.Markdown:
    """The Runs panel's empty state: what to do first, shown only while there is no run."""
    return gr.Markdown(visible=not run_names())


def run_path(name: str | None) -> Path | None:
    return runs.resolve_run(name)


def load_run_settings(name: str | None, allow_custom: bool = False) -> dict[str, Any]:
    """The picked run's settings, as it started, back in the Train form: to train another like it with a change or
    two. Anyone may load them (every user sees every run's settings). {form key, "run_name" or "message": update}."""
    run_dir = run_path(name)
    if run_dir is None:
        return {"message": "Pick a run to load its settings into the form."}
    try:
        values = config_to_form(RunConfig.load(run_dir / run_files.CONFIG), allow_custom=allow_custom)
    except (OSError, ValueError, TypeError) as exc:  # ValueError covers ConfigError
        return {"message": f"❌ The settings of {name} can't be read: {exc}"}
    steered = (" It was steered while it trained: the form holds the values it started with, and its run header "
               "lists the changes." if steering.applied_changes(run_dir) else "")
    return {**values, "run_name": "",
            "message": f"Loaded the settings **{name}** started with into the form above, with no run name. Change "
                       f"what you like, then press Start or Add to queue.{steered}"}


def next_stage_settings(name: str | None, allow_custom: bool = False) -> dict[str, Any]:
    """The picked run's settings in the Train form, set to train from the model it ended with: its next stage.
    The user changes what the stage teaches (rewards, prompts) and presses Start; the new run takes that model
    as its own (pipeline/run_folder/stages.py). {form key, "run_name" or "message": update}."""
    run_dir = run_path(name)
    if run_dir is None:
        return {"message": "Pick a finished or stopped run to train its next stage."}
    merged = run_dir / run_files.MERGED
    why = stages.problem(str(merged))
    if why:
        return {"message": f"❌ {why}"}
    loaded = load_run_settings(name, allow_custom)
    if "run_name" not in loaded:  # its settings can't be read: the message says so
        return loaded
    step = stages.stage_record(run_dir, merged)["step"]
    return {**loaded, "model_custom": str(merged), "message": (
        f"The form now trains from the model **{name}** ended with (step {step}), with the settings it used. Change "
        "what this stage should teach (its rewards, its prompts), then press Start or Add to queue. The new run "
        "keeps that model as its own, so this run can still be resumed or deleted. The new run's step-0 probes are "
        "this run's final answers: its curves show what the stage adds.")}


def free_gpu_for_training() -> None:
    """A trainer or an evaluator is a separate process on the same GPU: the app's chat models and embedders
    give their memory back (they load again on the next chat or search). Nothing to do without a GPU."""
    if not gpu_count():
        return
    from pipeline.training.generate import release_models
    from retrieval.embedder import release_embedders

    release_models()
    release_embedders()


def plot(frame, x_lim: list[int], visible: bool = True) -> gr.LinePlot:
    """A line-plot update: its data and whole-step x-axis limits (and whether it shows at all)."""
    return gr.LinePlot(frame, x_lim=x_lim, visible=visible)


def runs_table():
    import pandas as pd

    rows = runs.list_runs()
    for row in rows:
        path = Path(row["path"])
        row["steered"] = steer_view.changes_text(steering.applied_changes(path))  # step: setting old→new
        row["disk"] = disk_text(path)
        row["step"] = f"{row.get('step') or 0} / {row.get('max_steps') or '?'}"
        final = row.get("final_reward")
        row["train reward"] = probes_view.fmt_score(final) if final is not None else ""
        row["held-out"] = probes_view.held_out_text(runs.read_jsonl(path / run_files.EVALS))
        row["time"] = views.fmt_seconds(row.get("duration_s")) if row.get("duration_s") is not None else ""
    columns = [c for c in RUN_COLUMNS if c not in OPTIONAL_COLUMNS or any(r.get(c) for r in rows)]
    return pd.DataFrame([[r.get(c) for c in columns] for r in rows], columns=columns)


def disk_text(path: Path) -> str:
    """A run's size on disk, and the part it shares with another run (a next stage's start model is the earlier
    run's merged files, hard-linked): deleting either run gives that part back only once both are gone."""
    size, own = disk.tree_sizes(path)
    return disk.size_text(size) + (f" ({disk.size_text(size - own)} shared)" if size - own >= 2**20 else "")


def refresh_runs(current: str | None) -> tuple[gr.Dropdown, Any, gr.CheckboxGroup, gr.Dropdown]:
    names = run_names()
    active = runner.active_run()
    value = current if current in names else (active.name if active else (names[0] if names else None))
    return (gr.Dropdown(choices=names, value=value), runs_table(), gr.CheckboxGroup(choices=names),
            gr.Dropdown(choices=names, value=value))


def overlay_curve(curve: str | None) -> str:
    """The curve picked, or the default for a name that is not one (charts.COMPARE_CURVES, or a reward's)."""
    known = curve in charts.COMPARE_CURVES or (curve or "").startswith(charts.REWARD_CURVE)
    return curve if known else charts.DEFAULT_COMPARE


def overlay_labels(curve: str | None) -> Any:
    """The overlay's first event: its title and y-axis title for `curve`. Sent on their own, before the data: a
    plot whose title changes in the same update as its data is drawn again with its old data."""
    curve = overlay_curve(curve)
    y_title = charts.COMPARE_CURVES[curve][2] if curve in charts.COMPARE_CURVES else "reward (mean)"
    return gr.LinePlot(title=charts.compare_title(curve), y_title=y_title)


def overlay_choices(selected: list[str] | None, curve: str | None) -> gr.Radio:
    """The overlay's curves for the ticked runs: the fixed ones and one per reward function any of them scored
    (config.json's rewards, weight 0 included). A reward curve none of them has goes back to the default."""
    from ui.comparison_report import reward_names

    configs = {name: runs.read_json(p / run_files.CONFIG) for name in selected or [] if (p := run_path(name))}
    choices = charts.compare_choices(reward_names(configs))
    return gr.Radio(choices=choices, value=curve if curve in choices else charts.DEFAULT_COMPARE)


def compare_runs(selected: list[str], curve: str | None = charts.DEFAULT_COMPARE) -> tuple[Any, dict]:
    """The overlay's data: the ticked runs' `curve` (charts.COMPARE_CURVES: train or held-out reward, KL, ...),
    hidden while no run is ticked; and a colour per run, for overlay_colors to send after the data (a plot drawn
    again with a new series keeps its first legend, and leaves the new line out, until its colour map changes)."""
    curve = overlay_curve(curve)
    reward = curve.removeprefix(charts.REWARD_CURVE) if curve.startswith(charts.REWARD_CURVE) else None
    source, key, _ = charts.COMPARE_CURVES.get(curve, ("metrics", "rewards", ""))
    read = runs.read_evals if source == "evals" else runs.read_metrics
    paths = {name: p for name in selected or [] if (p := run_path(name))}
    # A next stage ticked with the run it came from goes on from that run's last step, as one curve across stages.
    rows = stages.shifted({name: read(p) for name, p in paths.items()}, stages.step_offsets(paths))
    steps = [r["step"] for run_rows in rows.values() for r in run_rows]
    frame = charts.compare_frame(rows, key, reward)
    # The axis starts at 0 for every curve: a plot whose x limits change in the same update as its data is drawn
    # again with its old data (as for its title, see overlay_labels), so switching to held-out keeps the same start.
    return plot(frame, charts.step_axis(None, steps), visible=bool(rows)), charts.series_colors(frame) or {}


def compare_settings(selected: list[str] | None) -> str:
    """The settings that differ between the ticked runs (ui/compare_view.py), beside the overlay; what was steered
    while a run trained is one more row."""
    from ui.comparison_report import run_configs

    return compare_view.settings_diff_html(run_configs({name: p for name in selected or [] if (p := run_path(name))}))


def comparison_download(selected: list[str] | None) -> tuple[Any, str]:
    """The ticked runs compared in one HTML page (ui/comparison_report.py): their rows, the settings they differ
    in, every curve with a line per run, and their answers to each held-out prompt side by side."""
    from ui import comparison_report

    paths = [p for name in selected or [] if (p := run_path(name))]
    problem = comparison_report.problem(paths)
    if problem:
        return gr.File(visible=False), problem
    out = comparison_report.write_comparison(paths)
    return gr.File(value=str(out), visible=True), (f"✓ {out.name}: {len(paths)} runs on one page with no links out, "
                                                    "to open in any browser or send to someone.")


def compare_answers(selected: list[str] | None, picked: str | None = None,
                    source: str | None = answers_view.PROBES) -> tuple[gr.Dropdown, str]:
    """The ticked runs' held-out answers side by side (ui/answers_view.py), from their last probes or their last
    evaluations: the prompt picker's choices, keeping the prompt picked while the new ticks still answered it, and
    the answers to it. Runs not evaluated yet are named, not compared."""
    source = source or answers_view.PROBES
    paths = {name: p for name in selected or [] if (p := run_path(name))}
    found = {name: answers_view.run_answer_rows(path, source) for name, path in paths.items()}
    evals = {name: rows for name, rows in found.items() if rows is not None}
    missing = [name for name, rows in found.items() if rows is None]
    choices = answers_view.prompt_choices(evals) if len(evals) >= 2 else []
    values = [value for _, value in choices]
    value = picked if picked in values else (values[0] if values else None)
    note = ("<div class='gs-answers-note'>Not evaluated yet, so not compared here: "
            f"{html.escape(', '.join(missing))}. Pick it under Run and press <b>Evaluate base vs tuned</b>.</div>"
            if missing and len(found) >= 2 else "")
    if source == answers_view.EVALUATION:  # an evaluation from before a resume answered for the model before
        stale = [name for name in evals if runs.trained_since_evaluation(paths[name])]
        note += ("<div class='gs-answers-note'>Trained further after its last evaluation, so its answers here are "
                 f"the model's before that: {html.escape(', '.join(stale))}.</div>" if stale else "")
    shown = answers_view.answers_html(evals, value, source)
    if len(found) >= 2 and len(evals) < 2:  # ticked enough, but too few evaluated
        shown = ("<div class='gs-empty'>Evaluate at least two of the ticked runs to compare their answers to every "
                 "held-out prompt, or read their last probes' answers.</div>")
    return gr.Dropdown(choices=choices, value=value, visible=bool(choices)), note + shown


def picked_answers(selected: list[str] | None, picked: str | None, source: str | None = answers_view.PROBES) -> str:
    """The answers to another held-out prompt, for the same ticked runs."""
    return compare_answers(selected, picked, source)[1]


def report_download(run_name: str | None) -> tuple[Any, str]:
    """The picked run as one HTML page to keep or send (ui/report.py): its curves, held-out answers before and
    after, a group of its last step and its settings."""
    from ui.report import write_report

    path = run_path(run_name)
    if path is None:
        return gr.File(visible=False), "Pick a run to download its report."
    if not runs.read_metrics(path) and not runs.read_evals(path):
        return gr.File(visible=False), f"{path.name} has no steps yet: its report can be made after the first one."
    out = write_report(path)
    return gr.File(value=str(out), visible=True), (f"✓ {out.name}: one page with no links out, to open in any "
                                                    "browser or send to someone.")


def metrics_download(run_name: str | None) -> tuple[Any, str]:
    """The picked run's numbers as a CSV, a row per step (pipeline/run_folder/metrics_table.py), to download."""
    from pipeline.run_folder.metrics_table import metrics_csv

    path = run_path(run_name)
    if path is None:
        return gr.File(visible=False), "Pick a run to download its metrics."
    metrics, evals = runs.read_metrics(path), runs.read_evals(path)
    if not metrics and not evals:
        return gr.File(visible=False), f"{path.name} has no steps yet: its metrics appear after the first one."
    out = runs.exports_dir() / f"{path.name}-metrics.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(metrics_csv(metrics, evals), encoding="utf-8")
    steps = len({r["step"] for r in metrics if isinstance(r.get("step"), int)})
    return gr.File(value=str(out), visible=True), (f"✓ {out.name}: {steps} steps, and {len(evals)} held-out "
                                                    f"probes in `heldout/` columns (step 0 is the base model).")


def overlay_colors(colors: dict | None) -> Any:
    """The overlay's last event: its colour per run, after the data (see compare_runs)."""
    return gr.LinePlot(color_map=colors or None)


def stop_training(run_name: str | None, operators=(), request: gr.Request = None):
    path = run_path(run_name)
    if path is None:
        return "Pick a run to stop."
    try:
        stopped = runner.stop("train", path, actor=acting(request, operators))
    except runner.RunnerError as exc:  # another user's run
        return f"❌ {exc}"
    if stopped:
        return (f"⏹ Stop requested for **{run_name}**: it finishes the current step, then saves a checkpoint and the "
                "adapter.")
    return f"**{run_name}** is not running."


def resume_training(name: str | None, allow_custom: bool, operators=(), request: gr.Request = None, steps=None):
    """Resume the run from its last complete checkpoint, to its own step count or, given `steps`, to that step
    (which also trains a finished run further). Gradio puts the request in its place; `steps` is the last input."""
    path = run_path(name)
    if path is None:
        return gr.Dropdown(), "Pick a run to resume."
    steps = int(steps) if steps else None  # empty or 0: the run's own step count
    try:
        runner.start("train", path, resume=True, steps=steps, allow_custom_rewards=allow_custom,
                     actor=acting(request, operators))
    except runner.RunnerError as exc:
        return gr.Dropdown(), f"❌ {exc}"
    free_gpu_for_training()
    to = f", to step {steps}" if steps else ""
    return gr.Dropdown(value=name), f"▶ Resuming **{name}** from its last complete checkpoint{to}."


def evaluate_run(name: str | None, operators=(), request: gr.Request = None, prompts=None):
    """Start the run's evaluation (base vs tuned) on up to `prompts` held-out prompts (empty or 0: EVAL_LIMIT) as
    a runner job and return at once; the Runs panel's evaluation view follows it through the live view."""
    path = run_path(name)
    if path is None:
        return "Pick a finished run to evaluate."
    limit = int(prompts) if prompts else EVAL_LIMIT
    try:
        runner.start("eval", path, limit=limit, actor=acting(request, operators))
    except (RuntimeError, OSError) as exc:  # RunnerError says why; a full disk or a racing launch too
        return f"❌ {exc}"
    free_gpu_for_training()  # the evaluator loads the base and tuned models on the same GPU
    return (f"▶ Started evaluating **{name}** on up to {limit} held-out prompts (greedy, base then tuned); "
            "its progress, then its result, show below.")


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
    if isinstance(result, dict) and runs.trained_since_evaluation(path):
        text += "\n\n" + views.EVAL_STALE
    return text + "\n\n" + push_line if push_line else text


def delete_run(name: str | None, confirmed: bool, with_exports: bool = False, operators=(),
               request: gr.Request = None):
    """Delete the picked run (and, ticked, its exports). Both ticks are cleared after every press, so each delete
    is confirmed anew. Returns the message and the two ticks."""
    path = run_path(name)
    if path is None:
        return "Pick a run to delete.", False, False
    if not confirmed:
        return ("Tick **Yes, delete it** first: this removes the run's folder, checkpoints and models.", False,
                bool(with_exports))
    try:
        deleted = runs.delete_run(path, actor=acting(request, operators), with_exports=bool(with_exports))
    except ValueError as exc:
        return f"❌ {exc}", False, False
    return deleted_text(name, deleted), False, False


def deleted_text(name: str, deleted: disk.Deleted) -> str:
    """What a delete did, in words: the space it gave back, and the run's exports, removed or kept.

    >>> from pathlib import Path
    >>> print(deleted_text("r1", disk.Deleted(3 * 2**20)))
    🗑 Deleted **r1**: 3 MiB freed.
    >>> print(deleted_text("r1", disk.Deleted(2**30, [Path("r1-merged.zip"), Path("r1-F16.gguf")], 2**29)))
    🗑 Deleted **r1** and the 2 files exported from it: 1.5 GiB freed.
    >>> print(deleted_text("r1", disk.Deleted(2**20, exports_kept=[Path("/nowhere/r1-F16.gguf")])))
    🗑 Deleted **r1**: 1 MiB freed. The file exported from it (0 B) stays in the exports folder: `r1-F16.gguf`.
    """
    if deleted.exports_removed:
        files = "the file" if len(deleted.exports_removed) == 1 else f"the {len(deleted.exports_removed)} files"
        return f"🗑 Deleted **{name}** and {files} exported from it: {disk.size_text(deleted.freed)} freed."
    text = f"🗑 Deleted **{name}**: {disk.size_text(deleted.freed)} freed."
    kept = deleted.exports_kept
    if kept:
        files = "The file exported from it" if len(kept) == 1 else f"The {len(kept)} files exported from it"
        stay = "stays" if len(kept) == 1 else "stay"
        text += (f" {files} ({disk.size_text(deleted.kept_bytes)}) {stay} in the exports folder: "
                 f"{', '.join(f'`{p.name}`' for p in kept)}.")
    return text


EXPORTS_EMPTY = ("The exports folder is empty. What you take out of a run lands there: the zips and GGUF files of "
                 "Chat's *Export a run*, and *Download metrics (CSV)*.")


def exports_view() -> tuple[str, gr.Button]:
    """The exports folder, run by run with what each takes, then the files kept from deleted runs, with the
    button that removes those (shown only when there are some)."""
    found = runs.exports_on_disk()
    return exports_text(found), orphans_button(found)


def exports_text(found: disk.ExportsFolder) -> str:
    """The exports folder in words.

    >>> from pathlib import Path
    >>> print(exports_text(disk.ExportsFolder()).split(".")[0])
    The exports folder is empty
    >>> folder = disk.ExportsFolder({"r1": [Path("/nowhere/r1-merged.zip")]}, [Path("/nowhere/r0-F16.gguf")])
    >>> print(exports_text(folder))
    | run | files | size |
    |---|---|---|
    | r1 | 1 | 0 B |
    <BLANKLINE>
    **Kept from deleted runs**: 1 file, 0 B (`r0-F16.gguf`). Nothing in the app reaches them any more.
    """
    if not found.by_run and not found.orphans:
        return EXPORTS_EMPTY
    parts = []
    if found.by_run:
        rows = [f"| {run} | {len(paths)} | {disk.size_text(sum(disk.tree_bytes(p) for p in paths))} |"
                for run, paths in sorted(found.by_run.items(), reverse=True)]
        parts.append("\n".join(["| run | files | size |", "|---|---|---|", *rows]))
    if found.orphans:
        count = "1 file" if len(found.orphans) == 1 else f"{len(found.orphans)} files"
        names = ", ".join(f"`{p.name}`" for p in found.orphans[:8]) + (" …" if len(found.orphans) > 8 else "")
        parts.append(f"**Kept from deleted runs**: {count}, {disk.size_text(found.orphan_bytes)} ({names}). "
                     "Nothing in the app reaches them any more.")
    return "\n\n".join(parts)


def orphans_button(found: disk.ExportsFolder) -> gr.Button:
    count = "the file" if len(found.orphans) == 1 else f"the {len(found.orphans)} files"
    return gr.Button(f"Remove {count} from deleted runs ({disk.size_text(found.orphan_bytes)})",
                     visible=bool(found.orphans))


def remove_orphan_exports(operators=(), request: gr.Request = None) -> tuple[str, gr.Button]:
    """Remove the exports whose run is gone, then show the folder again with what was freed above it."""
    try:
        removed, freed = runs.remove_orphan_exports(acting(request, operators))
    except ValueError as exc:
        text, button = exports_view()
        return f"❌ {exc}\n\n{text}", button
    files = "1 file" if len(removed) == 1 else f"{len(removed)} files"
    text, button = exports_view()
    return f"🗑 Removed {files} from deleted runs: {disk.size_text(freed)} freed.\n\n{text}", button
