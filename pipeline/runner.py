"""Start and stop the app's long jobs as processes of their own, through one shared path: each kind of job
(training, evaluation, ...) is a `Job`, a short declaration of its command, status file, log and state
owners, and `start(kind, ...)` / `stop(kind, ...)` launch and stop any of them. Trainings run one at a time
per machine, evaluations one per run at a time. A new kind of long job is its entry module plus one
`register(Job(...))` here (see tests/unit/test_job_kinds.py).

The launched process (the trainer, or torchrun and its ranks) runs in a new session, so it outlives
an app restart. Stop signals that launcher: torchrun passes the signal to every rank (each rank runs
in its own session, so signalling rank 0's group would reach rank 0 alone), the ranks agree on the
step to stop at, and torchrun waits SHUTDOWN_GRACE_S for the save and merge. Everything is read back
from the run directory; no job is kept in module state (JOBS holds only the kinds' declarations). No torch or gradio import.

Evaluations and trainings on one machine: an evaluation is refused while a training runs (on a 2-core
CPU the two would share the cores, slowing the training and skewing its step times and ETA; on a GPU
they would compete for its memory). A training's Start is never refused because of an evaluation of
another run (an evaluation takes a minute or two, and the training is the job the user waits for), but
Resume of the run being evaluated waits for it: the resumed training would replace the merged model
the evaluation is reading.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pipeline import jobstate, owners, runs
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


# One Start, Resume or Delete at a time on this machine (runs/.start.lock; see runs.start_lock).
start_lock = runs.start_lock


# ---- one Job for every long task ------------------------------------------------------------------


def _no_refusal(run_dir: Path | None, **options: Any) -> None:
    return None


@dataclass(frozen=True)
class Job:
    """One kind of long job, declared once: what it runs, the files it is followed by, and who owns which state.

    The shared code does the rest for every kind: the start lock, one job of a kind per run, the "queued"
    written before the process exists, the launcher record (pid + start time), the log, a launch that
    fails, reading the state back (a writer that died reads as failed) and Stop."""

    kind: str  # the name start() and stop() take: "train", "eval", ...
    what: str  # how messages name it: "the trainer", "the evaluation"
    command: Callable[..., list[str]]  # (run_dir, nproc=..., **options) -> the argument list (never a shell string)
    status_file: str  # its state file in the run folder (docs/run-files.md)
    launcher_file: str  # pid + create time of the process the app launched
    log_file: str  # stdout and stderr of the process
    worker: str  # the writer of the job's own states ("trainer", "evaluator")
    worker_states: tuple[str, ...]
    # The launcher writes "queued"; with "failed" too, a launch that fails says why in the state file, and
    # without it the state file is removed (nothing was started).
    launcher_states: tuple[str, ...] = ("queued",)
    fresh_status: bool = True  # each launch starts a fresh state file (False: merged with what is there)
    fresh_log: bool = True  # each launch starts a fresh log (False: appended to, as a run's history is)
    busy: str = "is already running this job"  # "Run 'x' <busy>": a second launch of the kind for one run
    read_status: Callable[[Path], dict | None] | None = None  # default: jobstate.read_state
    validate: Callable[..., None] = _no_refusal  # (run_dir, **options), before the lock: a bad request never waits
    refuse: Callable[..., None] = _no_refusal  # (run_dir, **options), under the start lock: raise RunnerError
    create: Callable[..., Path] | None = None  # (**options) -> a new run folder, for a start without one
    processes: Callable[..., int] = lambda run_dir, **options: 1  # how many processes (GPUs) the launch uses
    before_launch: Callable[..., None] | None = None  # (run_dir, cmd, nproc): files the launch leaves first
    end_lingering: bool = False  # Stop on an ended job whose processes linger ends them (torchrun's ranks)
    env: Callable[..., dict] = lambda run_dir, **options: {}  # extra environment (a secret never goes in argv)
    # What an owner alone may do, in the words of a refusal ("only alice or an operator may <start>"):
    # launching this job on a run, and stopping it (owners.py).
    actions: tuple[str, str] = ("start this job on it", "stop its job")
    # Whether the job will run the user's own code (custom rewards): it then starts with the environment custom
    # code may see (rewards/custom.py: no tokens or credentials), not the app's.
    runs_user_code: Callable[[Path], bool] = lambda run_dir: False


JOBS: dict[str, Job] = {}


def register(job: Job) -> Job:
    """Make a kind known to start() and stop(), and its owners to jobstate.write_state. An owner row that is
    already declared (docs/run-files.md) must match: a kind can't widen what another writer may write."""
    for writer, states in (("launcher", job.launcher_states), (job.worker, job.worker_states)):
        declared = jobstate.STATE_WRITERS.setdefault((job.status_file, writer), tuple(states))
        if tuple(declared) != tuple(states):
            raise ValueError(f"{job.status_file}: the {writer} writes {declared}, not {tuple(states)} "
                             "(the owners table in docs/run-files.md)")
    JOBS[job.kind] = job
    return job


