"""Start the real trainer as a subprocess on the bundled model, the way the app and users do."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pipeline.run_folder import runs
from pipeline.setup.config import RunConfig

from . import forked

ROOT = Path(__file__).resolve().parents[2]

# Small but real: G=4, one prompt per step, short completions so CPU steps take seconds. Probes and the
# end-of-run merge are off unless a test is about them (they cost seconds per run, over dozens of runs).
QUICK = dict(num_generations=4, batch_size=4, max_completion_length=24, max_steps=2, save_steps=100,
             probe_every=0, merge_at_end=False)
# The rewards a QUICK run scores: the default set.
DEFAULT_REWARDS = {spec.name for spec in RunConfig().rewards}
# What a run of the two-layer random model (tests/conftest.py's tiny_model_dir) scores unless its test says: the
# default rewards without post_similarity, whose embedder adds about 3 s to each trainer start (each rank's, under
# torchrun) and nothing that these tests, about processes and files rather than learning, look at.
TINY_REWARDS = [spec for spec in RunConfig().rewards if spec.name != "post_similarity"]


def tiny_settings(tiny_model_dir: Path) -> dict:
    """The settings that point a run at the two-layer random model, with its rewards."""
    return {"model": str(tiny_model_dir), "rewards": TINY_REWARDS}


def make_run(label: str, **overrides) -> Path:
    run_dir = runs.new_run_dir(label)
    cfg = RunConfig(**{**QUICK, **overrides})
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    return run_dir


def evaluable_run(label: str, bundled_model_dir, held_out: int | None = None) -> Path:
    """A finished run whose "tuned" model is the bundled base itself (a link): what the job does with
    the two models is the same, without a training first. Kept short: 8 completion tokens, the cheap
    rewards (no embedder), and `held_out` prompts when given (the trainer's eval_prompts.json)."""
    from pipeline.setup.data import load_dataset_split

    run_dir = runs.new_run_dir(label)
    cfg = RunConfig(**{**QUICK, "max_completion_length": 8})
    cfg.rewards = [r for r in cfg.rewards if r.name != "post_similarity"]
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    if held_out:
        runs.write_json_atomic(run_dir / "eval_prompts.json", load_dataset_split(cfg.dataset, cfg.seed)[1][:held_out])
    runs.write_status(run_dir, "finished", started_at=1.0, ended_at=2.0)
    (run_dir / "merged").symlink_to(bundled_model_dir, target_is_directory=True)
    return run_dir


def train_cmd(run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.train", "--run-dir", str(run_dir), *extra]


def start(run_dir: Path, *extra: str):
    """The trainer in a session of its own, its output into the run's stdout.log; a Popen, or what
    tests/integration/forked.py gives in its place (pid, poll, wait, signals)."""
    log = str(run_dir / "stdout.log")
    return forked.popen(train_cmd(run_dir, *extra), stdout=log, stderr=log, new_session=True)


def run(run_dir: Path, *extra: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return forked.run(train_cmd(run_dir, *extra), timeout=timeout)


def said(stderr: str, tail: int = 3000) -> str:
    """What a failed job printed, for an assertion's message: its last `tail` characters, and when it crashed, the
    start of the dump that faulthandler printed (the crashing threads' stacks come before a long module list)."""
    text = stderr or ""
    crash = text.find("Fatal Python error")
    if crash < 0 or crash >= len(text) - tail:
        return text[-tail:]
    return text[crash:crash + tail] + "\n[...]\n" + text[-tail:]


def fake_trainer(run_dir, seconds: float = 120, finish: bool = True) -> list[str]:
    """A stand-in trainer command that behaves like the trainer towards the status file: says it is running,
    waits, obeys SIGTERM (writing "stopped"), and says "finished" after `seconds` when `finish`. It obeys
    SIGTERM before it says it is running, so a Stop sent the moment it reads as running never meets the
    default handler, and it lives long enough that a loaded machine's Stop still finds it running."""
    code = (
        "import os, signal, sys, time\n"
        "from pipeline.run_folder import runs\n"
        f"d = {str(run_dir)!r}\n"
        "signal.signal(signal.SIGTERM, lambda *a: (runs.write_status(d, 'stopped'), sys.exit(0)))\n"
        "runs.write_status(d, 'running', pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()))\n"
        f"time.sleep({seconds})\n"
        + ("runs.write_status(d, 'finished')\n" if finish else "")
    )
    return [sys.executable, "-c", code]


def poll(predicate, timeout: float = 20.0) -> bool:
    """True as soon as predicate() is, False after `timeout` seconds (checked every 0.1 s)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"trainer exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def status(run_dir: Path) -> dict:
    return runs.read_status(run_dir)


def config(run_dir: Path) -> dict:
    return json.loads((run_dir / "config.json").read_text())


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_app(*flags: str):
    """The app launched in this process with the real launch settings; returns (demo, url)."""
    import app

    return app.serve(app.parse_args(["--port", str(free_port()), *flags]), prevent_thread_lock=True)


def start_app_process(port: int, *flags: str, log_path: Path | None = None, own_group: bool = False,
                      env: dict | None = None) -> subprocess.Popen:
    """`python app.py` as a separate process (as `make run` starts it); waits until it answers.

    own_group: the app leads a process group of its own, as a shell job does, so a test can signal the
    whole group (what Ctrl-C or a closed terminal reaches) without signalling pytest.
    env: variables set for the app on top of this process's environment."""
    import urllib.request

    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), *flags], cwd=ROOT,
                            env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=own_group)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the app exited early")
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the app did not start in 120 s")


def value_of(output):
    """A component's value as gradio_client returns it: the value, or an update dict carrying it."""
    return output.get("value") if isinstance(output, dict) else output


def start_inputs(cfg: RunConfig, run_name: str = "") -> list:
    """What the Start button sends for `cfg`, in its API order: processes, the run name, then the form by name in
    `form_keys` order (the uploaded file's path and the scan's kept prompts are States, which the API leaves out)."""
    from ui.form import REWARD_COLUMNS, config_to_form

    form = config_to_form(cfg)
    form.pop("path")
    form.pop("signal_prompts")
    form["rewards"] = {"headers": REWARD_COLUMNS, "data": form["rewards"]}
    return [1, run_name, *form.values()]


def stand_in(monkeypatch, kind: str, make_command) -> None:
    """Launch `make_command(run_dir, **options)` (a stand-in process) where runner.start would run the real worker
    of `kind`; the launcher's code around it (lock, state files, launcher record, Stop) stays the real one."""
    from pipeline import runner

    real = runner.command

    def command(asked: str, run_dir, nproc: int = 1, python=None, **options):
        if asked == kind:
            return make_command(run_dir, **options)
        return real(asked, run_dir, nproc=nproc, python=python, **options)

    monkeypatch.setattr(runner, "command", command)
