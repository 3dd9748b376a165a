"""Start through a spare worker (its libraries imported before Start), with the real trainer on the two-layer
model: the run is the one a fresh process trains, Stop stops it, and the next spare is made ready once the
machine is idle again."""

import json

import pytest

from pipeline import runner, spare_worker
from pipeline.run_folder import jobstate, runs
from pipeline.setup.config import RunConfig

from .helpers import QUICK, make_run, poll, run, said, tiny_settings, wait_for


@pytest.fixture
def spares(monkeypatch):
    """Spares on (the suite turns them off elsewhere), and none left behind."""
    monkeypatch.delenv("GRPO_STUDIO_SPARE_WORKER", raising=False)
    spare_worker.let_go()
    yield
    spare_worker.let_go()


def ready_spare():
    """A spare prepared the way the runner prepares one, ready. Made in the test's body: its environment is the
    one the runs get (pytest names the test's phase in the environment)."""
    assert runner.prepare_spare()
    waiting = spare_worker.waiting()
    assert waiting.wait_ready(120)
    return waiting


def rewards(run_dir):
    return [(row["step"], round(row["reward"], 4), round(row["loss"], 6)) for row in runs.read_metrics(run_dir)]


def test_a_run_started_in_a_spare_trains_as_a_fresh_process_does_and_a_new_spare_follows(spares, tiny_model_dir):
    spare = ready_spare()
    settings = {**QUICK, **tiny_settings(tiny_model_dir)}
    run_dir = runner.start("train", cfg=RunConfig(**settings), label="spare")
    launcher = json.loads((run_dir / "launcher.json").read_text())
    assert launcher["pid"] == spare.proc.pid
    wait_for(lambda: jobstate.read_status(run_dir).get("state") in ("finished", "failed"), 300, "the run's end")
    assert jobstate.read_status(run_dir)["state"] == "finished", (run_dir / "stdout.log").read_text()[-3000:]
    assert "Started in a spare worker" in (run_dir / "stdout.log").read_text()

    # Once its process has exited, and while nothing runs, a new spare waits for the next Start.
    spare.proc.wait(60)
    assert poll(lambda: spare_worker.waiting() is not None, timeout=60)
    assert spare_worker.waiting().proc.pid != spare.proc.pid

    fresh = make_run("fresh", **settings)
    done = run(fresh)
    assert done.returncode == 0, said(done.stderr)
    assert rewards(run_dir) == rewards(fresh) and len(rewards(fresh)) == 2  # the same run, step by step


def test_stop_ends_a_run_started_in_a_spare(spares, tiny_model_dir):
    spare = ready_spare()
    run_dir = runner.start("train", cfg=RunConfig(**{**QUICK, **tiny_settings(tiny_model_dir), "max_steps": 500}),
                           label="spare-stop")
    assert json.loads((run_dir / "launcher.json").read_text())["pid"] == spare.proc.pid
    wait_for(lambda: runs.read_metrics(run_dir), 300, "a first step")
    assert runner.stop("train", run_dir, grace_s=120)
    state = jobstate.read_status(run_dir)
    assert state["state"] == "stopped", state
    assert spare.proc.wait(60) is not None and not runner.launcher_alive("train", run_dir)