def job(kind: str) -> Job:
    if kind not in JOBS:
        raise ValueError(f"Unknown kind of job {kind!r}; known: {', '.join(sorted(JOBS))}.")
    return JOBS[kind]


def status(kind: str, run_dir: Path) -> dict | None:
    """A job's state file read back (None when it never ran); a writer that died without saying so reads as failed."""
    spec = job(kind)
    if spec.read_status is not None:
        return spec.read_status(Path(run_dir))
    return jobstate.read_state(run_dir, spec.status_file, spec.launcher_file,
                               f"{spec.what.capitalize()} exited without reporting (killed, or out of memory). "
                               f"See {spec.log_file} in the run folder.")


def is_active(kind: str, run_dir: Path) -> bool:
    return (status(kind, run_dir) or {}).get("state") in runs.ACTIVE_STATES


def launcher_alive(kind: str, run_dir: Path) -> bool:
    return jobstate.launcher_record_alive(run_dir, job(kind).launcher_file)


def active(kind: str) -> list[Path]:
    """Runs with a job of this kind queued or running now (read from disk, so it survives restarts)."""
    return [run_dir for run_dir in runs.iter_run_dirs() if is_active(kind, run_dir)]


def start(kind: str, run_dir: Path | None = None, actor: owners.Actor | None = None, **options: Any) -> Path:
    """Launch a job of `kind` for `run_dir` (or, for a kind that makes one, a new run folder owned by `actor`)
    and return at once with the run folder. Raises RunnerError, saying why, when it can't start: among the
    reasons, a run that is another user's (`actor`: who asks; None is a script or the CLI, never refused)."""
    spec = job(kind)
    run_dir = Path(run_dir) if run_dir is not None else None
    _refuse_if_not_owner(run_dir, actor, spec.actions[0])
    spec.validate(run_dir, **options)
    # The checks and the launch that makes a job busy happen under one lock, so two Starts can't both pass.
    with start_lock():
        spec.refuse(run_dir, **options)
        if run_dir is not None and (is_active(kind, run_dir) or launcher_alive(kind, run_dir)):
            raise RunnerError(f"Run '{run_dir.name}' {spec.busy}")
        created = run_dir is None
        if created:
            if spec.create is None:
                raise RunnerError(f"A {kind} job needs a run folder.")
            run_dir = spec.create(owner=actor.user if actor else None, **options)
        try:
            nproc = spec.processes(run_dir, **options)
            cmd = spec.command(run_dir, **{**options, "nproc": nproc})
            # Training's launch is _launch's default kind (and what tests stand in for with a plain function).
            extra = {} if kind == "train" else {"kind": kind, "env": spec.env(run_dir, **options)}
            _launch(run_dir, cmd, nproc, **extra)
        except BaseException:
            if created:
                shutil.rmtree(run_dir, ignore_errors=True)  # no half-created run is left behind
            raise
    return run_dir


