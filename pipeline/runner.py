"""Start and stop the app's long jobs as processes of their own: trainings (one at a time per machine)
and evaluations (one per run at a time).

The launched process (the trainer, or torchrun and its ranks) runs in a new session, so it outlives
an app restart. Stop signals that launcher: torchrun passes the signal to every rank (each rank runs
in its own session, so signalling rank 0's group would reach rank 0 alone), the ranks agree on the
step to stop at, and torchrun waits SHUTDOWN_GRACE_S for the save and merge. Everything is read back
from the run directory; nothing is kept in module state. No torch or gradio import.

Evaluations and trainings on one machine: an evaluation is refused while a training runs (on a 2-core
CPU the two would share the cores, slowing the training and skewing its step times and ETA; on a GPU
they would compete for its memory). A training's Start is never refused because of an evaluation of
another run (an evaluation takes a minute or two, and the training is the job the user waits for), but
Resume of the run being evaluated waits for it: the resumed training would replace the merged model
the evaluation is reading.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipeline import runs
from pipeline.processes import end_tree
from pipeline.config import RunConfig

ROOT = Path(__file__).resolve().parent.parent
# How long torchrun waits, after passing a Stop to the ranks, before it kills them: the current step,
# a checkpoint, the adapter and the merged model must fit (torchrun's own default is 30 s).
SHUTDOWN_GRACE_S = 900


class RunnerError(RuntimeError):
    """A run can't be started or stopped; the message says why."""


def train_command(run_dir: Path, nproc: int = 1, resume: bool = False, allow_custom_rewards: bool = False,
                  python: str | None = None) -> list[str]:
    """The argument list that trains `run_dir` (never a shell string)."""
    python = python or sys.executable
    if nproc > 1:
        # --standalone: a fresh rendezvous on a free local port for each launch, so a run that is still
        # shutting down (or anything else on 29500) never blocks the next one.
        cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
               "--shutdown_timeout", str(SHUTDOWN_GRACE_S), "-m", "pipeline.train"]
    else:
        cmd = [python, "-m", "pipeline.train"]
    cmd += ["--run-dir", str(run_dir)]
    if resume:
        cmd.append("--resume")
    if allow_custom_rewards:
        cmd.append("--allow-custom-rewards")
    return cmd


def command_preview(cmd: list[str], gpus: int = 0, environ: dict | None = None) -> str:
    """How the same run is repeated headless, for the UI's "show command" view. A one-process command on a
    box with several GPUs is pinned to one, as `launch_env` pins the app's own launch: TRL refuses a single
    process that sees several GPUs (it would be wrapped in DataParallel).

    >>> command_preview(["python", "-m", "pipeline.train"], gpus=2, environ={})
    'CUDA_VISIBLE_DEVICES=0 python -m pipeline.train'
    >>> command_preview(["python", "-m", "pipeline.train"], gpus=1, environ={})
    'python -m pipeline.train'
    """
    text = " ".join(shlex.quote(part) for part in cmd)
    if gpus > 1 and "torch.distributed.run" not in cmd:
        text = f"CUDA_VISIBLE_DEVICES={shlex.quote(launch_env(1, environ)['CUDA_VISIBLE_DEVICES'])} {text}"
    return text


def active_run() -> Path | None:
    """The run that is queued or training now, if any (read from disk, so it survives restarts)."""
    for run_dir in runs.iter_run_dirs():
        if runs.read_status(run_dir).get("state") in runs.ACTIVE_STATES:
            return run_dir
    return None


def busy_run() -> tuple[Path, str] | None:
    """What keeps a new run from starting: a run still training, or one whose processes are still
    exiting after they wrote their final status (torchrun and the other ranks outlive rank 0's write)."""
    active = active_run()
    if active is not None:
        return active, "is still training. Stop it or wait for it to finish"
    for run_dir in runs.iter_run_dirs():
        if runs.launcher_alive(run_dir):
            return run_dir, ("is still shutting down (its processes are exiting). Try again in a few seconds, or "
                             "press Stop on it to end them now")
    return None


def launch_env(nproc: int, environ: dict | None = None) -> dict:
    """The launched process's environment. One process is pinned to one GPU: with several visible,
    transformers would wrap the model in DataParallel, which GRPOTrainer refuses.

    >>> launch_env(1, {"CUDA_VISIBLE_DEVICES": "2,3"})["CUDA_VISIBLE_DEVICES"]
    '2'
    >>> launch_env(1, {})["CUDA_VISIBLE_DEVICES"], "CUDA_VISIBLE_DEVICES" in launch_env(2, {})
    ('0', False)
    """
    env = dict(os.environ if environ is None else environ)
    if nproc <= 1:
        visible = env.get("CUDA_VISIBLE_DEVICES")
        env["CUDA_VISIBLE_DEVICES"] = visible.split(",")[0].strip() if visible else "0"
    return env


