"""Run directories on disk: where they live, reading back what a trainer wrote, checkpoints and the runs list.

A run directory is the only thing the trainer, the evaluator and the UI share. Which file holds what,
who writes it and when is decided in one place, docs/run-files.md; the files' names are in
pipeline/run_folder/run_files.py. The JSON plumbing lives in pipeline/run_folder/jsonio.py and the job state files in
pipeline/run_folder/jobstate.py; the run's state and JSON helpers are re-exported here (`runs.write_status`,
`runs.read_jsonl`).
`snapshot(run_dir)` is what the live view reads of a run, in one call. No torch or gradio import.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import re
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Iterator

from pipeline.run_folder.jobstate import busy_with, job_status
from pipeline.run_folder.jobstate import (  # noqa: F401 - re-exported: the run's state, as callers know it (runs.<name>)
    ACTIVE_STATES, DAMAGED, launcher, launcher_alive, process_create_time, process_start, read_status,
    trained_since_evaluation, write_status)
from pipeline.run_folder.jsonio import _read_json, file_problem
from pipeline.run_folder.jsonio import (  # noqa: F401 - re-exported: the JSON files of a run
    append_jsonl, read_json, read_jsonl, unreadable_lines, write_json_atomic)
from pipeline.run_folder import disk, jobs, run_files, stages
from pipeline.run_folder import owners
from pipeline.run_folder.paths import data_dir, runs_dir  # also imported from here by the app and the tabs



# ---- locations ---------------------------------------------------------------------------------


def exports_dir() -> Path:
    """Where the files exported from runs go (zips, GGUF files, metrics CSVs), named after their run."""
    return data_dir() / "exports"


@contextlib.contextmanager
def start_lock():
    """One Start, Resume or Delete at a time on this machine, across threads, sessions and processes (two
    browser tabs, the app and a script): the busy check and the launch that makes a run busy (or the check
    and the removal of a run) happen under an exclusive lock on runs/.start.lock, so two of them at the
    same moment can't both pass."""
    with open(runs_dir() / run_files.START_LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


RUN_NAME_MAX = 40  # characters of a typed run name (the folder name adds the start time before it)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:RUN_NAME_MAX] or "run"


def run_label(typed: str | None, fallback: str) -> str:
    """What names a new run's folder, after its start time: the run name typed beside Start, or `fallback` (the
    model and the prompts) when none was. Letters and digits are kept, lower-cased; anything else becomes '-'.

    >>> run_label("  LR 3e-4 ", "smollm2-tldr"), run_label("", "smollm2-tldr"), run_label(None, "smollm2-tldr")
    ('lr-3e-4', 'smollm2-tldr', 'smollm2-tldr')
    >>> run_label("../../etc", "x")
    'etc'
    >>> run_label("***", "x")
    Traceback (most recent call last):
    ...
    ValueError: A run name needs at least one letter or digit; '***' has none.
    """
    name = (typed or "").strip()
    if not name:
        return _slug(fallback)
    if len(name) > RUN_NAME_MAX:
        raise ValueError(f"A run name has at most {RUN_NAME_MAX} characters; this one has {len(name)}.")
    if not re.search(r"[A-Za-z0-9]", name):
        raise ValueError(f"A run name needs at least one letter or digit; {name!r} has none.")
    return _slug(name)


def new_run_dir(label: str = "run") -> Path:
    """A fresh, unique run directory under runs/ named by time and label."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = runs_dir() / f"{stamp}-{_slug(label)}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    path.mkdir(parents=True)
    return path


# ---- what a trainer wrote --------------------------------------------------------------------------


def _last_per_step(rows: list[dict]) -> list[dict]:
    # After a resume the trainer re-logs steps past the checkpoint; the newest line wins.
    by_step: dict[int, dict] = {}
    for row in rows:
        if isinstance(row.get("step"), int):
            by_step[row["step"]] = row
    return [by_step[k] for k in sorted(by_step)]


def read_metrics(run_dir: str | Path) -> list[dict]:
    return _last_per_step(read_jsonl(Path(run_dir) / run_files.METRICS))


def final_reward(metrics: list[dict]) -> float | None:
    """The train reward of the last step that sampled a batch (a step that trains again on an earlier batch
    logs none).

    >>> final_reward([{"step": 1, "reward": 0.5}, {"step": 2, "reward": None}]), final_reward([])
    (0.5, None)
    """
    return next((r["reward"] for r in reversed(metrics) if r.get("reward") is not None), None)


def read_groups(run_dir: str | Path) -> list[dict]:
    return _last_per_step(read_jsonl(Path(run_dir) / run_files.GROUPS))


def read_evals(run_dir: str | Path) -> list[dict]:
    """Probe lines (pipeline/training/probes.py) by step; a probe re-run after a resume replaces the old line."""
    return _last_per_step(read_jsonl(Path(run_dir) / run_files.EVALS))


def run_problems(run_dir: str | Path, active: bool = False) -> list[str]:
    """What is wrong with a run's files, for the runs list; empty for a healthy run."""
    run_dir = Path(run_dir)
    out = [p for p in (file_problem(run_dir / run_files.CONFIG),) if p]
    if (run_dir / run_files.STATUS).exists() and (p := file_problem(run_dir / run_files.STATUS)):
        out.append(p)
    for name in (run_files.METRICS, run_files.GROUPS, run_files.EVALS):
        bad = unreadable_lines(run_dir / name, active=active)
        if bad:
            lines = ", ".join(map(str, bad[:3])) + (" ..." if len(bad) > 3 else "")
            out.append(f"{name}: {len(bad)} unreadable line{'s' if len(bad) > 1 else ''} skipped (line {lines}).")
    return out


# ---- launches and the effective config ------------------------------------------------------------


def read_launches(run_dir: str | Path) -> list[dict]:
    """launches.jsonl: one line per trainer start (fresh or resume), oldest first."""
    return read_jsonl(Path(run_dir) / run_files.LAUNCHES)


def record_launch(run_dir: str | Path, resume: bool, from_step: int, overrides: dict, argv: list[str]) -> dict:
    """Append this trainer start to the run's history (the trainer's rank 0 calls it)."""
    row = {"time": time.time(), "resume": bool(resume), "from_step": int(from_step), "overrides": dict(overrides),
           "argv": list(argv)}
    append_jsonl(Path(run_dir) / run_files.LAUNCHES, row)
    return row


def apply_overrides(config: dict, launches: list[dict]) -> dict:
    """config.json's settings with each launch's overrides applied in order (a later one wins).

    >>> apply_overrides({"max_steps": 4, "seed": 1}, [{"overrides": {"max_steps": 5}}, {"overrides": {"max_steps": 6}}])
    {'max_steps': 6, 'seed': 1}
    """
    out = dict(config)
    for launch in launches:
        overrides = launch.get("overrides")
        if isinstance(overrides, dict):
            out.update(overrides)
    return out


def effective_config(run_dir: str | Path) -> dict:
    """The settings the run trains with: config.json plus the overrides in launches.jsonl ({} when
    config.json can't be read; a config.json of `{}`, every setting at its default, gives the overrides alone)."""
    return Snapshot(run_dir).config


def log_tail(run_dir: str | Path, lines: int = 40, name: str = run_files.TRAIN_LOG) -> str:
    path = Path(run_dir) / name
    if not path.exists():
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 64 * 1024))
        text = fh.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


