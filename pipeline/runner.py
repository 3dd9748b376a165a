"""Start and stop the app's long jobs as processes of their own, through one shared path: each kind of job
(training, evaluation, push) is declared once in pipeline/run_folder/jobs.py, and `start(kind, ...)` / `stop(kind, ...)`
launch and stop any of them, with the rules the declarations ask for. Trainings run one at a time per
machine, any job one per run at a time.

The launched process (the trainer, or torchrun and its ranks) runs in a new session, so it outlives
an app restart. Stop signals that launcher: torchrun passes the signal to every rank (each rank runs
in its own session, so signalling rank 0's group would reach rank 0 alone), the ranks agree on the
step to stop at, and torchrun waits SHUTDOWN_GRACE_S for the save and merge. Everything is read back
from the run directory; no job is kept in module state. No torch or gradio import. A one-process job goes to
the spare worker (pipeline/spare_worker.py) when one waits with its libraries imported and would run it the same.

Evaluations and trainings on one machine: an evaluation is refused while a training runs (on a 2-core
CPU the two would share the cores, slowing the training and skewing its step times and ETA; on a GPU
they would compete for its memory). A training's Start is never refused because of an evaluation of
another run (an evaluation takes a minute or two, and the training is the job the user waits for), but
Resume of the run being evaluated waits for it: the resumed training would replace the merged model
the evaluation is reading.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pipeline import spare_worker
from pipeline.run_folder import jobs, jobstate, owners, run_files, run_queue, runs, stages
from pipeline.run_folder.processes import end_tree
from pipeline.setup.config import RunConfig

ROOT = Path(__file__).resolve().parent.parent
# How long torchrun waits, after passing a Stop to the ranks, before it kills them: the current step,
# a checkpoint, the adapter and the merged model must fit (torchrun's own default is 30 s).
SHUTDOWN_GRACE_S = 900
# How often the app looks at the queue of waiting trainings while it has one: a queued run starts this long at most
# after the machine is free.
QUEUE_CHECK_S = 2.0


class RunnerError(RuntimeError):
    """A run can't be started or stopped; the message says why."""


def command(kind: str, run_dir: Path, nproc: int = 1, python: str | None = None, **options: Any) -> list[str]:
    """The argument list that runs a job of `kind` on `run_dir` (never a shell string): its worker module with
    its options (pipeline/run_folder/jobs.py), under torchrun when a kind that can spreads over `nproc` processes."""
    spec = jobs.job(kind)
    cmd = spec.argv(run_dir, python=python, **options)
    if nproc > 1 and spec.distributed:
        # --standalone: a fresh rendezvous on a free local port for each launch, so a run that is still
        # shutting down (or anything else on 29500) never blocks the next one.
        cmd[1:2] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
                    "--shutdown_timeout", str(SHUTDOWN_GRACE_S), "-m"]
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
        if jobstate.read_status(run_dir).get("state") in jobstate.ACTIVE_STATES:
            return run_dir
    return None


def busy_run() -> tuple[Path, str] | None:
    """What keeps a new run from starting: a run still training, or one whose processes are still
    exiting after they wrote their final status (torchrun and the other ranks outlive rank 0's write)."""
    active = active_run()
    if active is not None:
        return active, "is still training. Stop it or wait for it to finish"
    for run_dir in runs.iter_run_dirs():
        if jobstate.launcher_alive(run_dir):
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


# ---- any kind of job -------------------------------------------------------------------------------


def status(kind: str, run_dir: Path) -> dict | None:
    """A job's state file read back (None when it never ran); a writer that died without saying so reads as failed."""
    return jobstate.job_status(Path(run_dir), kind)


def is_active(kind: str, run_dir: Path) -> bool:
    return jobstate.job_active(Path(run_dir), kind)


def launcher_alive(kind: str, run_dir: Path) -> bool:
    return jobstate.launcher_record_alive(run_dir, jobs.job(kind).launcher_file)


def active(kind: str) -> list[Path]:
    """Runs with a job of this kind queued or running now (read from disk, so it survives restarts)."""
    return [run_dir for run_dir in runs.iter_run_dirs() if is_active(kind, run_dir)]