def _launch(run_dir: Path, cmd: list[str], nproc: int = 1) -> subprocess.Popen:
    # nproc is kept so that Resume relaunches the run the same way.
    runs.write_json_atomic(run_dir / "command.json", {"argv": cmd, "shell": command_preview(cmd), "nproc": nproc})
    # "queued" is written before the process exists, so it can never overwrite the trainer's "running".
    runs.write_status(run_dir, "queued", writer="launcher", queued_at=time.time(), pid=None, error=None,
                      ended_at=None)
    try:
        with open(run_dir / "stdout.log", "ab") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=launch_env(nproc))
    except OSError as exc:
        # Nothing was started: a "queued" left here would read as a launch in progress and refuse every
        # Start until QUEUED_GRACE_S has passed. The launcher still owns the status, so it says why.
        message = f"Could not start the trainer: {exc}"
        runs.write_status(run_dir, "failed", writer="launcher", error=message)
        raise RunnerError(message) from exc
    runs.write_json_atomic(run_dir / runs.LAUNCHER_FILE,
                           {"pid": proc.pid, "create_time": runs.process_create_time(proc.pid)})
    # Reap the child when it exits so it never lingers as a zombie; the status file says how it ended.
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


@contextlib.contextmanager
def start_lock():
    """One Start (or Resume) at a time on this machine, across threads, sessions and processes (two
    browser tabs, the app and a script): the busy check and the launch that makes a run busy happen
    under an exclusive lock on runs/.start.lock, so two Starts at the same moment can't both pass."""
    with open(runs.runs_dir() / ".start.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def start_run(cfg: RunConfig, label: str = "run", nproc: int = 1, allow_custom_rewards: bool = False) -> Path:
    """Validate, create the run directory, and launch the trainer. Returns at once."""
    cfg.validate(allow_custom_rewards=allow_custom_rewards)
    with start_lock():
        _refuse_if_busy()
        run_dir = runs.new_run_dir(label)
        try:
            runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
            _launch(run_dir, train_command(run_dir, nproc=nproc, allow_custom_rewards=allow_custom_rewards), nproc)
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)  # no half-created run is left behind
            raise
    return run_dir


def _refuse_if_busy() -> None:
    busy = busy_run()
    if busy is not None:
        raise RunnerError(f"Run '{busy[0].name}' {busy[1]}: one training runs at a time on this machine.")


def launched_nproc(run_dir: Path) -> int:
    """How many processes the run was last launched with (1 for runs from before this was kept)."""
    try:
        return max(1, int(runs.read_json(Path(run_dir) / "command.json").get("nproc") or 1))
    except (AttributeError, TypeError, ValueError):
        return 1


def resume_run(run_dir: Path, nproc: int | None = None, allow_custom_rewards: bool = False) -> Path:
    """Continue from the last complete checkpoint, with as many processes as the run had unless told."""
    run_dir = Path(run_dir)
    with start_lock():
        _refuse_if_busy()
        if runs.read_status(run_dir).get("state") == "finished":
            raise RunnerError(f"Run '{run_dir.name}' already finished all its steps.")
        if runs.eval_active(run_dir):
            raise RunnerError(f"Run '{run_dir.name}' is being evaluated, and resuming would replace the model the "
                              "evaluation reads. Wait for the evaluation to finish (a minute or two), or stop it.")
        nproc = nproc or launched_nproc(run_dir)
        _launch(run_dir, train_command(run_dir, nproc=nproc, resume=True,
                                       allow_custom_rewards=allow_custom_rewards), nproc)
    return run_dir


def stop_run(run_dir: Path, grace_s: float = 0.0) -> bool:
    """Ask the run to stop: SIGTERM to the launcher's process group (the trainer itself, or torchrun,
    which passes it to every rank). The ranks stop on the same step, save, and rank 0 marks the run
    stopped. Returns False when there was nothing to stop."""
    status = runs.read_status(run_dir)
    if status.get("state") not in runs.ACTIVE_STATES:
        if runs.launcher_alive(run_dir):
            # The run has ended (a rank failed) but processes linger, e.g. rank 0 waiting for the failed rank
            # in a collective, which no signal interrupts: end them now.
            end_tree(int((runs.launcher(run_dir) or {})["pid"]))
            return True
        return False
    info = runs.launcher(run_dir) or {}
    pid = info.get("pid") if runs.launcher_alive(run_dir) else status.get("pid")
    return _terminate(pid, grace_s, lambda: runs.read_status(run_dir).get("state") in runs.ACTIVE_STATES
                      or runs.launcher_alive(run_dir))