def _launch(run_dir: Path, cmd: list[str], nproc: int = 1, kind: str = "train",
            env: dict | None = None) -> subprocess.Popen:
    spec = job(kind)
    if spec.before_launch is not None:
        spec.before_launch(run_dir, cmd, nproc)
    # The last launch's record goes first: beside the new "queued" it would name a process that has ended,
    # and readers would take the relaunch for a crash. A reader sees the old state with or without it (the
    # old state is not active: start() refused otherwise), or "queued" with no record yet (a launch in
    # progress), or "queued" with the new record.
    (run_dir / spec.launcher_file).unlink(missing_ok=True)
    # "queued" is written before the process exists, so it can never overwrite the worker's "running".
    jobstate.write_state(run_dir, spec.status_file, "launcher", "queued", fresh=spec.fresh_status,
                         queued_at=time.time(), pid=None, error=None, ended_at=None, command=cmd)
    try:
        with open(run_dir / spec.log_file, "wb" if spec.fresh_log else "ab") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env={**launch_env(nproc, _base_env(spec, run_dir)),
                                                                 **(env or {})})
    except OSError as exc:
        # Nothing was started: a "queued" left here would read as a launch in progress and refuse every
        # Start until QUEUED_GRACE_S has passed. The launcher says why where it owns "failed", else forgets it.
        message = f"Could not start {spec.what}: {exc}"
        if "failed" in spec.launcher_states:
            jobstate.write_state(run_dir, spec.status_file, "launcher", "failed", error=message)
        else:
            (run_dir / spec.status_file).unlink(missing_ok=True)
        raise RunnerError(message) from exc
    runs.write_json_atomic(run_dir / spec.launcher_file,
                           {"pid": proc.pid, **runs.process_start(proc.pid)})
    # Reap the child when it exits so it never lingers as a zombie; the status file says how it ended.
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


def _base_env(spec: Job, run_dir: Path) -> dict:
    """The environment a job starts from: the app's, or for a job that runs the user's own code, only what
    custom code may see."""
    from pipeline.rewards.custom import custom_code_env

    return custom_code_env() if spec.runs_user_code(run_dir) else dict(os.environ)


def stop(kind: str, run_dir: Path, grace_s: float = 0.0, actor: owners.Actor | None = None) -> bool:
    """Ask a job to stop: SIGTERM to its launcher's process group (for a training, torchrun passes it to every
    rank); the job marks itself stopped. With `grace_s`, wait that long for it to say so and exit. Returns
    False when there was nothing to stop; RunnerError when the run is another user's (see start)."""
    spec, run_dir = job(kind), Path(run_dir)
    _refuse_if_not_owner(run_dir, actor, spec.actions[1])
    state = status(kind, run_dir) or {}
    info = runs.read_json(run_dir / spec.launcher_file) or {}
    if state.get("state") not in runs.ACTIVE_STATES:
        if spec.end_lingering and launcher_alive(kind, run_dir):
            # The job has ended (a rank failed) but processes linger, e.g. rank 0 waiting for the failed rank
            # in a collective, which no signal interrupts: end them now.
            end_tree(int(info["pid"]))
            return True
        return False
    pid = info.get("pid") if launcher_alive(kind, run_dir) else state.get("pid")
    return _terminate(pid, grace_s, lambda: is_active(kind, run_dir) or launcher_alive(kind, run_dir))


def _refuse_if_not_owner(run_dir: Path | None, actor: owners.Actor | None, action: str) -> None:
    refusal = owners.refusal(run_dir, actor, action) if run_dir is not None else None
    if refusal:
        raise RunnerError(refusal)


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


# ---- trainings ----------------------------------------------------------------------------------------


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


def _validate_training(run_dir, cfg: RunConfig | None = None, allow_custom_rewards: bool = False, **_) -> None:
    if cfg is not None:
        cfg.validate(allow_custom_rewards=allow_custom_rewards)