def start(kind: str, run_dir: Path | None = None, actor: owners.Actor | None = None, **options: Any) -> Path:
    """Launch a job of `kind` for `run_dir` (or, for a kind that makes one, a new run folder owned by `actor`,
    from `cfg` and `label`) and return at once with the run folder. Raises RunnerError, saying why, when it
    can't start: among the reasons, a run that is another user's (`actor`: who asks; None is a script or the
    CLI, never refused). `options` are the kind's own (pipeline/run_folder/jobs.py), plus `nproc` for a kind that
    spreads."""
    spec = jobs.job(kind)
    run_dir = Path(run_dir) if run_dir is not None else None
    _refuse_if_not_owner(run_dir, actor, spec.actions[0])
    _validate(spec, run_dir, **options)  # before the lock: a bad request never waits
    # The checks and the launch that makes a job busy happen under one lock, so two Starts can't both pass.
    with start_lock():
        return _start_locked(spec, run_dir, actor, **options)


def _start_locked(spec: jobs.Job, run_dir: Path | None, actor: owners.Actor | None, **options: Any) -> Path:
    """start()'s checks and launch; the caller holds the start lock."""
    _refuse(spec, run_dir, **options)
    if run_dir is not None and (is_active(spec.kind, run_dir) or launcher_alive(spec.kind, run_dir)):
        raise RunnerError(f"Run '{run_dir.name}' {spec.busy}")
    created = run_dir is None
    if created:
        if not spec.creates_run:
            raise RunnerError(f"A {spec.kind} job needs a run folder.")
        run_dir = _new_run(owner=actor.user if actor else None, **options)
    try:
        nproc = _processes(spec, run_dir, **options)
        cmd = command(spec.kind, run_dir, **{**options, "nproc": nproc})
        _launch(run_dir, cmd, nproc, kind=spec.kind, env=spec.env(**options))
    except BaseException:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)  # no half-created run is left behind
        raise
    return run_dir


def default_label(cfg: RunConfig) -> str:
    """What names a run when no run name is typed: its model and its prompts' source ("smollm2-tldr"); a next
    stage, the earlier run's name numbered ("smollm2-tldr-stage2")."""
    staged = stages.next_label(cfg.model)
    if staged:
        return staged
    return Path(cfg.model).name.replace("SmolLM2-135M-Instruct", "smollm2") + "-" + cfg.dataset.source


def training_request(cfg: RunConfig, run_name: str | None = None, nproc: int | None = 1) -> tuple[str, int]:
    """What Start, Add to queue and `python -m pipeline.queue add` settle before a run is named: its name (the one
    typed, or default_label's), how many processes this machine can give it, and whether a hub model or dataset it
    names can be fetched now (offline, it is said here rather than by a run that fails at once). ValueError says
    what is wrong."""
    from pipeline.models.loading import check_processes, gpu_count, hub_fetch_problem

    label = runs.run_label(run_name, default_label(cfg))
    processes = check_processes(nproc, gpu_count())
    unreachable = hub_fetch_problem(cfg.model, cfg.dataset.hub_id if cfg.dataset.source == "hub" else None)
    if unreachable:
        raise ValueError(unreachable)
    return label, processes


# ---- trainings waiting their turn ----------------------------------------------------------------------


def queue_training(cfg: RunConfig, label: str = "run", nproc: int = 1, allow_custom_rewards: bool = False,
                   actor: owners.Actor | None = None) -> tuple[run_queue.Waiting, Path | None]:
    """Put a training at the end of the line (pipeline/run_folder/run_queue.py), checked as Start checks it, then
    start the line's first entry if the machine is free. Returns the entry and the run that started, if one did
    (an older entry goes first)."""
    entries, started = queue_trainings([(label, cfg)], nproc, allow_custom_rewards, actor)
    return entries[0], started