def _terminate(pid, grace_s: float, still_going) -> bool:
    """SIGTERM a launched job's process group; with `grace_s`, wait until `still_going()` is False (the
    job says it stopped and its processes have exited: they write the status, then exit)."""
    try:
        os.killpg(os.getpgid(int(pid)), signal.SIGTERM)
    except (ProcessLookupError, PermissionError, TypeError, ValueError):
        return False
    deadline = time.time() + grace_s
    while grace_s and time.time() < deadline and still_going():
        time.sleep(0.2)
    return True


# ---- evaluations ----------------------------------------------------------------------------------

EVAL_LIMIT = 16  # held-out prompts the app evaluates: enough to compare base and tuned in a minute or two on CPU


def eval_command(run_dir: Path, limit: int = EVAL_LIMIT, python: str | None = None) -> list[str]:
    """The argument list that evaluates `run_dir`, base vs tuned (never a shell string)."""
    return [python or sys.executable, "-m", "pipeline.evaluate", "--run-dir", str(run_dir), "--limit", str(int(limit))]


def active_evals() -> list[Path]:
    """Runs with an evaluation queued or running now (read from disk, so it survives restarts)."""
    return [run_dir for run_dir in runs.iter_run_dirs() if runs.eval_active(run_dir)]


def start_eval(run_dir: Path, limit: int = EVAL_LIMIT) -> Path:
    """Launch `python -m pipeline.evaluate` for a run as its own process and return at once. It writes
    eval_status.json (progress), eval.json (the result) and eval.log into the run directory."""
    run_dir = Path(run_dir)
    with start_lock():
        busy = busy_run()
        if busy is not None:
            raise RunnerError(f"Run '{busy[0].name}' {busy[1]}: an evaluation now would share this machine with "
                              "the training and slow both. Evaluate when it has finished.")
        if runs.eval_active(run_dir) or runs.eval_launcher_alive(run_dir):
            raise RunnerError(f"Run '{run_dir.name}' is already being evaluated: its progress shows below. "
                              "Stop it to start again.")
        if not (run_dir / "merged" / "config.json").exists():
            state = runs.read_status(run_dir).get("state")
            raise RunnerError(f"Run '{run_dir.name}' has no merged model to evaluate (it is {state}). Evaluate a "
                              "finished or stopped run that was started with merge_at_end on.")
        _launch_eval(run_dir, eval_command(run_dir, limit))
    return run_dir


def _launch_eval(run_dir: Path, cmd: list[str]) -> subprocess.Popen:
    # "queued" (a fresh status file) is written before the process exists, so it can't overwrite "running".
    runs.write_eval_status(run_dir, "queued", writer="launcher", queued_at=time.time(), command=cmd)
    try:
        with open(run_dir / "eval.log", "wb") as log:  # each evaluation starts a fresh log
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=launch_env(1))
    except OSError as exc:
        (run_dir / runs.EVAL_STATUS_FILE).unlink(missing_ok=True)  # nothing was started
        raise RunnerError(f"Could not start the evaluation: {exc}") from exc
    runs.write_json_atomic(run_dir / runs.EVAL_LAUNCHER_FILE,
                           {"pid": proc.pid, "create_time": runs.process_create_time(proc.pid)})
    threading.Thread(target=proc.wait, daemon=True).start()  # reaped when it exits: no zombie
    return proc


def stop_eval(run_dir: Path, grace_s: float = 0.0) -> bool:
    """Ask a run's evaluation to stop (SIGTERM to its process group); it marks itself stopped. Returns
    False when there was nothing to stop."""
    run_dir = Path(run_dir)
    status = runs.read_eval_status(run_dir) or {}
    if status.get("state") not in runs.ACTIVE_STATES:
        return False
    info = runs.read_json(run_dir / runs.EVAL_LAUNCHER_FILE) or {}
    pid = info.get("pid") if runs.eval_launcher_alive(run_dir) else status.get("pid")
    return _terminate(pid, grace_s, lambda: runs.eval_active(run_dir) or runs.eval_launcher_alive(run_dir))
