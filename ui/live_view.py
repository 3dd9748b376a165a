"""The Train tab's live view of the shown run: progress, charts, health, probes, groups and log, redrawn part
by part. The page's poll (ui/watch.py) presses the live view's Refresh when a part's stamp moved
(pipeline/run_folder/live.py), and `live_view` redraws those parts alone."""

from __future__ import annotations

from typing import Any

import gradio as gr

from pathlib import Path

from pipeline import runner
from pipeline.run_folder import live, runs, stages, token_log
from pipeline.setup import steering
from pipeline.setup.config import RunConfig
from ui import charts, probes_view, queue_view, steer_view, token_views, views
from ui.runs_panel import eval_view, plot, run_names, run_path, runs_table


def snap_config(snap: runs.Snapshot) -> RunConfig | None:
    """The settings the run trains with (config.json plus recorded --steps overrides), from a snapshot of the
    run, as a RunConfig; None when config.json is missing or damaged (the progress header names the damage,
    see runs.run_problems, and the rest of the live view still shows)."""
    try:
        settings = snap.config  # {} when config.json is missing or unreadable
        return RunConfig.from_dict(settings) if settings else None
    except (OSError, ValueError, TypeError):  # ValueError covers ConfigError; TypeError a field of the wrong shape
        return None


# The live view's parts (pipeline/run_folder/live.py stamps each one) and the outputs each part redraws, by name. Their
# order is the order the API returns the outputs in.
PART_OUTPUTS = {
    "progress": ("progress", "stop_btn"),
    "charts": ("health", "reward_plot", *(f"plot_{key}" for key in charts.CHARTS), "plot_colors"),
    "probes": ("probe_plot", "probes", "probe_pick", "plot_colors"),
    "jobs": ("eval_box", "eval_stop_btn", "push_stop_btn"),
    "runs": ("runs_table",),
    "groups": ("groups", "group_step"),
    "tokens": ("groups",),  # the token view's record: drawn only in a shaded mode (groups_view)
    "log": ("log",),
    "queue": ("queue_box", "queue_view", "queue_pick", "run_select"),  # the line, and a run it started
    "queue_times": ("queue_view",),  # the line's start times, which the training's steps move
}
ALL_PARTS = " ".join(PART_OUTPUTS)
# The parts followed while the Train tab is out of sight (ui/watch.py): the header, which the page's title reads, and
# the queue, which moves the page to the run it starts after the shown one.
BACKGROUND = ("progress", "queue")
# The line plots, whose colour per series (charts.series_colors) follows their data in a second event (see
# plot_colors).
PLOTS = ("reward_plot", *(f"plot_{key}" for key in charts.CHARTS), "probe_plot")
# The group inspector's slider redraws the groups alone (the page's side; through the API, /refresh takes parts).
GROUPS_ONLY_JS = "(run, step, pick, action, mode, parts) => [run, step, pick, action, mode, 'groups']"


def live_view(run_name: str | None = None, group_step=0, probe_pick: str | None = "latest",
              action_name: str | None = None, token_mode: str = token_views.TEXT,
              parts: str | None = ALL_PARTS, request: gr.Request = None) -> dict[str, Any]:
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
        out.update(job_stop_buttons())
    if "runs" in moved:
        out["runs_table"] = runs_table()
    if "queue" in moved:
        out.update(queue_view.queue_part(run_name, run_names(), page_of(request)))
    elif "queue_times" in moved:
        out["queue_view"] = queue_view.queue_line()
    return out


def run_header(run_name: str | None = None, group_step=0, probe_pick: str | None = "latest",
               action_name: str | None = None, token_mode: str = token_views.TEXT,
               parts: str | None = " ".join(BACKGROUND), request: gr.Request = None) -> dict[str, Any]:
    """The run header (and Stop) and the queue, those of them `parts` names: what the page's poll redraws while the
    Train tab is out of sight, so the page's title can follow the run, and the next one the queue starts. Takes the
    live view's inputs."""
    moved = [part for part in (parts or "").split() if part in BACKGROUND]
    out = live_view(run_name, group_step, probe_pick, action_name, token_mode,
                    " ".join(part for part in moved if part != "queue"))
    if "queue" in moved:
        names, page = run_names(), page_of(request)
        started = queue_view.followed_run(run_name, names, page=page)
        out.update(queue_view.queue_part(run_name, names, page, follow=started))
        if started:  # the page moves to the run the queue started: its header comes in the same redraw
            out.update(shown_run_view(started, {"progress"}))
    return out


def page_of(request: gr.Request | None) -> str | None:
    """The page an event came from (its Gradio session), or None for a call without one."""
    return getattr(request, "session_hash", None) or None


def job_stop_buttons() -> dict[str, gr.Button]:
    """The Runs panel's Stop evaluation and Stop push, usable while such a job runs (on any run: each stops the
    panel's run's job, else the one running elsewhere), greyed otherwise, as Stop is for the training."""
    return {"eval_stop_btn": gr.Button(interactive=bool(runner.active("eval"))),
            "push_stop_btn": gr.Button(interactive=bool(runner.active("push")))}


