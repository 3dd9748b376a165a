"""Long jobs through the runner: who writes which state, evaluation jobs, and --steps overrides."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import runner
from pipeline.run_folder import jobstate, run_files, runs
from pipeline.setup.config import RunConfig
from tests.integration.helpers import fake_trainer, poll as _wait, stand_in


def _run_with_merged_model(label: str):
    run_dir = runs.new_run_dir(label)
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=4).to_dict())
    runs.write_status(run_dir, "finished")
    (run_dir / "merged").mkdir()
    (run_dir / "merged" / "config.json").write_text("{}")
    return run_dir


def _fake_evaluator(run_dir, seconds=30):
    """Behaves like pipeline.evaluate towards eval_status.json, through the same worker context: running with
    its pid, stopped on SIGTERM, done at the end."""
    code = (
        "import time\n"
        "from pipeline.run_folder.jobstate import job_worker\n"
        f"with job_worker({str(run_dir)!r}, 'eval', done=0, total=8) as job:\n"
        f"    time.sleep({seconds})\n"
        "    job.finish('done', done=8, total=8)\n"
        "raise SystemExit(job.exit_code)\n"
    )
    return [sys.executable, "-c", code]


# ---- who writes which state -------------------------------------------------------------------


def test_each_writer_writes_only_its_own_states(tmp_path):
    with pytest.raises(ValueError, match="does not write state 'queued'"):
        runs.write_status(tmp_path, "queued", writer="trainer")
    with pytest.raises(ValueError, match="does not write state 'running'"):
        runs.write_status(tmp_path, "running", writer="launcher")
    with pytest.raises(ValueError, match="does not write state 'done'"):
        jobstate.write_state(tmp_path, run_files.EVAL_STATUS, "launcher", "done")
    assert not (tmp_path / "status.json").exists() and not (tmp_path / "eval_status.json").exists()
    assert runs.write_status(tmp_path, "queued")["state"] == "queued"  # the owner is the default writer


def test_a_launch_never_overwrites_a_live_running_process(tmp_path):
    runs.write_status(tmp_path, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()))
    with pytest.raises(RuntimeError, match="still running"):
        runs.write_status(tmp_path, "queued", writer="launcher")
    assert runs.read_status(tmp_path)["state"] == "running"
    # A dead process's "running" may be replaced by the next launch.
    runs.write_status(tmp_path, "running", pid=2**22 + 12345, pid_create_time=0.0)
    assert runs.write_status(tmp_path, "queued", writer="launcher")["state"] == "queued"


# ---- --steps overrides ------------------------------------------------------------------------


def test_overrides_are_recorded_per_launch_and_make_the_effective_config():
    run_dir = runs.new_run_dir("override")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=4).to_dict())
    before = (run_dir / "config.json").read_bytes()
    runs.record_launch(run_dir, resume=False, from_step=0, overrides={}, argv=["train"])
    runs.record_launch(run_dir, resume=True, from_step=4, overrides={"max_steps": 6}, argv=["train", "--steps", "6"])
    runs.record_launch(run_dir, resume=True, from_step=5, overrides={}, argv=["train"])  # the override holds
    assert runs.effective_config(run_dir)["max_steps"] == 6
    assert [(r["resume"], r["from_step"], r["overrides"]) for r in runs.read_launches(run_dir)] == [
        (False, 0, {}), (True, 4, {"max_steps": 6}), (True, 5, {})]
    assert runs.run_summary(run_dir)["max_steps"] == 6  # the runs list shows what the run trains to
    assert (run_dir / "config.json").read_bytes() == before


def test_the_trainer_reads_config_plus_overrides_and_writes_no_config(tmp_path):
    from pipeline.train import load_or_create_config

    runs.write_json_atomic(tmp_path / "config.json", RunConfig(max_steps=4, seed=7).to_dict())
    before = (tmp_path / "config.json").read_bytes()
    runs.record_launch(tmp_path, resume=True, from_step=4, overrides={"max_steps": 5}, argv=[])
    cfg, overrides = load_or_create_config(tmp_path, None)
    assert (cfg.max_steps, cfg.seed, overrides) == (5, 7, {})
    cfg, overrides = load_or_create_config(tmp_path, 9)
    assert (cfg.max_steps, overrides) == (9, {"max_steps": 9})
    assert (tmp_path / "config.json").read_bytes() == before
    fresh = tmp_path / "headless"
    fresh.mkdir()
    cfg, _ = load_or_create_config(fresh, 3)  # no config.json: the default is written once, without the override
    assert cfg.max_steps == 3 and RunConfig.load(fresh / "config.json").max_steps == RunConfig().max_steps


# ---- evaluation jobs --------------------------------------------------------------------------


def test_evaluation_is_a_runner_job_one_per_run_and_stop_works(monkeypatch):
    stand_in(monkeypatch, "eval", lambda run_dir, limit=16: _fake_evaluator(run_dir))
    stand_in(monkeypatch, "train", lambda run_dir, **kw: fake_trainer(run_dir, seconds=30, finish=False))
    run_dir = _run_with_merged_model("eval-job")
    assert runner.start("eval", run_dir) == run_dir
    # Returned while the job runs (the fake evaluator takes 30 s): it launched a process, it did not wait.
    assert runner.status("eval", run_dir)["state"] in ("queued", "running")
    assert _wait(lambda: runner.status("eval", run_dir)["state"] == "running")
    assert runner.active("eval") == [run_dir]
    with pytest.raises(runner.RunnerError, match="already being evaluated"):
        runner.start("eval", run_dir)
    # The evaluated run can't be resumed (it would replace the merged model) or deleted meanwhile...
    runs.write_status(run_dir, "stopped")
    with pytest.raises(runner.RunnerError, match="is being evaluated"):
        runner.start("train", run_dir, resume=True)
    with pytest.raises(ValueError, match="being evaluated"):
        runs.delete_run(run_dir)
    # ...but a training of another run starts.
    other = runner.start("train", cfg=RunConfig(), label="beside-eval")
    assert _wait(lambda: runs.read_status(other)["state"] == "running")
    assert runner.stop("train", other, grace_s=15)

    assert runner.stop("eval", run_dir, grace_s=15)
    status = runner.status("eval", run_dir)
    assert status["state"] == "stopped" and not status.get("crashed")
    assert runner.active("eval") == [] and runner.stop("eval", run_dir) is False


def test_evaluation_is_refused_while_a_training_runs_and_without_a_merged_model(monkeypatch):
    stand_in(monkeypatch, "eval", lambda run_dir, limit=16: _fake_evaluator(run_dir))
    stand_in(monkeypatch, "train", lambda run_dir, **kw: fake_trainer(run_dir, seconds=30, finish=False))
    bare = runs.new_run_dir("no-merged")
    runs.write_json_atomic(bare / "config.json", RunConfig().to_dict())
    runs.write_status(bare, "stopped")
    with pytest.raises(runner.RunnerError, match="no merged model"):
        runner.start("eval", bare)
    run_dir = _run_with_merged_model("eval-busy")
    training = runner.start("train", cfg=RunConfig(), label="training")
    try:
        with pytest.raises(runner.RunnerError, match="still training.*share this machine"):
            runner.start("eval", run_dir)
        assert runner.status("eval", run_dir) is None and runner.active("eval") == []
    finally:
        _wait(lambda: runs.read_status(training)["state"] == "running")
        runner.stop("train", training, grace_s=15)


def test_an_evaluator_that_dies_without_reporting_reads_as_failed(monkeypatch):
    stand_in(monkeypatch, "eval", lambda run_dir, limit=16: [
        sys.executable, "-c", "import os, sys; from pipeline.run_folder import jobstate, run_files; d = sys.argv[1]; "
        "jobstate.write_state(d, run_files.EVAL_STATUS, 'evaluator', 'running', pid=os.getpid(), "
        "pid_create_time=jobstate.process_create_time(os.getpid())); "
        "os._exit(9)", str(run_dir)])
    run_dir = _run_with_merged_model("eval-dies")
    runner.start("eval", run_dir)
    assert _wait(lambda: runner.status("eval", run_dir)["state"] == "failed")
    status = runner.status("eval", run_dir)
    assert status["crashed"] and "exited without reporting" in status["error"]
    assert runner.active("eval") == []


def test_the_evaluation_command_is_an_argument_list(tmp_path):
    cmd = runner.command("eval", tmp_path / "a run", limit=5)
    assert cmd[1:3] == ["-m", "pipeline.evaluate"] and cmd[-4:] == ["--run-dir", str(tmp_path / "a run"), "--limit", "5"]


@pytest.mark.parametrize("kind", ["train", "eval", "push"])
def test_each_jobs_worker_runs_its_main_when_launched_as_the_runner_launches_it(kind):
    """The runner starts a job as `python -m <module> --run-dir RUN`: that module must run its main() then, not
    only define it (a module that lost its `if __name__ == "__main__"` block exits 0 having done nothing)."""
    from pipeline.run_folder.jobs import JOBS

    done = subprocess.run([sys.executable, "-m", JOBS[kind].module, "--help"], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and "--run-dir" in done.stdout, (JOBS[kind].module, done.stdout, done.stderr[-2000:])