# ---- what the live view reads ----------------------------------------------------------------------


class Snapshot:
    """Everything the live view shows of one run, read from its folder on first use and kept: one object per
    tick instead of seven separate trips. Each part is read only when asked for, so a tick that finds
    nothing new reads the status and the metrics alone, and groups.jsonl (a run's largest file) only when
    the groups are redrawn. A part that vanished mid-read raises FileNotFoundError, as the readers do."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)

    @functools.cached_property
    def status(self) -> dict:
        return read_status(self.run_dir)

    @property
    def state(self) -> str | None:
        return self.status.get("state")

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @functools.cached_property
    def written_config(self) -> dict | None:
        """config.json as the run was created with it; None when it can't be read."""
        return _read_json(self.run_dir / run_files.CONFIG)

    @functools.cached_property
    def config(self) -> dict:
        """The effective config (config.json plus --steps overrides); {} when config.json can't be read (see
        written_config to tell that from a config.json of `{}`)."""
        written = self.written_config
        return apply_overrides(written, read_launches(self.run_dir)) if written is not None else {}

    @functools.cached_property
    def problems(self) -> list[str]:
        return run_problems(self.run_dir, active=self.active)

    @functools.cached_property
    def metrics(self) -> list[dict]:
        return read_metrics(self.run_dir)

    @functools.cached_property
    def evals(self) -> list[dict]:
        return read_evals(self.run_dir)

    @functools.cached_property
    def groups(self) -> list[dict]:
        return read_groups(self.run_dir)

    @functools.cached_property
    def eval_status(self) -> dict | None:
        return job_status(self.run_dir, jobs.EVALUATE)

    def size(self, name: str) -> int:
        """A run file's size in bytes (0 when it is not there): what a tick compares to see a change."""
        try:
            return (self.run_dir / name).stat().st_size
        except FileNotFoundError:
            return 0

    def log(self, lines: int = 30) -> str:
        return log_tail(self.run_dir, lines)


