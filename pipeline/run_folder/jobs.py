"""The app's long jobs, declared once each: what runs (`python -m <module> --run-dir RUN` and its typed
options), the files it is followed by, and which process may write which state. Both sides import this:
the launcher (pipeline/runner.py: start, stop, status, the busy checks) and the worker, whose process runs
inside `jobstate.job_worker(run_dir, kind)` (running, stopped and failed written for it). Who may write
which state (jobstate.write_state), the Delete and Resume guards and the live view's file list are all
read from here. A new kind of long job is its worker module plus one `declare(Job(...))`, in this module
or in a module of its own that the worker imports (tests/unit/test_job_kinds.py does it in two files).

A leaf: it imports nothing of ours but the run file names. No torch or gradio import.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pipeline.run_folder import run_files


@dataclass(frozen=True)
class Option:
    """One typed option of a job: how `start(kind, run, name=value)` reaches the worker's command line
    (`flag`), or its environment (`env`: for a secret, which never goes into argv or a run file)."""

    name: str
    type: type
    default: Any = None
    flag: str | None = None  # "--limit 16"; a bool option is the bare flag when true
    env: str | None = None  # the environment variable it travels in instead of a flag
    check: Callable[[Any], str | None] | None = None  # what is wrong with a value, in words; None when fine

    def argv(self, value: Any) -> list[str]:
        """The command-line words for `value`.

        >>> Option("limit", int, 16, "--limit").argv("8"), Option("resume", bool, False, "--resume").argv(False)
        (['--limit', '8'], [])
        """
        if self.env or self.flag is None or value is None:
            return []
        if self.type is bool:
            return [self.flag] if value else []
        return [self.flag, str(self.type(value)).strip()]


@dataclass(frozen=True)
class Job:
    """One kind of long job. The launcher's shared code gives every kind the start lock, one job of a kind per
    run, "queued" written before the process exists, the launcher record (pid + start), the log, a launch
    that fails, the state read back (a writer that died reads as failed) and Stop; the worker's shared code
    (jobstate.job_worker) writes running with the pid, and stopped or failed as the job ends."""

    kind: str  # the name start() and stop() take: "train", "eval", ...
    what: str  # how messages name it: "the trainer", "the evaluation"
    module: str  # the worker, run as `python -m <module> --run-dir RUN [options]`
    status_file: str  # its state file in the run folder (docs/run-files.md)
    launcher_file: str  # pid + start of the process the app launched
    log_file: str  # stdout and stderr of that process
    worker: str  # the writer of the job's own states ("trainer", "evaluator")
    worker_states: tuple[str, ...]
    # The launcher writes "queued"; with "failed" too, a launch that fails says why in the state file, and
    # without it the state file is removed (nothing was started).
    launcher_states: tuple[str, ...] = ("queued",)
    options: tuple[Option, ...] = ()
    outputs: tuple[str, ...] = ()  # other run files the job writes that a view of it reads ("eval.json")
    doing: str = "running a job"  # "This run is <doing>": what Delete (and Resume, for reads_model) refuse on
    busy: str = "is already running this job"  # "Run 'x' <busy>": a second launch of the kind for one run
    # What an owner alone may do, in the words of a refusal ("only alice or an operator may <start>"):
    # launching this job on a run, and stopping it (owners.py).
    actions: tuple[str, str] = ("start this job on it", "stop its job")
    died: str = ""  # the error a writer that died without reporting reads with (default: names the log)
    fresh_status: bool = True  # each launch starts a fresh state file (False: merged with what is there)
    fresh_log: bool = True  # each launch starts a fresh log (False: appended to, as a run's history is)
    reads_model: bool = False  # it reads the run's merged model: needs one, and waits for a training of the run
    writes_model: bool = False  # it writes the run's merged model: refused while a job that reads it runs
    # Refused while any training runs on this machine (the two would share its cores or its GPU), and why;
    # "" when it may run beside one.
    needs_machine: str = ""
    distributed: bool = False  # may run as several processes under torchrun; Stop ends lingering ranks
    run_state: bool = False  # its state file is the run's own state (no file: the run is new)
    creates_run: bool = False  # a start without a run folder makes one from a RunConfig (`cfg`, `label`)
    user_code: bool = False  # may run the run's custom rewards: starts with what custom code may see, no secrets

    def argv(self, run_dir: str | Path, python: str | None = None, **options: Any) -> list[str]:
        """The worker's argument list for `run_dir` (never a shell string); unknown options are not its own."""
        cmd = [python or sys.executable, "-m", self.module, "--run-dir", str(run_dir)]
        for option in self.options:
            cmd += option.argv(options.get(option.name, option.default))
        return cmd

    def problem(self, **options: Any) -> str | None:
        """The first thing wrong with the options a start was given, in words; None when they can go."""
        for option in self.options:
            value = options.get(option.name, option.default)
            if option.check is not None and (found := option.check(value)):
                return found
        return None

    def env(self, **options: Any) -> dict[str, str]:
        """The options that travel in the environment (secrets), as variables."""
        return {o.env: str(options.get(o.name, o.default) or "").strip() for o in self.options if o.env}

    def writers(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """Who may write which state to its state file: {(file, writer): states}."""
        return {(self.status_file, "launcher"): tuple(self.launcher_states),
                (self.status_file, self.worker): tuple(self.worker_states)}

    @property
    def files(self) -> tuple[str, ...]:
        """The run files that say where the job stands."""
        return (self.status_file, self.launcher_file, self.log_file, *self.outputs)

    @property
    def died_message(self) -> str:
        return self.died or (f"{self.what.capitalize()} exited without reporting (killed, or out of memory). "
                             f"See {self.log_file} in the run folder.")


JOBS: dict[str, Job] = {}


def declare(job: Job) -> Job:
    """Make a kind known to the launcher and to its worker's process. Owners must agree with every kind
    declared before: a kind can't widen what another writer of the same state file may write."""
    declared = state_writers()
    for key, states in job.writers().items():
        if key in declared and declared[key] != states:
            raise ValueError(f"{key[0]}: the {key[1]} writes {declared[key]}, not {states} "
                             "(the owners declared in pipeline/run_folder/jobs.py)")
    JOBS[job.kind] = job
    return job


def job(kind: str | Job) -> Job:
    """The declaration of `kind` (a Job is returned as it is)."""
    if isinstance(kind, Job):
        return kind
    if kind not in JOBS:
        raise ValueError(f"Unknown kind of job {kind!r}; known: {', '.join(sorted(JOBS))}.")
    return JOBS[kind]


def state_writers() -> dict[tuple[str, str], tuple[str, ...]]:
    """Every declared kind's owners: {(state file, writer): the states it may write}."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for spec in JOBS.values():
        out.update(spec.writers())
    return out


# ---- the app's three kinds -------------------------------------------------------------------------

EVAL_LIMIT = 16  # held-out prompts the app evaluates: enough to compare base and tuned in a minute or two on CPU
EVAL_MAX = 1000  # the most the Runs panel asks for: about half an hour on 2 cores (bundled model, 32 tokens)

TRAIN = declare(Job(
    kind="train", what="the trainer", module="pipeline.train", status_file=run_files.STATUS,
    launcher_file=run_files.LAUNCHER, log_file=run_files.STDOUT_LOG, worker="trainer",
    worker_states=("running", "finished", "stopped", "failed"),
    launcher_states=("queued", "failed"),  # "failed": the trainer could not be started
    options=(Option("resume", bool, False, "--resume"),
             Option("steps", int, None, "--steps", check=lambda v: None if v is None or int(v) >= 1 else
                    "The step count to train to must be at least 1."),
             Option("allow_custom_rewards", bool, False, "--allow-custom-rewards")),
    outputs=(run_files.TRAIN_LOG,), doing="still training",
    busy="is still training. Stop it or wait for it to finish", actions=("resume it", "stop it"),
    died=("The trainer process exited without reporting (killed, or out of memory). "
          "See the log tail; resume continues from the last complete checkpoint."),
    fresh_status=False, fresh_log=False, writes_model=True,
    needs_machine="one training runs at a time on this machine.",
    distributed=True, run_state=True, creates_run=True, user_code=True,
))

EVALUATE = declare(Job(
    kind="eval", what="the evaluation", module="pipeline.evaluate", status_file=run_files.EVAL_STATUS,
    launcher_file=run_files.EVAL_LAUNCHER, log_file=run_files.EVAL_LOG, worker="evaluator",
    worker_states=("running", "done", "failed", "stopped"), options=(Option("limit", int, EVAL_LIMIT, "--limit"),),
    outputs=(run_files.EVAL_RESULT,), doing="being evaluated",
    busy="is already being evaluated: its progress shows below. Stop it to start again.",
    actions=("evaluate it", "stop its evaluation"),
    died=("The evaluation process exited without reporting (killed, or out of memory). See eval.log; "
          "press Evaluate to run it again."),
    reads_model=True, needs_machine=("an evaluation now would share this machine with the training and slow "
                                     "both. Evaluate when it has finished."),
))

PUSH = declare(Job(
    kind="push", what="the push", module="pipeline.export", status_file=run_files.PUSH_STATUS,
    launcher_file=run_files.PUSH_LAUNCHER, log_file=run_files.PUSH_LOG, worker="pusher",
    worker_states=("running", "done", "failed", "stopped"),
    options=(Option("repo_id", str, "", "--repo", check=lambda repo: None if "/" in (repo or "").strip() else
                    "Enter a repository id like `your-name/my-grpo-model`."),
             Option("token", str, "", env="HF_TOKEN", check=lambda token: None if (token or "").strip() else
                    "Enter a Hugging Face access token with write permission.")),
    doing="being pushed to the Hub", busy="is already being pushed: wait for it, or stop it.",
    actions=("push it to the Hub", "stop its push"),
    died="The push exited without reporting (killed, or out of memory). See push.log in the run folder.",
    reads_model=True,
))
