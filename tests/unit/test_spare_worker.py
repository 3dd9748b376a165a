"""A spare worker runs a job as a fresh `python -m` process would, and is used only when it can: same
interpreter, same environment, alive. The spares here import only small modules (`json`, a few written by the
tests), so each test takes a second or two."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from pipeline import spare_worker

JOB = '''
import json, os, sys
print("to stdout", flush=True)
print("to stderr", file=sys.stderr, flush=True)
json.dump({"argv0": sys.argv[0], "options": sys.argv[2:], "name": __name__, "pid": os.getpid(),
           "session": os.getsid(0), "cwd": os.getcwd(), "stdin": sys.stdin.read(),
           "marker": os.environ.get("SPARE_TEST_MARKER")}, open(sys.argv[1], "w"))
sys.exit(3)
'''


@pytest.fixture
def job_env(tmp_path):
    """An environment in which `python -m spare_test_job OUT` can be found, and no spare left behind."""
    (tmp_path / "spare_test_job.py").write_text(JOB)
    (tmp_path / "sets_a_variable.py").write_text("import os\nos.environ.setdefault('SET_BY_IMPORT', 'yes')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SPARE_TEST_MARKER": "a"}
    env.pop("GRPO_STUDIO_SPARE_WORKER", None)
    yield env
    spare_worker.let_go()


def ready_spare(env):
    assert spare_worker.prepare(env, preload=("json", "sets_a_variable"))
    spare = spare_worker.waiting()
    assert spare.wait_ready(30)
    return spare


def cmd_for(out):
    return [sys.executable, "-m", "spare_test_job", str(out), "--flag"]


def test_a_job_in_a_spare_runs_as_a_fresh_process_would(job_env, tmp_path):
    spare = ready_spare(job_env)
    cold = subprocess.run(cmd_for(tmp_path / "cold.json"), env=job_env, cwd=spare_worker.ROOT, capture_output=True,
                          stdin=subprocess.DEVNULL, start_new_session=True, text=True)
    log = tmp_path / "job.log"
    log.write_text("earlier line\n")
    proc = spare_worker.take(cmd_for(tmp_path / "warm.json"), dict(job_env), log)
    assert proc is spare.proc and spare_worker.waiting() is None
    assert proc.wait(30) == cold.returncode == 3
    warm, fresh = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("warm", "cold"))
    assert warm["pid"] == warm["session"] == proc.pid  # a session of its own: Stop signals its group alone
    for key in ("argv0", "options", "name", "cwd", "stdin", "marker"):
        assert warm[key] == fresh[key], key
    assert warm["argv0"].endswith("spare_test_job.py") and warm["options"] == ["--flag"]
    assert warm["name"] == "__main__" and warm["stdin"] == ""
    text = log.read_text()
    assert text.startswith("earlier line\n") and "to stdout\n" in text and "to stderr\n" in text
    assert "Started in a spare worker" in text and "ready]" not in text


@pytest.mark.parametrize("value", [None, "yes"])
def test_a_variable_that_the_imports_set_themselves_does_not_count_as_a_difference(job_env, tmp_path, value):
    """An app that has imported torch itself (to chat) has the variables torch sets; so has the spare."""
    ready_spare(job_env)
    env = {**job_env, **({"SET_BY_IMPORT": value} if value else {})}
    proc = spare_worker.take(cmd_for(tmp_path / "out.json"), env, tmp_path / "job.log")
    assert proc is not None and proc.wait(30) == 3


@pytest.mark.parametrize("change", ["environment", "set otherwise", "interpreter", "not python -m"])
def test_a_job_the_spare_would_run_differently_starts_fresh(job_env, tmp_path, change):
    spare = ready_spare(job_env)
    cmd, env = cmd_for(tmp_path / "out.json"), dict(job_env)
    if change == "environment":
        env["SPARE_TEST_MARKER"] = "b"  # a Hub token, the user's reward code's bare environment, another GPU
    elif change == "set otherwise":
        env["SET_BY_IMPORT"] = "no"  # set by the user: the import would leave it so
    elif change == "interpreter":
        cmd[0] = "/usr/bin/python3"
    else:
        cmd = [sys.executable, "-c", "pass"]
    assert spare_worker.take(cmd, env, tmp_path / "job.log") is None
    assert spare.proc.wait(30) is not None  # discarded: it ends without running anything
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "job.log").exists()


def test_a_spare_that_has_died_is_not_used(job_env, tmp_path):
    spare = ready_spare(job_env)
    spare.proc.kill()
    spare.proc.wait(10)
    assert spare_worker.take(cmd_for(tmp_path / "out.json"), dict(job_env), tmp_path / "job.log") is None


@pytest.mark.parametrize("when", ["waiting", "importing"])
def test_a_spare_ends_when_the_app_that_started_it_goes(job_env, tmp_path, when):
    """Its stdin is the app's pipe: when the app exits (or is killed), the spare reads the end of input and ends,
    at once, also in the middle of its imports (here a library that takes a minute to import)."""
    (tmp_path / "slow_library.py").write_text("import time\ntime.sleep(60)\n")
    preload = ("json",) if when == "waiting" else ("slow_library",)
    app = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "from pipeline import spare_worker\n"
        f"spare_worker.prepare(dict(os.environ), preload={preload!r})\n"
        "spare = spare_worker.waiting()\n"
        f"assert spare.wait_ready(30) if {when == 'waiting'} else (time.sleep(1) or True)\n"
        "print(spare.proc.pid, flush=True)\n"
        "os._exit(0)\n")], cwd=spare_worker.ROOT, env=job_env, stdout=subprocess.PIPE, text=True)
    pid = int(app.stdout.readline())
    app.wait(30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid)


def test_spares_can_be_turned_off(job_env):
    assert not spare_worker.prepare({**job_env, "GRPO_STUDIO_SPARE_WORKER": "0"}, preload=("json",))
    assert spare_worker.waiting() is None


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_runner_prepares_a_spare_only_while_no_job_runs(job_env, tmp_path, monkeypatch):
    """A spare's imports take a core for seconds: never while a training or an evaluation has the machine."""
    from pipeline import runner
    from pipeline.run_folder import runs

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("GRPO_STUDIO_SPARE_WORKER", raising=False)
    asked = []
    monkeypatch.setattr(spare_worker, "prepare", lambda env, **kw: asked.append(env) or True)
    run_dir = runs.new_run_dir("busy")
    runs.write_json_atomic(run_dir / "config.json", {})
    runs.write_status(run_dir, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()))
    assert not runner.prepare_spare() and asked == []
    runs.write_status(run_dir, "finished")
    assert runner.prepare_spare() and len(asked) == 1


def test_a_library_that_fails_to_import_leaves_the_spare_usable(job_env, tmp_path):
    """The job that needs it fails with the import's own error, as it would in a fresh process."""
    assert spare_worker.prepare(job_env, preload=("no_such_library_here", "json"))
    assert spare_worker.waiting().wait_ready(30)
    proc = spare_worker.take(cmd_for(tmp_path / "out.json"), dict(job_env), tmp_path / "job.log")
    assert proc is not None and proc.wait(30) == 3