def snapshot(run_dir: str | Path) -> Snapshot:
    """One run as the live view sees it: status, effective config, problems, log tail, metrics, probes,
    groups and evaluation state, each read at most once (see Snapshot)."""
    return Snapshot(run_dir)


# ---- checkpoints -------------------------------------------------------------------------------


def checkpoints(run_dir: str | Path, complete_only: bool = True) -> list[Path]:
    """checkpoint-N folders sorted by step; by default only those whose save finished."""
    out = []
    try:
        entries = list(os.scandir(run_dir))  # one listing: the live view's poll reads every run's checkpoints
    except OSError:
        return []
    for entry in entries:
        m = re.fullmatch(re.escape(run_files.CHECKPOINT_PREFIX) + r"(\d+)", entry.name)
        if m and entry.is_dir() and (not complete_only
                                     or os.path.exists(os.path.join(entry.path, run_files.CHECKPOINT_MARKER))):
            out.append((int(m.group(1)), Path(entry.path)))
    return [p for _, p in sorted(out)]


def last_complete_checkpoint(run_dir: str | Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def prune_checkpoints(run_dir: str | Path, keep: int) -> list[Path]:
    """Delete complete checkpoints older than the newest `keep` (0 keeps all); returns the deleted ones.

    Unfinished folders are left alone: one is the save in progress, others are resume's to remove.
    Each loses its marker before its files, so a kill mid-delete leaves a folder that reads as incomplete.
    """
    if keep <= 0:
        return []
    old = checkpoints(run_dir)[:-keep]
    for ckpt in old:
        (ckpt / run_files.CHECKPOINT_MARKER).unlink(missing_ok=True)
        shutil.rmtree(ckpt, ignore_errors=True)
    return old


def checkpoint_step(path: str | Path) -> int:
    return int(Path(path).name.split("-")[-1])


# ---- a full disk -------------------------------------------------------------------------------

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
# How libraries that write in C++ or Rust word the same thing (torch.save, safetensors).
DISK_FULL_MARKERS = ("no space left", "file too large", "disk quota", "os error 28", "os error 27",
                     "os error 122", "file write failed")


def is_disk_full(exc: BaseException | None) -> bool:
    """True when an error (or one it was raised from) says the disk, a quota or a file-size limit is full.

    >>> is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    True
    >>> is_disk_full(RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"))
    True
    >>> is_disk_full(ValueError("bad value"))
    False
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        if any(m in str(exc).lower() for m in DISK_FULL_MARKERS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def room_problem(need: int, folder: str | Path, what: str, also: str = "") -> str | None:
    """Why `need` bytes would not fit on the disk of `folder`, in words (`what` names them with its verb, "The
    zips need"; `also` is another way out, after a comma); None when they fit."""
    free = shutil.disk_usage(folder).free
    if free >= need:
        return None
    return (f"{what} about {need / 2**30:.1f} GiB and {folder} has {free / 2**30:.1f} GiB free. Free some space "
            f"(old exports there, for one){', ' + also + ',' if also else ''} and export again.")


def disk_full_message(run_dir: str | Path, exc: BaseException) -> str:
    """What a user reads when a run stops because the disk filled up, and what to do next."""
    run_dir = Path(run_dir)
    last = last_complete_checkpoint(run_dir)
    try:
        free = shutil.disk_usage(run_dir).free / 2**20
        free_text = f" ({free:,.0f} MB free there now)"
    except OSError:
        free_text = ""
    detail = " ".join(str(exc).split())[:200]
    then = (f"then Resume continues from {last.name}, the last complete checkpoint."
            if last else "then start the run again: no checkpoint was complete.")
    return (f"Disk full: the run could not write its files ({detail}). Free space on the disk that holds "
            f"{run_dir}{free_text}, or save checkpoints less often / keep fewer; {then}")


# ---- listing -----------------------------------------------------------------------------------


MAX_RUN_NAME = 200  # characters; the app names runs by time and label, well under this


def run_name_problem(name) -> str | None:
    """Why `name` (from a form, the API or a model choice) can't name a run, in words; None when it can. Every
    entry point that takes a run name asks this before the name comes near the file system (a NUL byte or an
    over-long name would make the first stat() raise).

    >>> run_name_problem("20261124-101500-smollm2-tldr") is None, run_name_problem("../etc")
    (True, "'../etc' is not a run name: a run is named by its folder, without '/' or '..'. Pick one from the list.")
    >>> run_name_problem("x" * 300)[:46], run_name_problem("a" + chr(0) + "b")
    ('A run name is at most 200 characters (got 300)', 'A run name has no control characters. Pick one from the list.')
    """
    if not isinstance(name, str) or not name:
        return "No run picked. Pick one from the list."
    if len(name) > MAX_RUN_NAME:
        return f"A run name is at most {MAX_RUN_NAME} characters (got {len(name)}). Pick one from the list."
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "A run name has no control characters. Pick one from the list."
    if name in (".", "..") or "/" in name or "\\" in name or name != Path(name).name:
        return f"'{name}' is not a run name: a run is named by its folder, without '/' or '..'. Pick one from the list."
    return None


def resolve_run(name: str | None) -> Path | None:
    """The folder of the run called `name`, or None when there is no such run. The one place a run name
    from the UI or a model choice becomes a path: only a direct child of runs/ holding a config.json,
    never a user-supplied path (`../x`, `/etc`, `a/b` all give None), nor a name run_name_problem refuses."""
    if run_name_problem(name) is not None:
        return None
    path = (runs_dir() / name).resolve()
    if path.parent != runs_dir() or not (path / run_files.CONFIG).exists():
        return None
    return path


def iter_run_dirs() -> Iterator[Path]:
    for p in sorted(runs_dir().iterdir(), reverse=True):
        if p.is_dir() and (p / run_files.CONFIG).exists():
            yield p


def run_summary(run_dir: str | Path) -> dict:
    """One row of the runs list."""
    run_dir = Path(run_dir)
    cfg = effective_config(run_dir)
    status = read_status(run_dir)
    problems = run_problems(run_dir, active=status.get("state") in ACTIVE_STATES)
    if problems and (status.get("state") != DAMAGED) and not cfg:
        status = {**status, "state": DAMAGED}  # a run without readable settings can't be resumed or compared
    metrics = read_metrics(run_dir)
    last = metrics[-1] if metrics else {}
    started, ended = status.get("started_at"), status.get("ended_at")
    duration = (ended or time.time()) - started if started else None
    return {
        "run": run_dir.name,
        "path": str(run_dir),
        "state": status.get("state"),
        "owner": owners.run_owner(run_dir),
        "model": stages.model_label(cfg.get("model")),  # a next stage's: the run and step it started from
        "dataset": (cfg.get("dataset") or {}).get("source") if isinstance(cfg.get("dataset"), dict) else None,
        "rewards": ", ".join(str(r.get("name", "?")) for r in cfg.get("rewards") or [] if isinstance(r, dict)),
        "step": last.get("step", 0),
        "max_steps": cfg.get("max_steps"),
        "final_reward": final_reward(metrics),
        "duration_s": round(duration, 1) if duration is not None else None,
        "error": status.get("error"),
        "problems": " ".join(problems) or None,
    }


def list_runs() -> list[dict]:
    """Every run's row; a run whose files can't be read is listed as damaged, never hides the others."""
    rows = []
    for path in iter_run_dirs():
        try:
            rows.append(run_summary(path))
        except Exception as exc:  # noqa: BLE001 - one broken run must not take the list down
            rows.append({"run": path.name, "path": str(path), "state": DAMAGED,
                         "problems": f"Can't be read: {type(exc).__name__}: {exc}"})
    return rows


def delete_run(run_dir: str | Path, actor: owners.Actor | None = None, with_exports: bool = False) -> disk.Deleted:
    """Remove a run directory, refusing anything outside runs/, a run that a job (training, evaluation,
    push) is still reading or writing, or (under a login) another user's run. The checks and the removal
    happen under the start lock, so a Resume or an Evaluate can't launch into the folder in between.
    The files exported from it (<data>/exports) go too `with_exports`, and are kept otherwise; either way the
    answer says which, and the bytes given back."""
    run_dir = Path(run_dir).resolve()
    if run_dir.parent != runs_dir():
        raise ValueError("Only run directories under the data directory's runs/ can be deleted.")
    refusal = owners.refusal(run_dir, actor, "delete it")
    if refusal:
        raise ValueError(refusal)
    with start_lock():
        for job in busy_with(run_dir):  # any kind of job (pipeline/run_folder/jobs.py) still reading or writing it
            raise ValueError(f"This run is {job.doing}: wait for {job.what} or stop it first.")
        deleted = disk.Deleted(disk.tree_bytes(run_dir, linked=False))  # a file another run links to stays
        shutil.rmtree(run_dir)
    exports = disk.run_exports(run_dir.name, exports_dir())
    if with_exports:
        deleted.exports_removed, deleted.removed_bytes = exports, disk.remove(exports)
    else:
        deleted.exports_kept = exports
    return deleted


def exports_on_disk() -> disk.ExportsFolder:
    """The exports folder, sorted by the runs on disk (and the orphans, whose run was deleted)."""
    return disk.exports_folder(exports_dir(), [p.name for p in iter_run_dirs()])


def remove_orphan_exports(actor: owners.Actor | None = None) -> tuple[list[Path], int]:
    """Remove the exports whose run is no longer on disk: the files a delete kept. Whose they were is not known any
    more, so under a login only an operator may; without one, the one user may. Returns what went and its bytes."""
    if actor is not None and actor.user is not None and not actor.operator:
        raise ValueError("Files kept from deleted runs may have been anyone's: only an operator may remove them.")
    with start_lock():  # not while a Start or a Delete is deciding what is on disk
        orphans = exports_on_disk().orphans
        return orphans, disk.remove(orphans)