def stop_button(state: str | None) -> gr.Button:
    """Stop, usable while the shown run is queued or training; greyed for a run that has ended, or when none is
    shown."""
    return gr.Button(interactive=state in runs.ACTIVE_STATES)


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
        "progress": {"progress": head, "stop_btn": stop_button(None)},
        "charts": {"health": "", "reward_plot": None, **{f"plot_{key}": None for key in charts.CHARTS},
                   "plot_colors": {}},
        "groups": groups_view([], 0),
        "tokens": {"groups": views.groups_html(None)},
        "probes": {"probe_plot": gr.LinePlot(None, visible=True),
                   "probes": probes_view.probes_empty_html(RunConfig().to_dict()),
                   "probe_pick": _probe_picker(probes_view.probe_choices([]), probe_pick), "plot_colors": {}},
        "log": {"log": ""},
    }
    return {name: value for part in parts for name, value in empty[part].items()}


def _draw_run(snap: runs.Snapshot, run_name: str, parts: set[str], group_step, probe_pick,
              token_mode: str = token_views.TEXT) -> dict[str, Any]:
    cfg = snap_config(snap)  # with --steps overrides; None when damaged: the header says so, the rest shows
    max_steps = cfg.max_steps if cfg else None
    # The changes steered into the run: listed in the header, a marker on every chart at the step of each.
    steered = steering.applied_changes(snap.run_dir) if parts & {"progress", "charts", "probes"} else []
    markers = charts.change_markers(steered)
    out: dict[str, Any] = {}
    if "progress" in parts:
        ended = snap.state in ("finished", "stopped")  # then the held-out probes' before and after, under the header
        out["progress"] = (views.progress_html(run_name, snap.status, snap.metrics, max_steps, snap.problems)
                           + (probes_view.outcome_html(snap.evals, snap.state, started_from=stages.started_from(
                               cfg.model if cfg else None)) if ended else "")
                           + steer_view.changes_html(steered))
        out["stop_btn"] = stop_button(snap.state)
    if "charts" in parts:
        metrics = snap.metrics
        lim = charts.step_axis(max_steps, [m["step"] for m in metrics])
        frames = {"reward_plot": charts.with_markers(charts.reward_frame(metrics), markers),
                  **{f"plot_{key}": charts.with_markers(charts.metric_frame(metrics, key), markers,
                                                        charts.CHART_Y_LIMITS.get(key)) for key in charts.CHARTS}}
        out.update({"health": views.health_html(metrics, snap.evals, cfg.to_dict() if cfg else None),
                    **{name: plot(frame, lim) for name, frame in frames.items()}})
        out["plot_colors"] = {name: charts.series_colors(frame) for name, frame in frames.items()}
    if parts & {"groups", "tokens"}:
        # the largest files of a run: read only for their part, and the token record only for the step shown
        drawn = groups_view(snap.groups, group_step, snap.run_dir, token_mode)
        out.update(drawn if "groups" in parts else {"groups": drawn["groups"]})
    if "probes" in parts:
        evals, state = snap.evals, snap.state
        settings = cfg.to_dict() if cfg else {}
        lim = charts.step_axis(settings.get("max_steps"), [e["step"] for e in evals], charts.BEFORE_STEP_0)
        choices = probes_view.probe_choices(evals, settings.get("max_steps"), state)
        probe_frame = charts.with_markers(probes_view.probe_frame(evals), markers)
        out["plot_colors"] = {**out.get("plot_colors", {}), "probe_plot": charts.series_colors(probe_frame)}
        # A run with probes off has no held-out chart to draw: its panel below says so, and the empty chart goes.
        shown = bool(evals) or not probes_view.probes_off(settings)
        out.update({"probe_plot": plot(probe_frame, lim, visible=shown),
                    "probes": probes_view.probes_html(evals, probe_pick, settings, state),
                    "probe_pick": _probe_picker(choices, probe_pick, shown)})
    if "log" in parts:
        out["log"] = snap.log(30)
    return out


def plot_colors(colors: dict | None) -> dict[str, Any]:
    """The second event of a redraw whose colours changed: each redrawn plot's colour per series, sent after its
    data. A plot builds its legend when its colour map changes, from the data it holds at that moment, so a series
    that appears mid-run (a steering marker, a reward turned monitor) is in the legend only when its map comes
    after its data; an unchanged map leaves the plot as it is, so a redraw with the same colours needs no second
    event."""
    return {name: gr.LinePlot(color_map=colors_of) for name, colors_of in (colors or {}).items()}


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


def _probe_picker(choices: list[tuple[str, str]], pick, visible: bool = True) -> gr.Radio:
    # The value is only reset when the pick is gone: a redraw started before the user picked a step carries
    # the old pick and must not put it back (the next redraw has the new one).
    if pick in [v for _, v in choices]:
        return gr.Radio(choices=choices, visible=visible)
    return gr.Radio(choices=choices, value="latest", visible=visible)


def picked_probes(run_name: str | None, pick) -> str:
    """The completions panel at the probe step the user picked."""
    return shown_run_view(run_name, {"probes"}, probe_pick=pick)["probes"]