def _refuse_training(run_dir, resume: bool = False, **_) -> None:
    _refuse_if_busy()
    if resume:
        if runs.read_status(run_dir).get("state") == "finished":
            raise RunnerError(f"Run '{run_dir.name}' already finished all its steps.")
        if runs.eval_active(run_dir):
            raise RunnerError(f"Run '{run_dir.name}' is being evaluated, and resuming would replace the model the "
                              "evaluation reads. Wait for the evaluation to finish (a minute or two), or stop it.")
        if is_active("push", run_dir):
            raise RunnerError(f"Run '{run_dir.name}' is being pushed to the Hub, and resuming would replace the model "
                              "the push uploads. Wait for the push to finish, or stop it.")


def _new_training(cfg: RunConfig, label: str = "run", owner: str | None = None, **_) -> Path:
    """A new run folder holding the run's owner.json and config.json, each written once, here
    (docs/run-files.md). The owner goes first: a folder is listed once it has a config.json, and it is never
    seen without its owner (which would read as nobody's)."""
    run_dir = runs.new_run_dir(label)
    try:
        owners.record_owner(run_dir, owner)
        runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def has_custom_rewards(run_dir: Path) -> bool:
    """Whether the run's config has a reward written as Python (True, to be safe, when it can't be read)."""
    from pipeline.reward_check import needs_isolation

    try:
        return needs_isolation(RunConfig.load(Path(run_dir) / "config.json").rewards)
    except Exception:  # noqa: BLE001 - damaged or missing: the trainer says why; it starts without secrets
        return True


def _record_command(run_dir: Path, cmd: list[str], nproc: int) -> None:
    # nproc is kept so that Resume relaunches the run the same way.
    runs.write_json_atomic(run_dir / "command.json", {"argv": cmd, "shell": command_preview(cmd), "nproc": nproc})


TRAINING = register(Job(
    kind="train", what="the trainer", status_file=runs.STATUS_FILE, launcher_file=runs.LAUNCHER_FILE,
    log_file="stdout.log", fresh_log=False, fresh_status=False, end_lingering=True,
    worker="trainer", worker_states=("running", "finished", "stopped", "failed"),
    launcher_states=("queued", "failed"),  # "failed": the trainer could not be started
    busy="is still training. Stop it or wait for it to finish", actions=("resume it", "stop it"),
    command=lambda run_dir, nproc=1, resume=False, allow_custom_rewards=False, **_: train_command(
        run_dir, nproc=nproc, resume=resume, allow_custom_rewards=allow_custom_rewards),
    read_status=lambda run_dir: runs.read_status(run_dir),
    validate=_validate_training, refuse=_refuse_training, create=_new_training, runs_user_code=has_custom_rewards,
    processes=lambda run_dir, nproc=None, resume=False, **_: nproc or (launched_nproc(run_dir) if resume else 1),
    before_launch=_record_command,
))


def start_run(cfg: RunConfig, label: str = "run", nproc: int = 1, allow_custom_rewards: bool = False,
              actor: owners.Actor | None = None) -> Path:
    """Validate, create the run directory (owned by `actor`'s login, when there is one), and launch the
    trainer. Returns at once."""
    return start("train", cfg=cfg, label=label, nproc=nproc, allow_custom_rewards=allow_custom_rewards, actor=actor)


def resume_run(run_dir: Path, nproc: int | None = None, allow_custom_rewards: bool = False,
               actor: owners.Actor | None = None) -> Path:
    """Continue from the last complete checkpoint, with as many processes as the run had unless told."""
    return start("train", Path(run_dir), resume=True, nproc=nproc, allow_custom_rewards=allow_custom_rewards,
                 actor=actor)


def stop_run(run_dir: Path, grace_s: float = 0.0, actor: owners.Actor | None = None) -> bool:
    """Ask the run to stop: SIGTERM to the launcher's process group (the trainer itself, or torchrun,
    which passes it to every rank). The ranks stop on the same step, save, and rank 0 marks the run
    stopped. A run that has ended while its processes linger has them ended. Returns False when there
    was nothing to stop."""
    return stop("train", run_dir, grace_s, actor)


# ---- evaluations ----------------------------------------------------------------------------------

