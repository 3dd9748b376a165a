"""Start and stop trainer processes: one training at a time per machine.

The trainer runs as its own process group (a new session), so it outlives an app restart and
a Stop reaches every rank under torchrun. Everything is read back from the run directory; nothing
is kept in module state. No torch or gradio import.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipeline import runs
from pipeline.config import RunConfig

ROOT = Path(__file__).resolve().parent.parent


class RunnerError(RuntimeError):
    """A run can't be started or stopped; the message says why."""


def train_command(run_dir: Path, nproc: int = 1, resume: bool = False, allow_custom_rewards: bool = False,
                  python: str | None = None) -> list[str]:
    """The argument list that trains `run_dir` (never a shell string)."""
    python = python or sys.executable
    if nproc > 1:
        cmd = [python, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "-m", "pipeline.train"]
    else:
        cmd = [python, "-m", "pipeline.train"]
    cmd += ["--run-dir", str(run_dir)]
    if resume:
        cmd.append("--resume")
    if allow_custom_rewards:
        cmd.append("--allow-custom-rewards")
    return cmd


def command_preview(cmd: list[str]) -> str:
    """How the same run is repeated headless, for the UI's "show command" view."""
    return " ".join(shlex.quote(part) for part in cmd)


def active_run() -> Path | None:
    """The run that is queued or training now, if any (read from disk, so it survives restarts)."""
    for run_dir in runs.iter_run_dirs():
        if runs.read_status(run_dir).get("state") in runs.ACTIVE_STATES:
            return run_dir
    return None


def _launch(run_dir: Path, cmd: list[str]) -> subprocess.Popen:
    runs.write_json_atomic(run_dir / "command.json", {"argv": cmd, "shell": command_preview(cmd)})
    # "queued" is written before the process exists, so it can never overwrite the trainer's "running".
    runs.write_status(run_dir, "queued", queued_at=time.time(), pid=None, error=None, ended_at=None)
    log = open(run_dir / "stdout.log", "ab")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=os.environ.copy())
    log.close()
    runs.write_json_atomic(run_dir / runs.LAUNCHER_FILE,
                           {"pid": proc.pid, "create_time": runs.process_create_time(proc.pid)})
    # Reap the child when it exits so it never lingers as a zombie; the status file says how it ended.
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


def start_run(cfg: RunConfig, label: str = "run", nproc: int = 1, allow_custom_rewards: bool = False) -> Path:
    """Validate, create the run directory, and launch the trainer. Returns at once."""
    cfg.validate(allow_custom_rewards=allow_custom_rewards)
    busy = active_run()
    if busy is not None:
        raise RunnerError(f"Run '{busy.name}' is still training. Stop it or wait for it to finish: "
                          "one training runs at a time on this machine.")
    run_dir = runs.new_run_dir(label)
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    _launch(run_dir, train_command(run_dir, nproc=nproc, allow_custom_rewards=allow_custom_rewards))
    return run_dir


def resume_run(run_dir: Path, nproc: int = 1, allow_custom_rewards: bool = False) -> Path:
    run_dir = Path(run_dir)
    busy = active_run()
    if busy is not None:
        raise RunnerError(f"Run '{busy.name}' is still training; resume this one when it is done.")
    if runs.read_status(run_dir).get("state") == "finished":
        raise RunnerError(f"Run '{run_dir.name}' already finished all its steps.")
    _launch(run_dir, train_command(run_dir, nproc=nproc, resume=True, allow_custom_rewards=allow_custom_rewards))
    return run_dir


def stop_run(run_dir: Path, grace_s: float = 0.0) -> bool:
    """Ask the trainer to stop (SIGTERM to its process group). It saves and marks itself stopped.
    Returns False when there was nothing to stop."""
    status = runs.read_status(run_dir)
    if status.get("state") not in runs.ACTIVE_STATES:
        return False
    pid = status.get("pid") or (runs.launcher(run_dir) or {}).get("pid")
    try:
        os.killpg(os.getpgid(int(pid)), signal.SIGTERM)
    except (ProcessLookupError, PermissionError, TypeError, ValueError):
        return False
    if grace_s:
        deadline = time.time() + grace_s
        while time.time() < deadline and runs.read_status(run_dir).get("state") in runs.ACTIVE_STATES:
            time.sleep(0.2)
    return True