def queue_trainings(runs_to_queue: list[tuple[str, RunConfig]], nproc: int = 1, allow_custom_rewards: bool = False,
                    actor: owners.Actor | None = None) -> tuple[list[run_queue.Waiting], Path | None]:
    """queue_training for several (label, config) pairs, in order, all or none (a sweep)."""
    spec = jobs.job("train")
    for label, cfg in runs_to_queue:
        _validate(spec, None, cfg=cfg, label=label, nproc=nproc, allow_custom_rewards=allow_custom_rewards,
                  waiting=True)
    entries = [run_queue.Waiting(label=label, config=cfg.to_dict(), owner=actor.user if actor else None,
                                 nproc=int(nproc or 1), allow_custom_rewards=bool(allow_custom_rewards))
               for label, cfg in runs_to_queue]
    with start_lock():
        try:
            run_queue.add(*entries)
        except run_queue.QueueError as exc:
            raise RunnerError(str(exc)) from None
    return entries, start_next(allow_custom_rewards)


def start_next(allow_custom_rewards: bool = False) -> Path | None:
    """Start the first entry of the line when no training holds the machine; returns its run, or None when
    nothing started. An entry that can't start (its settings no longer pass, custom rewards
    are no longer allowed: `allow_custom_rewards` is what the app allows now) stays in the line with the reason,
    and the next one is tried."""
    if not run_queue.has_waiting():
        return None
    spec = jobs.job("train")
    with start_lock():
        while (entry := (queue := run_queue.read()).ready()) is not None and busy_run() is None:
            allow = entry.allow_custom_rewards and allow_custom_rewards
            try:
                cfg = RunConfig.from_dict(entry.config)
                _validate(spec, None, cfg=cfg, allow_custom_rewards=allow)
                after = last_ended_run()
                run_dir = _start_locked(spec, None, owners.Actor(entry.owner), cfg=cfg, label=entry.label,
                                        nproc=entry.nproc, allow_custom_rewards=allow)
            except (RunnerError, ValueError, TypeError, OSError) as exc:  # ValueError covers ConfigError
                run_queue.failed(queue, entry, str(exc))
                continue
            run_queue.started(queue, entry, run_dir.name, after)
            return run_dir
    return None


def unqueue(entry_id: str, actor: owners.Actor | None = None) -> run_queue.Waiting:
    """Take an entry out of the line: its owner's to take, or an operator's (RunnerError says why not)."""
    with start_lock():
        try:
            return run_queue.remove(entry_id, actor)
        except run_queue.QueueError as exc:
            raise RunnerError(str(exc)) from None


def last_ended_run() -> str | None:
    """The training that ended last, by name: the one a run started from the line follows."""
    ended = []
    for run_dir in runs.iter_run_dirs():
        state = jobstate.read_status(run_dir)
        if state.get("state") not in jobstate.ACTIVE_STATES:  # a trainer that died unheard has no ended_at
            ended.append((float(state.get("ended_at") or state.get("updated_at") or 0), run_dir.name))
    return max(ended)[1] if ended else None


def watch_queue(allow_custom_rewards: bool = False, on_start=None, every_s: float = QUEUE_CHECK_S,
                stop: threading.Event | None = None) -> None:
    """The app's queue keeper (a daemon thread): every `every_s`, start the line's next run when the machine is
    free, then call `on_start(run_dir)`. Runs until `stop` is set. It keeps the line of the runs folder it started
    on, and only that one (a process that points its data folder elsewhere for a while, as tests do, pauses it)."""
    stop = stop or threading.Event()
    home = runs.runs_dir()
    while not stop.wait(every_s):
        if runs.runs_dir() != home:
            continue
        try:
            run_dir = start_next(allow_custom_rewards)
        except Exception as exc:  # noqa: BLE001 - a damaged run folder must not end the keeper
            print(f"The queue could not start its next run: {exc}", file=sys.stderr, flush=True)
            continue
        if run_dir is not None and on_start is not None:
            on_start(run_dir)