EVAL_LIMIT = 16  # held-out prompts the app evaluates: enough to compare base and tuned in a minute or two on CPU


def eval_command(run_dir: Path, limit: int = EVAL_LIMIT, python: str | None = None) -> list[str]:
    """The argument list that evaluates `run_dir`, base vs tuned (never a shell string)."""
    return [python or sys.executable, "-m", "pipeline.evaluate", "--run-dir", str(run_dir), "--limit", str(int(limit))]


def active_evals() -> list[Path]:
    """Runs with an evaluation queued or running now (read from disk, so it survives restarts)."""
    return active("eval")


def _refuse_eval(run_dir: Path, **_) -> None:
    busy = busy_run()
    if busy is not None:
        raise RunnerError(f"Run '{busy[0].name}' {busy[1]}: an evaluation now would share this machine with "
                          "the training and slow both. Evaluate when it has finished.")
    if not (run_dir / "merged" / "config.json").exists():
        state = runs.read_status(run_dir).get("state")
        raise RunnerError(f"Run '{run_dir.name}' has no merged model to evaluate (it is {state}). Evaluate a "
                          "finished or stopped run that was started with merge_at_end on.")


EVALUATION = register(Job(
    kind="eval", what="the evaluation", status_file=runs.EVAL_STATUS_FILE, launcher_file=runs.EVAL_LAUNCHER_FILE,
    log_file="eval.log", worker="evaluator", worker_states=("running", "done", "failed", "stopped"),
    busy="is already being evaluated: its progress shows below. Stop it to start again.",
    actions=("evaluate it", "stop its evaluation"),
    command=lambda run_dir, limit=EVAL_LIMIT, **_: eval_command(run_dir, limit),
    read_status=lambda run_dir: runs.read_eval_status(run_dir), refuse=_refuse_eval,
))


def start_eval(run_dir: Path, limit: int = EVAL_LIMIT, actor: owners.Actor | None = None) -> Path:
    """Launch `python -m pipeline.evaluate` for a run as its own process and return at once. It writes
    eval_status.json (progress), eval.json (the result) and eval.log into the run directory."""
    return start("eval", Path(run_dir), actor=actor, limit=limit)


def stop_eval(run_dir: Path, grace_s: float = 0.0) -> bool:
    """Ask a run's evaluation to stop (SIGTERM to its process group); it marks itself stopped. Returns
    False when there was nothing to stop."""
    return stop("eval", run_dir, grace_s)


# ---- pushes to the Hugging Face Hub -------------------------------------------------------------------


def _refuse_push(run_dir: Path, repo_id: str = "", token: str = "", **_) -> None:
    from pipeline import export

    problem = export.push_problem(run_dir, repo_id, token)
    if problem:
        raise RunnerError(problem)
    if runs.read_status(run_dir).get("state") in runs.ACTIVE_STATES:
        raise RunnerError(f"Run '{run_dir.name}' is training: its merged model is written at the end. Push it then.")


def _push_command(run_dir: Path, repo_id: str = "", **_) -> list[str]:
    from pipeline import export

    return export.push_command(run_dir, repo_id)


PUSH = register(Job(
    kind="push", what="the push", status_file=runs.PUSH_STATUS_FILE, launcher_file=runs.PUSH_LAUNCHER_FILE,
    log_file="push.log", worker="pusher", worker_states=("running", "done", "failed", "stopped"),
    busy="is already being pushed: wait for it, or stop it.", actions=("push it to the Hub", "stop its push"),
    refuse=_refuse_push, command=_push_command,
    read_status=runs.read_push_status,
    env=lambda run_dir, token="", **_: {"HF_TOKEN": token.strip()},
))


def start_push(run_dir: Path, repo_id: str, token: str, actor: owners.Actor | None = None) -> Path:
    """Push the run's merged model to the Hub as a job of its own (python -m pipeline.export); returns at once.
    It writes push_status.json (running, then done with the url, failed with the reason, or stopped)."""
    return start("push", Path(run_dir), actor=actor, repo_id=repo_id, token=token)
