"""What the live views are drawn from, as one stamp per part of the view: file sizes and change times from
stat() calls, and the state of the shown run's trainer. The page asks for the stamps every second and
redraws only the parts whose stamp moved, so a page that watches a run between two steps costs the
browser and the app almost nothing (bench/watch_cost.py).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from pipeline.run_folder import jobs, run_files, run_queue, runs
from pipeline.run_folder.jobs import PUSH, TRAIN

POLL_S = 1.0  # how often the page asks; a new step shows within about this (bench/chart_latency.py)
# While the log is being written, its stamp moves at most once per this many seconds: a chatty log (a reward
# that warns on every call) must not turn the live view back into a redraw every second. Once the log has
# been quiet this long, its stamp is exact, so its last lines always show.
LOG_EVERY_S = 5
LOG_FILE = run_files.TRAIN_LOG

# The Train tab's parts drawn from the shown run, and the files of that run each one reads. Parts marked
# with the trainer's state also move when a trainer dies without writing anything (SIGKILL, out of memory).
SHOWN_PARTS = {
    # the header: state, step, time, and the run files that are damaged
    "progress": (run_files.CONFIG, run_files.LAUNCHES, TRAIN.status_file, run_files.METRICS, run_files.GROUPS,
                 run_files.EVALS, run_files.STEERING),
    # the charts and the health panel (its held-out trend reads the probes); each steered change is a marker
    "charts": (run_files.CONFIG, run_files.LAUNCHES, run_files.METRICS, run_files.EVALS, run_files.STEERING),
    "groups": (run_files.GROUPS,),
    # the group inspector's token view: redrawn from it only while the inspector shows tokens (ui/live_view.py)
    "tokens": (run_files.TOKENS,),
    "probes": (run_files.CONFIG, run_files.LAUNCHES, run_files.EVALS, run_files.STEERING),
    "log": (LOG_FILE,),
    # the steer panel (ui/steer_panel.py, its own view): the values in force, the requests and their answers
    "steering": (run_files.CONFIG, run_files.LAUNCHES, run_files.STEER_REQUESTS, run_files.STEERING),
}
PARTS = (*SHOWN_PARTS, "jobs", "runs", "push", "models", "queue", "queue_times")


def action_files() -> tuple[str, ...]:
    """The files of the Runs panel's run that its jobs box shows: every kind of job on it but its training
    (pipeline/run_folder/jobs.py), each one's state file and results."""
    return tuple(f for spec in jobs.JOBS.values() if not spec.run_state for f in (spec.status_file, *spec.outputs))


def listed_parts() -> dict[str, tuple[str, ...]]:
    """Every run's files, by the part that lists them: the runs table; the jobs box, which shows a job running
    elsewhere when the Runs panel's run has none; the Chat tab's push message, for any run's push."""
    return {
        "runs": (run_files.CONFIG, TRAIN.status_file, run_files.LAUNCHES, run_files.METRICS, run_files.EVALS,
                 run_files.OWNER, run_files.STEERING),
        "jobs": tuple(spec.status_file for spec in jobs.JOBS.values() if not spec.run_state),
        "push": (PUSH.status_file,),
    }


def _stamp(path: Path) -> str:
    """size:mtime of a file, or '-' when it is not there."""
    try:
        st = path.stat()
    except OSError:
        return "-"
    return f"{st.st_size}:{st.st_mtime_ns}"


def _log_stamp(path: Path, now: float) -> str:
    """The log's stamp: the few-second window it was last written in while it is being written, exact after."""
    try:
        st = path.stat()
    except OSError:
        return "-"
    if now - st.st_mtime < LOG_EVERY_S:
        return f"writing {int(st.st_mtime // LOG_EVERY_S)}"
    return f"{st.st_size}:{st.st_mtime_ns}"


