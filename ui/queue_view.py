"""The Train tab's queue: trainings added with "Add to queue" wait for the one training now and start by themselves,
oldest first (pipeline/runner.py keeps the line, pipeline/run_folder/run_queue.py holds it on disk). This draws
the line and removes from it; the live view redraws it when the queue file or the runs on disk change."""

from __future__ import annotations

import html
import time
from typing import Any

import gradio as gr

from pipeline import runner
from pipeline.run_folder import run_queue
from pipeline.setup.config import RunConfig
from ui.form import config_to_form
from ui.tab import acting

QUEUE_HELP = ("Each starts by itself when the run before it ends (finished, stopped or failed), with no page open, "
              "as long as the app runs.")


def _when(seconds: float) -> str:
    return time.strftime("%H:%M", time.localtime(seconds))


def queue_html(queue: run_queue.Queue, busy: str | None = None) -> str:
    """The line, in order: position, name, its settings in short, who queued it and when; an entry that could
    not start says why. Empty when nothing waits.

    >>> q = run_queue.Queue([run_queue.Waiting("lr 1e-4", {"max_steps": 8, "learning_rate": 1e-4}, queued_at=0)])
    >>> "1." in queue_html(q, "first") and "lr 1e-4" in queue_html(q) and "after <b>first</b>" in queue_html(q, "first")
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
        rows.append(f"<li><b>{head} {html.escape(entry.label)}</b> <span style='color:var(--body-text-color-subdued)'>"
                    f"{html.escape(entry.summary(varying))} · added {_when(entry.queued_at)}{who}</span>"
                    f"{note}</li>")
    waiting = sum(1 for w in queue.waiting if w.error is None)
    lead = (f"Next after <b>{html.escape(busy)}</b>. {QUEUE_HELP}" if busy and waiting
            else "The first starts within a few seconds." if waiting else "")
    return (f"<div id='queue-list'><b>Queue</b> ({waiting} waiting). {lead}"
            f"<ol style='list-style:none;padding-left:0;margin:4px 0'>{''.join(rows)}</ol></div>")


def queue_choices(queue: run_queue.Queue) -> list[tuple[str, str]]:
    """The Remove picker's entries: (what the user reads, the entry's id)."""
    return [(f"{queue.position(w.id) or '❌'}. {w.label}", w.id) for w in queue.waiting]


def queue_part(shown: str | None, run_names: list[str]) -> dict[str, Any]:
    """The queue's outputs in the live view: the box (hidden when nothing waits), the line, the Remove picker,
    and the Run picker's choices, which move to the run the queue just started when the page showed the run
    before it."""
    queue = run_queue.read()
    busy = runner.busy_run() if queue.waiting else None  # reads every run's status: only when a line is shown
    choices = queue_choices(queue)
    follow = run_queue.follow(queue, shown)
    # Only then: the picker's choices are the server's list of what may be picked, and a page's shown run that was
    # deleted since must stay pickable until the page says it is gone.
    picker = gr.Dropdown(choices=run_names, value=follow) if follow in run_names else gr.skip()
    return {"queue_box": gr.Group(visible=bool(queue.waiting)),
            "queue_view": queue_html(queue, busy[0].name if busy else None),
            "queue_pick": gr.Dropdown(choices=choices, value=choices[0][1] if choices else None),
            "run_select": picker}


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
