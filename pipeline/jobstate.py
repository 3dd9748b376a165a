"""Job state files (status.json, eval_status.json) and whether the process behind one is still alive.

Who may write which state to which file is decided in docs/run-files.md and enforced here: every state
write goes through `write_state`, each writer may write only its own states (`STATE_WRITERS`), and a
launch never overwrites a live process's "running". Readers never write: a writer that died without
saying so reads as failed (pid + create-time liveness, so a recycled pid is not mistaken for it).
No torch or gradio import.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pipeline.jsonio import _read_json, file_problem, write_json_atomic

STATES = ("new", "queued", "running", "finished", "failed", "stopped")  # "new": a config, never started
DAMAGED = "damaged"  # read only: a run whose config.json or status.json can't be read (never written)
QUEUED_GRACE_S = 120  # a launch that wrote "queued" but no launcher record by then never started
ACTIVE_STATES = ("queued", "running")
LAUNCHER_FILE = "launcher.json"  # pid of the process the app started (torchrun or the trainer itself)
STATUS_FILE = "status.json"
EVAL_STATUS_FILE = "eval_status.json"
EVAL_LAUNCHER_FILE = "eval_launcher.json"
EVAL_STATES = ("queued", "running", "done", "failed", "stopped")
PUSH_STATUS_FILE = "push_status.json"  # a push of the merged model to the Hub (pipeline/export.py)
PUSH_LAUNCHER_FILE = "push_launcher.json"
# Who may write which state to which file (the table in docs/run-files.md).
STATE_WRITERS: dict[tuple[str, str], tuple[str, ...]] = {
    (STATUS_FILE, "launcher"): ("queued", "failed"),  # "failed": the trainer could not be started
    (STATUS_FILE, "trainer"): ("running", "finished", "stopped", "failed"),
    (EVAL_STATUS_FILE, "launcher"): ("queued",),
    (EVAL_STATUS_FILE, "evaluator"): ("running", "done", "failed", "stopped"),
    (PUSH_STATUS_FILE, "launcher"): ("queued",),
    (PUSH_STATUS_FILE, "pusher"): ("running", "done", "failed", "stopped"),
}


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
    """The one way a state file (status.json, eval_status.json) is written: merged with what is there
    (or `fresh`: replacing it), atomically, by a writer that owns `state` (STATE_WRITERS).

    A launch ("queued") never overwrites a process that says it is running and is still alive."""
    allowed = STATE_WRITERS.get((name, writer))
    if allowed is None or state not in allowed:
        raise ValueError(f"The {writer} does not write state {state!r} to {name}; see the table in docs/run-files.md.")
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
    return write_state(run_dir, STATUS_FILE, writer, state, **fields)


def launcher(run_dir: str | Path) -> dict | None:
    return _read_json(Path(run_dir) / LAUNCHER_FILE)


def launcher_alive(run_dir: str | Path) -> bool:
    """Whether the process the app launched for this run (trainer or torchrun) still exists."""
    return launcher_record_alive(run_dir, LAUNCHER_FILE)


def read_status(run_dir: str | Path) -> dict:
    """status.json, corrected for a trainer that died without saying so (SIGKILL, OOM killer)."""
    run_dir = Path(run_dir)
    status = _read_json(run_dir / STATUS_FILE)
    if status is None:
        if (run_dir / STATUS_FILE).exists():
            return {"state": DAMAGED, "error": file_problem(run_dir / STATUS_FILE)}
        # A folder with a config that no trainer ever started (a template, a copied run): not active.
        exists = (run_dir / "config.json").exists()
        return {"state": "new"} if exists else {"state": "failed", "error": "This run folder has no config.json."}
    if not _writer_alive(status, launcher(run_dir)):
        status = dict(status)
        status["state"] = "failed"
        status["error"] = status.get("error") or (
            "The trainer process exited without reporting (killed, or out of memory). "
            "See the log tail; resume continues from the last complete checkpoint."
        )
        status["crashed"] = True
    return status


# ---- evaluation jobs ---------------------------------------------------------------------------


def write_eval_status(run_dir: str | Path, state: str, writer: str = "evaluator", **fields: Any) -> dict:
    """Update eval_status.json (owners: docs/run-files.md). The launcher's "queued" starts a fresh file."""
    return write_state(run_dir, EVAL_STATUS_FILE, writer, state, fresh=state == "queued", **fields)


def read_eval_status(run_dir: str | Path) -> dict | None:
    """eval_status.json (None when the run was never evaluated), corrected for an evaluator that died
    without saying so."""
    return read_state(run_dir, EVAL_STATUS_FILE, EVAL_LAUNCHER_FILE,
                      "The evaluation process exited without reporting (killed, or out of memory). See eval.log; "
                      "press Evaluate to run it again.")


def eval_active(run_dir: str | Path) -> bool:
    return (read_eval_status(run_dir) or {}).get("state") in ACTIVE_STATES


def read_push_status(run_dir: str | Path) -> dict | None:
    """push_status.json (None when the run was never pushed), corrected for a pusher that died without saying so."""
    return read_state(run_dir, PUSH_STATUS_FILE, PUSH_LAUNCHER_FILE,
                      "The push exited without reporting (killed, or out of memory). See push.log in the run folder.")


def push_active(run_dir: str | Path) -> bool:
    return (read_push_status(run_dir) or {}).get("state") in ACTIVE_STATES


def eval_launcher_alive(run_dir: str | Path) -> bool:
    return launcher_record_alive(run_dir, EVAL_LAUNCHER_FILE)