def _digest(text: str) -> str:
    """A short stand-in for a long stamp (every run's files): the page only compares them."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _where(name: str | None) -> tuple[str, Path | None]:
    """What a picked name stands for, as the start of its stamps, and its folder when it is a run on disk. A name
    that can't name a run (a NUL byte, 300 characters, a path) says why instead of reaching the file system."""
    if not name:
        return "none", None
    problem = runs.run_name_problem(name)
    if problem:
        return f"refused: {problem}", None
    run_dir = runs.resolve_run(name)
    return (f"{name}:", run_dir) if run_dir is not None else (f"{name}: gone", None)


def _state(run_dir: Path | None) -> str | None:
    """A run's state as read_status reports it: a trainer that died without writing anything reads as failed."""
    return runs.read_status(run_dir).get("state") if run_dir is not None else None


def _shown_stamps(head: str, run_dir: Path | None, state: str | None, now: float) -> dict[str, str]:
    """The shown run's part stamps; the header and the probes also show its state."""
    if run_dir is None:
        return {part: head for part in SHOWN_PARTS}
    files = {f: _stamp(run_dir / f) for f in {f for names in SHOWN_PARTS.values() for f in names} - {LOG_FILE}}
    files[LOG_FILE] = _log_stamp(run_dir / LOG_FILE, now)
    out = {part: head + ",".join(files[f] for f in names) for part, names in SHOWN_PARTS.items()}
    for part in ("progress", "probes", "steering"):
        out[part] += f";{state}"
    return out


def _listed_stamps() -> dict[str, str]:
    """Every run folder's name and the files each listing part reads: a run that appears, goes or moves."""
    root = runs.runs_dir()
    listed = listed_parts()
    lines: dict[str, list[str]] = {part: [] for part in listed}
    if root.is_dir():
        for run_dir in sorted(root.iterdir()):
            if run_dir.is_dir():
                for part, names in listed.items():
                    lines[part].append(run_dir.name + "=" + ",".join(_stamp(run_dir / f) for f in names))
    names = [line.split("=", 1)[0] for line in lines["runs"]]
    return {**{part: _digest("|".join(found)) for part, found in lines.items()}, "names": _digest("|".join(names))}


def _models_stamp() -> str:
    """What the Chat and RAG tabs offer to talk to from the runs: each run's merged model and complete
    checkpoints. It moves when a run finishes or saves a checkpoint, not at every step."""
    lines = []
    root = runs.runs_dir()
    for run_dir in sorted(root.iterdir()) if root.is_dir() else []:
        steps = [runs.checkpoint_step(c) for c in runs.checkpoints(run_dir)]
        merged = run_files.merged_model(run_dir) is not None
        if merged or steps:
            lines.append(f"{run_dir.name}:{int(merged)}:{steps}")
    return _digest("|".join(lines))


def stamps(shown: str | None, action: str | None, now: float | None = None) -> dict[str, str]:
    """One stamp per part of the live views ({part: stamp}, PARTS): a part is redrawn when its stamp moved.
    `shown` is the run the Train tab's live view shows, `action` the run picked in its Runs panel."""
    now = time.time() if now is None else now
    shown_head, shown_dir = _where(shown)
    action_head, action_dir = _where(action)
    shown_state = _state(shown_dir)
    action_state = shown_state if action_dir == shown_dir else _state(action_dir)
    out = _shown_stamps(shown_head, shown_dir, shown_state, now)
    listed = _listed_stamps()
    action_stamps = ",".join(_stamp(action_dir / f) for f in action_files()) if action_dir is not None else ""
    # The run's own state too: the box says when the run has trained since its evaluation (a resume ended).
    out["jobs"] = f"{action_head}{action_stamps};{action_state};{listed['jobs']}"
    # The table shows every run's state; the two runs on screen are checked for a trainer that died silently.
    out["runs"] = f"{listed['runs']};{shown_head}{shown_state};{action_head}{action_state}"
    out["push"] = listed["push"]
    out["models"] = _models_stamp()
    # The queue of waiting trainings, and the runs there are to pick (a run the queue started appears).
    out["queue"] = f"{_stamp(runs.runs_dir() / run_files.QUEUE)};{listed['names']}"
    # While trainings wait, each step of the one training moves their start times (the line's text alone).
    out["queue_times"] = listed["runs"] if run_queue.read().waiting else ""
    return out
