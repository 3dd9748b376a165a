"""A new kind of long job through the shared code: a fake kind is declared (a tiny python -c command that
writes its own state file), and starts, reports and stops through runner.start / runner.stop with the
start lock, the owner rules and the dead-writer check that trainings and evaluations get."""

import subprocess
import sys

import pytest

from pipeline import jobstate, runner, runs
from tests.integration.helpers import poll as _wait

STATUS = "fake_status.json"
OWNERS = ("running", "done", "failed", "stopped")


def _fake_worker(run_dir, seconds=30, report=True):
    """The kind's entry point: declares its owner row in its own process, says it runs, obeys SIGTERM."""
    code = (
        "import os, signal, sys, time\n"
        "from pipeline import jobstate\n"
        f"jobstate.STATE_WRITERS[({STATUS!r}, 'faker')] = {OWNERS!r}\n"
        f"d = {str(run_dir)!r}\n"
        "write = lambda state, **kw: jobstate.write_state(d, " + repr(STATUS) + ", 'faker', state, **kw)\n"
        "write('running', pid=os.getpid(), pid_create_time=jobstate.process_create_time(os.getpid()))\n"
        "print('fake job running', flush=True)\n"
        + ("signal.signal(signal.SIGTERM, lambda *a: (write('stopped'), sys.exit(0)))\n" if report else "")
        + f"time.sleep({seconds})\n"
        "write('done')\n"
    )
    return [sys.executable, "-c", code]


@pytest.fixture
def fake_kind(tmp_path, monkeypatch):
    """A data directory of its own, and a 'fake' kind registered for this test only."""
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    monkeypatch.setattr(runner, "JOBS", dict(runner.JOBS))
    monkeypatch.setattr(jobstate, "STATE_WRITERS", dict(jobstate.STATE_WRITERS))
    commands = {"seconds": 30, "report": True}
    spec = runner.register(runner.Job(
        kind="fake", what="the fake job", status_file=STATUS, launcher_file="fake_launcher.json",
        log_file="fake.log", worker="faker", worker_states=OWNERS,
        busy="already has a fake job running.",
        command=lambda run_dir, **_: _fake_worker(run_dir, **commands)))
    run_dir = runs.new_run_dir("fake")
    runs.write_json_atomic(run_dir / "config.json", {})
    return spec, run_dir, commands


def test_a_new_kind_starts_reports_and_stops_through_the_shared_code(fake_kind):
    spec, run_dir, _ = fake_kind
    assert runner.status("fake", run_dir) is None  # never ran
    assert runner.start("fake", run_dir) == run_dir
    assert runner.status("fake", run_dir)["state"] in ("queued", "running")  # "queued" is the launcher's
    assert _wait(lambda: runner.status("fake", run_dir)["state"] == "running")
    assert runner.active("fake") == [run_dir] and runner.launcher_alive("fake", run_dir)
    with pytest.raises(runner.RunnerError, match="already has a fake job running"):
        runner.start("fake", run_dir)  # one job of a kind per run
    assert _wait(lambda: "fake job running" in (run_dir / "fake.log").read_text())

    assert runner.stop("fake", run_dir, grace_s=15)
    assert runner.status("fake", run_dir)["state"] == "stopped"
    assert runner.active("fake") == [] and runner.stop("fake", run_dir) is False
    assert _wait(lambda: not runner.launcher_alive("fake", run_dir))


def test_a_new_kinds_states_keep_their_owners(fake_kind):
    _, run_dir, _ = fake_kind
    with pytest.raises(ValueError, match="does not write state 'running'"):
        jobstate.write_state(run_dir, STATUS, "launcher", "running")
    with pytest.raises(ValueError, match="does not write state 'queued'"):
        jobstate.write_state(run_dir, STATUS, "faker", "queued")
    # A second kind can't widen what a writer of an existing state file may write.
    with pytest.raises(ValueError, match="owners table"):
        runner.register(runner.Job(kind="wider", what="x", status_file=runs.STATUS_FILE, launcher_file="x.json",
                                   log_file="x.log", worker="trainer", worker_states=("running", "done"),
                                   command=lambda run_dir, **_: []))
    with pytest.raises(ValueError, match="known: .*eval.*fake.*train"):
        runner.start("no-such-kind", run_dir)


def test_a_new_kind_whose_worker_dies_without_reporting_reads_as_failed(fake_kind):
    _, run_dir, commands = fake_kind
    commands.update(seconds=0.5, report=False)
    runner.start("fake", run_dir)
    # It wrote "running" and then "done"; kill the record of it: a worker that exits while "running" is failed.
    assert _wait(lambda: (runner.status("fake", run_dir) or {}).get("state") == "done")
    jobstate.write_state(run_dir, STATUS, "faker", "running", pid=2**22 + 12345, pid_create_time=0.0)
    status = runner.status("fake", run_dir)
    assert status["state"] == "failed" and status["crashed"] and "fake.log" in status["error"], status


