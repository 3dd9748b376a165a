"""The Train tab's queue: trainings added with "Add to queue" wait for the one training now and start by themselves,
oldest first (pipeline/runner.py keeps the line, pipeline/run_folder/run_queue.py holds it on disk). This draws
the line and removes from it; the live view redraws it when the queue file or the runs on disk change."""

from __future__ import annotations

import html
import threading
import time
from typing import Any

import gradio as gr

from pipeline import runner
from pipeline.run_folder import run_queue, runs
from pipeline.setup.config import RunConfig
from ui.form import config_to_form
from ui.tab import acting

QUEUE_HELP = ("Each starts by itself when the run before it ends (finished, stopped or failed), with no page open, "
              "as long as the app runs.")


def _when(seconds: float) -> str:
    return time.strftime("%H:%M", time.localtime(seconds))


# Settings that leave a step's time as it was: a queued run that differs from the one training only in these (a
# learning-rate or reward-weight sweep, another seed) is timed from it, its length scaled by its steps.
SAME_PACE = {"learning_rate", "seed", "lr_scheduler", "warmup_steps", "max_steps", "epsilon", "epsilon_high",
             "loss_type", "scale_rewards", "max_grad_norm", "importance_sampling_level", "lora_alpha", "lora_dropout",
             "reward_errors", "reward_timeout_s", "keep_checkpoints", "report_to", "save_steps"}


def _pace(config: dict) -> tuple[dict, int] | None:
    """What sets a run's time per step, and its steps, from its config; None when the config can't be read."""
    try:
        cfg = RunConfig.from_dict(config).to_dict()
    except (ValueError, TypeError):
        return None
    cfg["rewards"] = sorted(r["name"] for r in cfg["rewards"])  # the weights cost nothing
    cfg["beta"] = cfg["beta"] > 0  # KL adds the reference model's pass, whatever its weight
    return {k: v for k, v in cfg.items() if k not in SAME_PACE}, max(1, int(cfg["max_steps"]))


def start_times(queue: run_queue.Queue, running: runs.Snapshot | None, now: float) -> dict[str, float]:
    """When each waiting run should start, as a clock time, by entry id: after the training now running ends (its
    own ETA) and each waiting run before it has run about as long as that training takes, scaled by steps. Only
    for runs that train at the running one's pace (SAME_PACE), in an unbroken line from the front; nothing before
    the running training has timed a step, or for one resumed (its clock started part-way).

    >>> import types
    >>> rows = [{"step": 5, "time": 1100.0, "elapsed": 90.0, "eta_seconds": 90.0}]
    >>> run = types.SimpleNamespace(config={"max_steps": 10}, metrics=rows, status={"started_at": 1000.0})
    >>> q = run_queue.Queue([run_queue.Waiting("a", {"max_steps": 10, "learning_rate": 1e-3}, id="a"),
    ...                      run_queue.Waiting("b", {"max_steps": 5}, id="b"),
    ...                      run_queue.Waiting("c", {"max_steps": 10, "num_generations": 8}, id="c"),
    ...                      run_queue.Waiting("d", {"max_steps": 10}, id="d")])
    >>> start_times(q, run, now=1110.0)  # it ends at 1190, 190 s after it started; G=8 is another pace
    {'a': 1190.0, 'b': 1380.0, 'c': 1475.0}
    >>> start_times(q, types.SimpleNamespace(config={}, metrics=[], status={}), now=1110.0)
    {}
    """
    rows = running.metrics if running is not None else []
    last = rows[-1] if rows else {}
    started, at, eta = running.status.get("started_at") if running else None, last.get("time"), last.get("eta_seconds")
    if not all(isinstance(v, (int, float)) for v in (started, at, eta)) or rows[0].get("time", 0) < started:
        return {}
    end = now + max(0.0, eta - (now - at))
    total, pace = end - started, _pace(running.config)  # the running training, launch to end
    processes = running.status.get("world_size") or 1
    out = {}
    for entry in queue.waiting:
        if entry.error is not None:
            continue
        out[entry.id] = end
        theirs = _pace(entry.config)
        if pace is None or theirs is None or theirs[0] != pace[0] or entry.nproc != processes:
            break  # its time is unknown, so is every start after it
        end += total * theirs[1] / pace[1]
    return out


def queue_html(queue: run_queue.Queue, busy: str | None = None, starts: dict[str, float] | None = None) -> str:
    """The line, in order: position, name, its settings in short, who queued it and when, and when it should start
    (`starts`, by entry id); an entry that could not start says why. Empty when nothing waits.

    >>> q = run_queue.Queue([run_queue.Waiting("lr 1e-4", {"max_steps": 8, "learning_rate": 1e-4}, queued_at=0)])
    >>> "1." in queue_html(q, "first") and "lr 1e-4" in queue_html(q) and "after <b>first</b>" in queue_html(q, "first")
    True
    >>> "starts about" in queue_html(q, "first", {q.waiting[0].id: 0.0})
    True
    >>> queue_html(run_queue.Queue())
    ''
    """
    if not queue.waiting:
        return ""
    rows, varying = [], queue.varying()
    for entry in queue.waiting:
        place = queue.position(entry.id)
        who = f" · queued by {html.escape(entry.owner)}" if entry.owner else ""  # under a login
        head = f"{place}." if place else "❌"
        note = (f"<div class='gs-error'>Could not start: {html.escape(entry.error)} Load it into the form to set it "
                "up again, then remove it from the queue.</div>" if entry.error else "")
        start = (starts or {}).get(entry.id)
        when = f" · <b class='gs-queue-start'>starts about {_when(start)}</b>" if start is not None else ""
        rows.append(f"<li><b>{head} {html.escape(entry.label)}</b> <span style='color:var(--body-text-color-subdued)'>"
                    f"{html.escape(entry.summary(varying))} · added {_when(entry.queued_at)}{who}</span>{when}"
                    f"{note}</li>")
    waiting = sum(1 for w in queue.waiting if w.error is None)
    lead = (f"Next after <b>{html.escape(busy)}</b>. {QUEUE_HELP}" if busy and waiting
            else "The first starts within a few seconds." if waiting else "")
    return (f"<div id='queue-list'><b>Queue</b> ({waiting} waiting). {lead}"
            f"<ol style='list-style:none;padding-left:0;margin:4px 0'>{''.join(rows)}</ol></div>")