def _validate(spec: jobs.Job, run_dir: Path | None, cfg: RunConfig | None = None,
              allow_custom_rewards: bool = False, waiting: bool = False, **options: Any) -> None:
    """What can be refused from the request alone: the kind's options, and a new run's settings (a run `waiting`
    in the queue may start from the model of a run still training)."""
    problem = spec.problem(**options) or (stages.problem(cfg.model, waiting) if cfg is not None else None)
    if problem:
        raise RunnerError(problem)
    if cfg is not None:
        cfg.validate(allow_custom_rewards=allow_custom_rewards)


def _refuse(spec: jobs.Job, run_dir: Path | None, resume: bool = False, steps: int | None = None, **_: Any) -> None:
    """What the runs on disk refuse, read under the start lock: a training elsewhere on this machine, a run
    without the merged model the job reads, a resume of a finished run or of one whose model is being read."""
    if spec.needs_machine and (busy := busy_run()) is not None:
        raise RunnerError(f"Run '{busy[0].name}' {busy[1]}: {spec.needs_machine}")
    if run_dir is None:
        return
    status = jobstate.read_status(run_dir)
    state, done = status.get("state"), int(status.get("step") or 0)
    if spec.reads_model:
        if state in jobstate.ACTIVE_STATES:
            raise RunnerError(f"Run '{run_dir.name}' is training: its merged model is written at the end. "
                              f"Start {spec.what} then.")
        if run_files.merged_model(run_dir) is None:
            raise RunnerError(f"Run '{run_dir.name}' has no merged model for {spec.what} (it is {state}): pick a "
                              "finished run, or a stopped one, that was started with merge_at_end on.")
    if resume and steps is not None and int(steps) <= done:
        raise RunnerError(f"Run '{run_dir.name}' is at step {done}: to train it further, give a step count above "
                          f"{done}.")
    if resume and state == "finished" and steps is None:
        raise RunnerError(f"Run '{run_dir.name}' already finished all its {done} steps: to train it further, give "
                          f"a step count above {done} and resume.")
    if spec.writes_model:
        for reader in jobstate.busy_with(run_dir):
            if reader.reads_model:
                raise RunnerError(f"Run '{run_dir.name}' is {reader.doing}, and this would replace the model "
                                  f"{reader.what} reads. Wait for {reader.what} to finish, or stop it.")


def _new_run(cfg: RunConfig, label: str = "run", owner: str | None = None, **_: Any) -> Path:
    """A new run folder holding the run's owner.json and config.json, each written once, here
    (docs/run-files.md). The owner goes first: a folder is listed once it has a config.json, and it is never
    seen without its owner (which would read as nobody's)."""
    run_dir = runs.new_run_dir(label)
    try:
        owners.record_owner(run_dir, owner)
        # A model inside another run's folder (a next stage) becomes this run's own start_model/ first.
        cfg = dataclasses.replace(cfg, model=stages.take_model(cfg.model, run_dir))
        runs.write_json_atomic(run_dir / run_files.CONFIG, cfg.to_dict())
    except stages.StageError as exc:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise RunnerError(str(exc)) from None
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def _processes(spec: jobs.Job, run_dir: Path, nproc: int | None = None, resume: bool = False, **_: Any) -> int:
    """How many processes the launch uses: as asked, or as the run was last launched when it resumes."""
    if not spec.distributed:
        return 1
    return nproc or (launched_nproc(run_dir) if resume else 1)


def launched_nproc(run_dir: Path) -> int:
    """How many processes the run was last launched with (1 for runs from before this was kept)."""
    try:
        return max(1, int(runs.read_json(Path(run_dir) / run_files.COMMAND).get("nproc") or 1))
    except (AttributeError, TypeError, ValueError):
        return 1