def test_a_new_kind_that_fails_to_launch_leaves_nothing_behind(fake_kind, monkeypatch):
    _, run_dir, _ = fake_kind
    real_popen = subprocess.Popen

    def popen_fails(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(runner.subprocess, "Popen", popen_fails)
    with pytest.raises(runner.RunnerError, match=r"^Could not start the fake job: \[Errno 24\]"):
        runner.start("fake", run_dir)
    assert not (run_dir / STATUS).exists()  # the launcher owns only "queued": nothing was started, nothing stays
    monkeypatch.setattr(runner.subprocess, "Popen", real_popen)
    runner.start("fake", run_dir)
    assert _wait(lambda: runner.status("fake", run_dir)["state"] == "running")
    runner.stop("fake", run_dir, grace_s=15)


def test_a_hub_push_is_the_third_kind_and_keeps_its_token_out_of_the_run_files(tmp_path, monkeypatch):
    """Push runs as `python -m pipeline.export` through the same start/status code; the token travels in the
    environment only. Against a Hub that refuses connections it ends failed, saying why."""
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the upload fails at once
    run_dir = runs.new_run_dir("pushed")
    runs.write_json_atomic(run_dir / "config.json", {})
    runs.write_status(run_dir, "finished")
    with pytest.raises(runner.RunnerError, match="finished run"):
        runner.start_push(run_dir, "me/model", "hf_secret_token")  # no merged model yet
    (run_dir / "merged").mkdir()
    (run_dir / "merged" / "config.json").write_text("{}")
    with pytest.raises(runner.RunnerError, match="repository id"):
        runner.start_push(run_dir, "no-slash", "hf_secret_token")
    runner.start_push(run_dir, "me/model", "hf_secret_token")
    assert _wait(lambda: runner.status("push", run_dir)["state"] not in runs.ACTIVE_STATES, timeout=60)
    status = runner.status("push", run_dir)
    assert status["state"] == "failed" and status["error"].startswith("Push failed"), status
    for path in run_dir.iterdir():
        if path.is_file():
            assert "hf_secret_token" not in path.read_text(errors="replace"), path.name


def test_a_push_error_that_quotes_the_token_is_written_without_it(tmp_path, monkeypatch):
    """An error from the Hub may quote the request it refused; push_status.json (which the Runs panel shows)
    gets it with the token masked."""
    import signal

    from pipeline import export

    monkeypatch.setenv(export.TOKEN_ENV, "hf_secret_token")
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # the push's SIGTERM handler, not pytest's

    def refused(run_dir, repo_id, token):
        raise RuntimeError(f"401 Unauthorized for {repo_id} (Authorization: Bearer {token})")

    monkeypatch.setattr(export, "push", refused)
    assert export.main(["--run-dir", str(tmp_path), "--repo", "me/model"]) == 1
    status = runs.read_push_status(tmp_path)
    assert status["state"] == "failed" and "401 Unauthorized for me/model" in status["error"], status
    assert "hf_secret_token" not in (tmp_path / runs.PUSH_STATUS_FILE).read_text()


def test_a_run_being_pushed_is_not_deleted_and_the_runs_panel_shows_the_push(tmp_path, monkeypatch):
    """A push reads the run's merged model while it uploads: Delete refuses the run until the push has ended,
    and the Runs panel's job view says where the push stands (read from push_status.json)."""
    import os

    from ui import train

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_dir = runs.new_run_dir("pushing")
    runs.write_json_atomic(run_dir / "config.json", {})
    runs.write_status(run_dir, "finished")
    me = os.getpid()  # a live writer: this process stands in for the pusher
    jobstate.write_state(run_dir, runs.PUSH_STATUS_FILE, "pusher", "running", repo="me/model", pid=me,
                         pid_create_time=jobstate.process_create_time(me))
    with pytest.raises(ValueError, match="being pushed to the Hub"):
        runs.delete_run(run_dir)
    assert run_dir.is_dir()
    text = train.eval_view(run_dir.name)
    assert "Pushing **" + run_dir.name + "** to `me/model`" in text

    jobstate.write_state(run_dir, runs.PUSH_STATUS_FILE, "pusher", "failed", error="Push failed: offline.")
    text = train.eval_view(run_dir.name)
    assert "Push failed: offline." in text
    assert train.stop_push(run_dir.name) == "No push is running."  # the Runs panel's Stop push, nothing to stop
    runs.delete_run(run_dir)
    assert not run_dir.exists()