def queue_choices(queue: run_queue.Queue) -> list[tuple[str, str]]:
    """The Remove picker's entries: (what the user reads, the entry's id)."""
    return [(f"{queue.position(w.id) or '❌'}. {w.label}", w.id) for w in queue.waiting]


def queue_part(shown: str | None, run_names: list[str], page: str | None = None,
               follow: str | None = None) -> dict[str, Any]:
    """The queue's outputs in the live view: the box (hidden when nothing waits), the line, the Remove picker,
    and the Run picker's choices, which move to the run the queue just started when the page (`page`, its session)
    showed the run before it; `follow` when the caller has already found that run."""
    queue = run_queue.read()
    choices = queue_choices(queue)
    follow = follow or followed_run(shown, run_names, queue, page)
    # Only then: the picker's choices are the server's list of what may be picked, and a page's shown run that was
    # deleted since must stay pickable until the page says it is gone.
    picker = gr.Dropdown(choices=run_names, value=follow) if follow else gr.skip()
    return {"queue_box": gr.Group(visible=bool(queue.waiting)),
            "queue_view": queue_line(queue),
            "queue_pick": gr.Dropdown(choices=choices, value=choices[0][1] if choices else None),
            "run_select": picker}


# (page, run, the run the queue started after it) -> when that page moved on: a page moves on from a run once, so
# someone who picks the ended run again is not taken away from it by the queue's next change.
_MOVED_ON: dict[tuple[str, str, str], float] = {}
_MOVED_ON_LOCK = threading.Lock()


def followed_run(shown: str | None, run_names: list[str], queue: run_queue.Queue | None = None,
                 page: str | None = None) -> str | None:
    """The run a page showing `shown` moves to: the one the queue has just started after it, if it is listed and
    this page (its session; None: a caller without one, which moves every time) has not moved on from it already.
    """
    follow = run_queue.follow(run_queue.read() if queue is None else queue, shown)
    if not follow or follow not in run_names:
        return None
    if page is None:
        return follow
    now = time.time()
    with _MOVED_ON_LOCK:
        for key in [key for key, at in _MOVED_ON.items() if now - at > run_queue.FOLLOW_S]:
            del _MOVED_ON[key]  # past the follow window, run_queue.follow says no by itself
        if (page, shown, follow) in _MOVED_ON:
            return None
        _MOVED_ON[(page, shown, follow)] = now
    return follow


def queue_line(queue: run_queue.Queue | None = None) -> str:
    """The line as queue_html draws it, after the training now running, with the start times it gives."""
    queue = run_queue.read() if queue is None else queue
    busy = runner.busy_run() if queue.waiting else None  # reads every run's status: only when a line is shown
    try:
        starts = start_times(queue, runs.Snapshot(busy[0]), time.time()) if busy else {}
    except OSError:  # the training's folder went mid-read: no times this once
        starts = {}
    return queue_html(queue, busy[0].name if busy else None, starts)


def load_queued(entry_id: str | None, allow_custom: bool = False) -> dict[str, Any]:
    """The picked entry's settings back in the form, with its name: to change a queued run (load, remove it, add
    again), or to queue one like it. Anyone may load them: every user sees every run's settings.
    {form key, "run_name" or "message": update}."""
    entry = next((w for w in run_queue.read().waiting if w.id == entry_id), None) if entry_id else None
    if entry is None:
        return {"message": "Pick a queued run to load: it may have started, or been removed."}
    try:
        values = config_to_form(RunConfig.from_dict(entry.config), allow_custom=allow_custom)
    except (ValueError, TypeError) as exc:  # ValueError covers ConfigError
        return {"message": f"❌ Its settings can't be read: {exc}"}
    return {**values, "run_name": entry.label,
            "message": f"Loaded **{entry.label}**'s settings into the form. Press Add to queue for another run like "
                       "it; to change this one instead, remove it from the queue first."}


def remove_from_queue(entry_id: str | None, operators=(), request: gr.Request = None) -> str:
    """Remove the picked entry from the line (its owner, or an operator)."""
    if not entry_id:
        return "Pick a queued run to remove."
    try:
        entry = runner.unqueue(entry_id, acting(request, operators))
    except runner.RunnerError as exc:
        return f"❌ {exc}"
    return f"Removed **{entry.label}** from the queue."
