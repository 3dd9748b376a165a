"""Job state files (status.json, eval_status.json, ...) and whether the process behind one is still alive,
and the worker's side of a job (`job_worker`).

Which process may write which state to which file is declared with each kind of job (pipeline/run_folder/jobs.py) and
enforced here: every state write goes through `write_state`, each writer may write only its own states, and
a launch never overwrites a live process's "running". Readers never write: a writer that died without
saying so reads as failed (pid + start liveness, so a recycled pid is not mistaken for it).
No torch or gradio import.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from pipeline.run_folder import jobs, run_files
from pipeline.run_folder.jsonio import _read_json, file_problem, write_json_atomic

STATES = ("new", "queued", "running", "finished", "failed", "stopped")  # "new": a config, never started
DAMAGED = "damaged"  # read only: a run whose config.json or status.json can't be read (never written)
QUEUED_GRACE_S = 120  # a launch that wrote "queued" but no launcher record by then never started
ACTIVE_STATES = ("queued", "running")
EVAL_STATES = ("queued", "running", "done", "failed", "stopped")

log = logging.getLogger("grpo_studio.jobs")


# ---- process liveness --------------------------------------------------------------------------
# A process is named by its pid and its start: the pid alone may have been given to another process since.
# The start is read as the kernel keeps it, in clock ticks since boot (field 22 of /proc/PID/stat) with the
# boot's id, and compared exactly: a wall-clock start time (psutil's create_time is boot time + ticks) moves
# when the system clock is stepped, and a live trainer would then read as dead. Records written before this
# carry only the wall-clock create_time; they, and systems without /proc, keep the old 1 s comparison.

PROC = Path("/proc")


def _boot_id() -> str | None:
    try:
        return (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip() or None
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot; None without /proc (or no such process)."""
    try:
        stat = (PROC / str(int(pid)) / "stat").read_text()
        # The name (field 2) is in parentheses and may hold spaces or ')': count fields after its last ')'.
        return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the part after ')' starts at field 3
    except (OSError, ValueError, IndexError):
        return None


def process_start(pid: int, prefix: str = "") -> dict:
    """The fields that name a process's start, for a state file or a launcher record (`prefix` "pid_" gives
    pid_create_time, pid_start_ticks and pid_boot_id): the wall-clock create time, and where /proc exists
    the boot-relative start that liveness compares."""
    fields = {"create_time": process_create_time(pid), "start_ticks": _start_ticks(pid), "boot_id": _boot_id()}
    return {prefix + key: value for key, value in fields.items()}


def record_alive(record: dict, prefix: str = "") -> bool:
    """Whether the process a record names (its "pid" and start fields, see process_start) is still alive."""
    return _process_alive(record.get("pid"), record.get(prefix + "create_time"),
                          record.get(prefix + "start_ticks"), record.get(prefix + "boot_id"))


def _process_alive(pid: int | None, create_time: float | None, start_ticks: int | None = None,
                   boot_id: str | None = None) -> bool:
    if not pid:
        return False
    try:
        import psutil

        proc = psutil.Process(int(pid))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        # A recycled pid belongs to a different process: compare starts, exactly where the kernel's are known.
        ticks = _start_ticks(int(pid)) if start_ticks is not None else None
        if ticks is not None:
            return ticks == int(start_ticks) and (boot_id is None or boot_id == _boot_id())
        return create_time is None or abs(proc.create_time() - float(create_time)) < 1.0
    except Exception:  # noqa: BLE001 - no such process, or no permission: treat as gone
        return False


def process_create_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001
        return None


def _writer_alive(status: dict, launcher_info: dict | None) -> bool:
    """Whether an active state file still has a live writer: "running" names its process, "queued" its
    launcher's (or is young enough that the launcher record may still come). Other states: True."""
    state = status.get("state")
    if state == "running":
        return record_alive(status, "pid_")
    if state == "queued" and launcher_info:
        return record_alive(launcher_info)
    if state == "queued":
        return time.time() - float(status.get("queued_at") or 0) < QUEUED_GRACE_S
    return True


# ---- the one state writer ----------------------------------------------------------------------


def write_state(run_dir: str | Path, name: str, writer: str, state: str, fresh: bool = False,
                **fields: Any) -> dict:
    """The one way a state file (status.json, eval_status.json, ...) is written: merged with what is there
    (or `fresh`: replacing it), atomically, by a writer that owns `state` (declared in pipeline/run_folder/jobs.py).

    A launch ("queued") never overwrites a process that says it is running and is still alive."""
    allowed = jobs.state_writers().get((name, writer))
    if allowed is None or state not in allowed:
        raise ValueError(f"The {writer} does not write state {state!r} to {name}; see its declaration in "
                         "pipeline/run_folder/jobs.py.")
    path = Path(run_dir) / name
    current = _read_json(path) or {}
    if state == "queued" and current.get("state") == "running" and record_alive(current, "pid_"):
        raise RuntimeError(f"{name}: pid {current.get('pid')} is still running; a new launch must wait for it.")
    if fresh:
        current = {}
    current.update(fields)
    current["state"] = state
    current["updated_at"] = time.time()
    if state not in ACTIVE_STATES and current.get("ended_at") is None:  # a launch reset it to None
        current["ended_at"] = time.time()
    write_json_atomic(path, current)
    return current


