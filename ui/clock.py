"""The run header's clock: elapsed time and time left that keep moving between two steps.

The header is redrawn when a run file changes (ui/watch.py), which on a CPU is one step every 20-30 s, and on a
GPU a model can take minutes to load before the first step. A clock read from the last step stands still all that
time and looks like a hung run. So the header carries the clock as it stood when the app drew it (elapsed, time
left, and the least time the steps still to come can take), and CLOCK_JS, a page script, moves it on once a second
from there. The browser's own clock is only used to measure time since the header was drawn, so a browser whose
clock is off still reads right. No Gradio event: the page asks the app for nothing."""

from __future__ import annotations

from ui.charts import _finite


def fmt_seconds(s) -> str:
    """Seconds as the header writes them.

    >>> fmt_seconds(65.4), fmt_seconds(3725), fmt_seconds(None)
    ('1m05s', '1h02m', '-')
    """
    if not _finite(s):
        return "-"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def clock_state(status: dict, rows: list[dict], total: int, now: float) -> dict | None:
    """The clock of a run that is on its way, as it stands at `now`: elapsed seconds, seconds left (None before
    a step has been timed) and the least seconds left (the whole steps after the one under way); None for a run
    that has ended, or one that has not started.

    Elapsed counts from the training's start as the trainer logs it, plus the time since its last step; before
    the first step, from the moment the trainer process started (loading the model, sampling the first group), and
    so too for a resumed run until its trainer logs a step: its earlier steps' clock belongs to an earlier process.

    >>> row = {"step": 2, "elapsed": 40.0, "eta_seconds": 160.0, "time": 1000.0}
    >>> clock_state({"state": "running"}, [row], 10, now=1015.0)
    {'elapsed': 55.0, 'left': 145.0, 'floor': 140.0}
    >>> clock_state({"state": "running"}, [row], 10, now=1030.0)["left"]  # a step running long: the others remain
    140.0
    >>> clock_state({"state": "running", "started_at": 990.0}, [], 10, now=1000.0)
    {'elapsed': 10.0, 'left': None, 'floor': None}
    >>> clock_state({"state": "running", "started_at": 90000.0}, [row], 10, now=90005.0)  # resumed a day later
    {'elapsed': 5.0, 'left': None, 'floor': None}
    >>> clock_state({"state": "finished"}, [row], 10, now=1015.0) is None
    True
    """
    if status.get("state") not in ("queued", "running"):
        return None
    started = status.get("started_at")
    last = rows[-1] if rows else {}
    at = last.get("time")
    if not rows or (isinstance(started, (int, float)) and isinstance(at, (int, float)) and started > at):
        # No step yet, or none since this trainer started (a resumed run loading): its own time so far.
        if not isinstance(started, (int, float)):
            return None
        return {"elapsed": round(max(0.0, now - started), 1), "left": None, "floor": None}
    elapsed, eta = last.get("elapsed"), last.get("eta_seconds")
    if not isinstance(elapsed, (int, float)):
        return None
    age = max(0.0, now - at) if isinstance(at, (int, float)) else 0.0
    if not isinstance(eta, (int, float)):
        return {"elapsed": round(elapsed + age, 1), "left": None, "floor": None}
    steps_left = max(0, total - int(last.get("step") or 0))
    per_step = eta / steps_left if steps_left else 0.0
    floor = max(0.0, (steps_left - 1) * per_step)
    return {"elapsed": round(elapsed + age, 1), "left": round(max(floor, eta - age), 1), "floor": round(floor, 1)}


def ended_seconds(status: dict, rows: list[dict]) -> float | None:
    """An ended run's time, as the runs table counts it: from its trainer's start to its end, the closing save and
    merge included, when that trainer made the last step; else the last step's elapsed time (a run without those
    times, or a resume that ended before its first step); None before any step.

    >>> row = {"step": 11, "elapsed": 297.1, "time": 1297.0}
    >>> ended_seconds({"state": "finished", "started_at": 1000.0, "ended_at": 1302.2}, [row])
    302.2
    >>> ended_seconds({"state": "failed", "started_at": 5000.0, "ended_at": 5030.0}, [row])  # a resume that failed
    297.1
    >>> ended_seconds({"state": "finished"}, [row]), ended_seconds({"state": "stopped"}, [])
    (297.1, None)
    """
    if not rows:
        return None
    last = rows[-1]
    started, ended, at = status.get("started_at"), status.get("ended_at"), last.get("time")
    if all(isinstance(v, (int, float)) for v in (started, ended, at)) and started <= at <= ended:
        return round(ended - started, 1)
    return last.get("elapsed")


def clock_html(clock: dict | None, elapsed: float | None = None) -> str:
    """The header's time: a moving clock for a run on its way (`clock`, from clock_state), else `elapsed`, the
    time a run that has ended took (ended_seconds).

    >>> moving = clock_html({"elapsed": 55.0, "left": 145.0, "floor": 140.0})
    >>> moving.split(">")[0]
    "<span class='gs-clock' data-elapsed='55.0' data-left='145.0' data-floor='140.0'"
    >>> moving.count("0m55s"), moving.count("2m25s")
    (1, 1)
    >>> clock_html(None, elapsed=280.4)
    'elapsed 4m40s '
    """
    if clock is None:
        return "" if elapsed is None else f"elapsed {fmt_seconds(elapsed)} "
    attrs = f"data-elapsed='{clock['elapsed']}'"
    text = f"elapsed <span class='gs-elapsed'>{fmt_seconds(clock['elapsed'])}</span>"
    if clock["left"] is not None:
        attrs += f" data-left='{clock['left']}' data-floor='{clock['floor']}'"
        text += f" &nbsp; ETA <span class='gs-left'>{fmt_seconds(clock['left'])}</span>"
    return f"<span class='gs-clock' {attrs}>{text}</span> "


# Once a second: every clock on the page moves on by the time since the app drew it. Time left counts down, but
# never below the least the steps after the current one can take (data-floor): a step that runs long holds it. While
# the page is out of sight, only the time left moves, when its whole minutes change (the title reads them).
CLOCK_JS = """() => {
  if (window.gsClock) return;
  const fmt = (s) => {
    s = Math.max(0, Math.round(s));
    const pad = (n) => String(n).padStart(2, '0');
    return s >= 3600 ? `${Math.floor(s / 3600)}h${pad(Math.floor(s % 3600 / 60))}m`
                     : `${Math.floor(s / 60)}m${pad(s % 60)}s`;
  };
  window.gsClock = setInterval(() => {
    // A page out of sight moves only the time left, once a minute: the tab's title shows it in whole minutes.
    const hidden = document.hidden;
    for (const clock of document.querySelectorAll('.gs-clock[data-elapsed]')) {
      if (!clock.dataset.drawn) clock.dataset.drawn = String(Date.now());
      const since = (Date.now() - Number(clock.dataset.drawn)) / 1000;
      const elapsed = clock.querySelector('.gs-elapsed');
      if (elapsed && !hidden) elapsed.textContent = fmt(Number(clock.dataset.elapsed) + since);
      const left = clock.querySelector('.gs-left');
      if (left && clock.dataset.left) {
        const value = Math.max(Number(clock.dataset.floor), Number(clock.dataset.left) - since);
        const minute = String(Math.round(value / 60));
        if (!hidden || clock.dataset.minute !== minute) left.textContent = fmt(value);
        if (clock.dataset.minute !== minute) clock.dataset.minute = minute;
      }
    }
  }, 1000);
}"""
