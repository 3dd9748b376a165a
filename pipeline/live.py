"""What the Train tab's live view is drawn from, reduced to one cheap signature: file sizes and change
times from stat() calls, and the state of the run's trainer. The page asks for it every second; the
views re-read and redraw only when it changed, so a page that watches a run between two steps costs
the browser and the app almost nothing (bench/watch_cost.py).
"""

from __future__ import annotations

from pathlib import Path

from pipeline import runs

# A shown run's files: each feeds part of the view (header, charts, groups, probes, evaluation, push).
RUN_FILES = ("config.json", runs.STATUS_FILE, runs.LAUNCHES_FILE, "metrics.jsonl", "groups.jsonl", "evals.jsonl",
             runs.EVAL_STATUS_FILE, "eval.json", runs.PUSH_STATUS_FILE)
POLL_S = 1.0  # how often the page asks; a new step shows within about this (bench/chart_latency.py)
# The log tail is redrawn at most once per this many seconds: a chatty log (a reward that warns on every
# call) must not turn the live view back into a redraw every second. Any other change redraws it too.
LOG_EVERY_S = 5
# Every run's files that the runs table and the evaluation box read: states, steps and evaluations.
LISTED_FILES = (runs.STATUS_FILE, "metrics.jsonl", runs.EVAL_STATUS_FILE, "eval.json")


def _stamp(path: Path) -> str:
    """size:mtime of a file, or '-' when it is not there."""
    try:
        st = path.stat()
    except OSError:
        return "-"
    return f"{st.st_size}:{st.st_mtime_ns}"


def run_signature(run_dir: Path | None) -> str:
    """The shown run's files and its state as read_status reports it (a trainer that died without writing
    anything changes the state, not the files)."""
    if run_dir is None:
        return "none"
    if not run_dir.is_dir():
        return "gone"
    files = ",".join(_stamp(run_dir / name) for name in RUN_FILES)
    try:
        log = (run_dir / "train.log").stat().st_mtime_ns // (LOG_EVERY_S * 1_000_000_000)
    except OSError:
        log = "-"
    return f"{files};log {log};{runs.read_status(run_dir).get('state')}"


def listed_signature() -> str:
    """Every run folder's name and listed files: a run that appears, goes, advances or is evaluated."""
    root = runs.runs_dir()
    if not root.is_dir():
        return "no-runs"
    parts = []
    for run_dir in sorted(root.iterdir()):
        if run_dir.is_dir():
            parts.append(run_dir.name + "=" + ",".join(_stamp(run_dir / name) for name in LISTED_FILES))
    return "|".join(parts)


def picked_signature(name: str | None) -> str:
    """A picked run's part of the signature; a name that can't name a run (a NUL byte, 300 characters, a path)
    says why instead of reaching the file system."""
    problem = runs.run_name_problem(name) if name else None
    if problem:
        return f"refused: {problem}"
    return f"{name}:{run_signature(runs.resolve_run(name))}"


def watch_signature(shown: str | None, action: str | None) -> str:
    """One string for the whole Train tab: the shown run, the Runs panel's run and every run's listed files."""
    return "\n".join([picked_signature(shown), picked_signature(action), listed_signature()])