# ---- any job: its launcher record and a state file read back --------------------------------------


def launcher_record_alive(run_dir: str | Path, launcher_file: str) -> bool:
    """Whether the process the app launched for a job (its pid and start time in `launcher_file`) still exists."""
    return record_alive(_read_json(Path(run_dir) / launcher_file) or {})


def read_state(run_dir: str | Path, name: str, launcher_file: str, died: str) -> dict | None:
    """A job's state file (None when the job never ran), corrected for a writer that died without saying so:
    it then reads as failed with `died` as its error. A damaged file reads as failed with the reason."""
    run_dir = Path(run_dir)
    status = _read_json(run_dir / name)
    if status is None:
        if (run_dir / name).exists():
            return {"state": "failed", "error": file_problem(run_dir / name)}
        return None
    if not _writer_alive(status, _read_json(run_dir / launcher_file)):
        status = {**status, "state": "failed", "crashed": True, "error": status.get("error") or died}
    return status


# ---- training: status.json ------------------------------------------------------------------------


def write_status(run_dir: str | Path, state: str, writer: str | None = None, **fields: Any) -> dict:
    """Update status.json (merging with what is there) atomically. `writer` defaults to the state's
    owner: the launcher writes "queued", the trainer every other state."""
    if state not in STATES:
        raise ValueError(f"state must be one of {STATES}")
    writer = writer or ("launcher" if state == "queued" else "trainer")
    return write_state(run_dir, jobs.TRAIN.status_file, writer, state, **fields)


def failure_since(run_dir: str | Path, since: float, name: str = jobs.TRAIN.status_file) -> str | None:
    """The error of a failure written to state file `name` at or after `since` (by another process of the
    same job, such as another trainer rank), or None."""
    status = _read_json(Path(run_dir) / name) or {}
    ended = status.get("ended_at")
    if status.get("state") == "failed" and status.get("error") and ended is not None and ended >= since:
        return str(status["error"])
    return None


def launcher(run_dir: str | Path) -> dict | None:
    return _read_json(Path(run_dir) / jobs.TRAIN.launcher_file)


def launcher_alive(run_dir: str | Path) -> bool:
    """Whether the process the app launched for this run (trainer or torchrun) still exists."""
    return launcher_record_alive(run_dir, jobs.TRAIN.launcher_file)


def read_status(run_dir: str | Path) -> dict:
    """status.json, corrected for a trainer that died without saying so (SIGKILL, OOM killer)."""
    run_dir = Path(run_dir)
    path = run_dir / jobs.TRAIN.status_file
    status = _read_json(path)
    if status is None:
        if path.exists():
            return {"state": DAMAGED, "error": file_problem(path)}
        # A folder with a config that no trainer ever started (a template, a copied run): not active.
        exists = (run_dir / run_files.CONFIG).exists()
        return {"state": "new"} if exists else {"state": "failed", "error": "This run folder has no config.json."}
    if not _writer_alive(status, launcher(run_dir)):
        status = {**status, "state": "failed", "crashed": True, "error": status.get("error") or jobs.TRAIN.died_message}
    return status


def trained_since_evaluation(run_dir: str | Path) -> bool:
    """Whether a training of the run ended after its eval.json was written (a resume to a later step): the
    evaluation's numbers are then for the model before."""
    ended = read_status(run_dir).get("ended_at")
    try:
        return bool(ended) and float(ended) > (Path(run_dir) / run_files.EVAL_RESULT).stat().st_mtime
    except (OSError, TypeError, ValueError):
        return False


# ---- any kind, by its declaration -----------------------------------------------------------------


def job_status(run_dir: str | Path, kind: str | jobs.Job) -> dict | None:
    """A job's state file read back (None when it never ran); a writer that died without saying so reads as
    failed. The training's is the run's own state (read_status: a run never started is "new")."""
    spec = jobs.job(kind)
    if spec.run_state:
        return read_status(run_dir)
    return read_state(run_dir, spec.status_file, spec.launcher_file, spec.died_message)


def job_active(run_dir: str | Path, kind: str | jobs.Job) -> bool:
    return (job_status(run_dir, kind) or {}).get("state") in ACTIVE_STATES


def busy_with(run_dir: str | Path) -> list[jobs.Job]:
    """The kinds of job queued or running on a run now (a run is busy while any is)."""
    return [spec for spec in jobs.JOBS.values() if job_active(run_dir, spec)]


# ---- the worker's side of a job ----------------------------------------------------------------------


class JobStopped(BaseException):
    """SIGTERM or SIGINT (the app's Stop) arrived. A BaseException, like KeyboardInterrupt, so that no
    library's `except Exception` turns a Stop into a failure."""