def _launch(run_dir: Path, cmd: list[str], nproc: int = 1, kind: str = "train",
            env: dict | None = None) -> subprocess.Popen:
    spec = jobs.job(kind)
    if spec.distributed:
        # nproc is kept so that Resume relaunches the run the same way.
        runs.write_json_atomic(run_dir / run_files.COMMAND,
                               {"argv": cmd, "shell": command_preview(cmd), "nproc": nproc})
    # The last launch's record goes first: beside the new "queued" it would name a process that has ended,
    # and readers would take the relaunch for a crash. A reader sees the old state with or without it (the
    # old state is not active: start() refused otherwise), or "queued" with no record yet (a launch in
    # progress), or "queued" with the new record.
    (run_dir / spec.launcher_file).unlink(missing_ok=True)
    # "queued" is written before the process exists, so it can never overwrite the worker's "running".
    jobstate.write_state(run_dir, spec.status_file, "launcher", "queued", fresh=spec.fresh_status,
                         queued_at=time.time(), pid=None, error=None, ended_at=None, command=cmd)
    full_env = {**launch_env(nproc, _base_env(spec, run_dir)), **(env or {})}
    try:
        with open(run_dir / spec.log_file, "wb" if spec.fresh_log else "ab") as log:
            # A spare worker (its libraries imported) takes a one-process job that runs as it would; else a
            # fresh process.
            proc = spare_worker.take(cmd, full_env, run_dir / spec.log_file) if nproc == 1 else None
            if proc is None:
                proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True, env=full_env)
    except OSError as exc:
        # Nothing was started: a "queued" left here would read as a launch in progress and refuse every
        # Start until QUEUED_GRACE_S has passed. The launcher says why where it owns "failed", else forgets it.
        message = f"Could not start {spec.what}: {exc}"
        if "failed" in spec.launcher_states:
            jobstate.write_state(run_dir, spec.status_file, "launcher", "failed", error=message)
        else:
            (run_dir / spec.status_file).unlink(missing_ok=True)
        raise RunnerError(message) from exc
    runs.write_json_atomic(run_dir / spec.launcher_file, {"pid": proc.pid, **jobstate.process_start(proc.pid)})
    # Reap the child when it exits so it never lingers as a zombie; the status file says how it ended.
    threading.Thread(target=_reap, args=(proc,), daemon=True).start()
    return proc


def _reap(proc: subprocess.Popen) -> None:
    """Wait for a job's process, then get a spare worker ready for the next job while the machine is idle
    (started during a job, its imports would take CPU time from it)."""
    proc.wait()
    prepare_spare()


def prepare_spare() -> bool:
    """Start a spare worker for the next job, unless a job runs now. Returns whether one was started."""
    if not spare_worker.enabled() or any(jobstate.busy_with(run_dir) for run_dir in runs.iter_run_dirs()):
        return False
    return spare_worker.prepare(launch_env(1, dict(os.environ)))


def _base_env(spec: jobs.Job, run_dir: Path) -> dict:
    """The environment a job starts from: the app's, or for a job that runs the user's own code, only what
    custom code may see."""
    from pipeline.rewards.custom import custom_code_env

    return custom_code_env() if spec.user_code and has_custom_rewards(run_dir) else dict(os.environ)


def has_custom_rewards(run_dir: Path) -> bool:
    """Whether the run's config has a reward written as Python (True, to be safe, when it can't be read)."""
    from pipeline.setup.reward_check import needs_isolation

    try:
        return needs_isolation(RunConfig.load(Path(run_dir) / run_files.CONFIG).rewards)
    except Exception:  # noqa: BLE001 - damaged or missing: the trainer says why; it starts without secrets
        return True


def stop(kind: str, run_dir: Path, grace_s: float = 0.0, actor: owners.Actor | None = None) -> bool:
    """Ask a job to stop: SIGTERM to its launcher's process group (for a training, torchrun passes it to every
    rank; the ranks stop on the same step, save, and rank 0 marks the run stopped); the job marks itself
    stopped. With `grace_s`, wait that long for it to say so and exit. Returns False when there was nothing to
    stop; RunnerError when the run is another user's (see start)."""
    spec, run_dir = jobs.job(kind), Path(run_dir)
    _refuse_if_not_owner(run_dir, actor, spec.actions[1])
    state = status(kind, run_dir) or {}
    info = runs.read_json(run_dir / spec.launcher_file) or {}
    if state.get("state") not in jobstate.ACTIVE_STATES:
        if spec.distributed and launcher_alive(kind, run_dir):
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