class JobWorker:
    """A job's own process, as `job_worker` hands it over: it writes the job's states as the job's worker."""

    def __init__(self, run_dir: Path, spec: jobs.Job):
        self.run_dir, self.job = run_dir, spec
        self.started = time.time()
        self.stop_requested = threading.Event()  # set by the first Stop signal
        self.state: str | None = None  # how it ended: None while it runs, then its final state
        self.error: str | None = None
        self.exit_code = 0

    def write(self, state: str, **fields: Any) -> dict:
        """Write one of the worker's states to the job's state file (merged with what is there)."""
        return write_state(self.run_dir, self.job.status_file, self.job.worker, state, **fields)

    def running(self, **fields: Any) -> dict:
        """"running", with this process's pid and start (what liveness compares) and its start time."""
        pid = os.getpid()
        return self.write("running", pid=pid, **process_start(pid, "pid_"), started_at=self.started,
                          ended_at=None, error=None, **fields)

    def finish(self, state: str, **fields: Any) -> dict:
        """The job's last word: from here a late Stop changes nothing (the job's results are written)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)
        self.state = state
        return self.write(state, **fields)


@contextlib.contextmanager
def job_worker(run_dir: str | Path, kind: str | jobs.Job, *, announce: bool = True, graceful: bool = False,
               main: bool = True, failure: Callable[[BaseException], str] = str,
               ending: Callable[[], dict] = dict, **fields: Any) -> Iterator[JobWorker]:
    """The worker's side of a job of `kind`, for its whole process: `with job_worker(run_dir, "eval") as job:`

    - writes "running" with the pid and its start (and `fields`) on entering (unless `announce` is False,
      for a worker that announces itself later with `job.running(...)`);
    - turns SIGTERM and SIGINT into "stopped": at once (JobStopped is raised where the job is), or with
      `graceful` by setting `job.stop_requested` for the job to stop at its next safe point (a second signal
      then raises KeyboardInterrupt, written as stopped with "Interrupted before a clean save.");
    - turns an exception into "failed" with `failure(exc)` as the error (a Stop re-raised by a library as
      another exception is still a stop).

    `main` is False in a worker process that is not the job's main one (a trainer rank other than 0): it
    writes failed, never running or stopped. `ending()` gives fields for the stopped or failed state. The
    exception is not raised again; `job.exit_code` says how it ended (0, 1 failed, 130 stopped)."""
    spec = jobs.job(kind)
    job = JobWorker(Path(run_dir), spec)

    def on_signal(signum, frame):
        if graceful and not job.stop_requested.is_set():
            log.info("Stop requested (signal %d): finishing the current step, then saving.", signum)
            job.stop_requested.set()
            return
        job.stop_requested.set()  # the exception may surface wrapped (inside a lazy import, a model load)
        if importing(frame):
            # Not raised inside an import: torch runs parts of its own from C++, where a Python exception aborts the
            # process ("terminate called", no state written). The signal comes again once the import is done.
            signal_after_import(signum, pending=lambda: job.state is None)
            return
        raise KeyboardInterrupt if graceful else JobStopped

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
    # A crash in native code (a segfault in a library) writes no state: its log gets every thread's Python stack.
    with contextlib.suppress(ValueError, OSError):  # a stderr with no file behind it: no report, the job goes on
        faulthandler.enable(all_threads=True)
    try:
        if announce and main:
            job.running(**fields)
        yield job
    except (JobStopped, KeyboardInterrupt) as exc:
        error = "Interrupted before a clean save." if isinstance(exc, KeyboardInterrupt) else None
        _end(job, "stopped", error, main, ending)
    except Exception as exc:  # noqa: BLE001 - every failure ends in the state file, said in words
        if job.stop_requested.is_set() and not graceful:
            _end(job, "stopped", None, main, ending)
        else:
            _end(job, "failed", failure(exc), True, ending)
    finally:
        for signum, handler in previous.items():
            with contextlib.suppress(TypeError, ValueError):
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def importing(frame) -> bool:
    """Whether `frame` runs inside a module import (any frame under it is the import machinery's)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def signal_after_import(signum: int, pending: Callable[[], bool], every_s: float = 0.05) -> None:
    """Send `signum` to this process again as soon as its main thread is no longer inside an import, unless the job
    has ended by then (`pending()` False: its handler is gone, and the signal would only kill a finished process)."""
    main = threading.main_thread().ident

    def wait_then_signal() -> None:
        while importing(sys._current_frames().get(main)):
            time.sleep(every_s)
        if pending():
            os.kill(os.getpid(), signum)

    threading.Thread(target=wait_then_signal, name="stop-after-import", daemon=True).start()


def _end(job: JobWorker, state: str, error: str | None, write: bool, ending: Callable[[], dict]) -> None:
    job.state, job.error, job.exit_code = state, error, 130 if state == "stopped" else 1
    if not write:
        return
    if state == "stopped" and failure_since(job.run_dir, job.started, job.job.status_file):
        return  # another process of this job (a trainer rank) failed first: the run failed, and says why
    try:
        job.write(state, error=error, ended_at=time.time(), **ending())
    except OSError as exc:  # a full disk may refuse even this; the app then reads the dead pid as a crash
        print(f"Could not write {job.job.status_file} ({exc}): {error or state}", file=sys.stderr, flush=True)
