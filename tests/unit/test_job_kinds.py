"""A new kind of long job in two files, as CONTRIBUTING.md's recipe says: a declaration module and a worker module,
both written here into a folder on the import path. The declaration is all the launcher learns of it; the
worker's own process imports the same declaration and runs inside jobstate.job_worker. Through runner.start /
runner.stop the kind gets the start lock, one job per run, its owners' states, the Delete guard, the live
view's files and the dead-writer check that trainings and evaluations get; nothing is patched in."""

import subprocess
import sys

import pytest

from pipeline import runner
from pipeline.run_folder import jobs, jobstate, live, run_files, runs
from tests.integration.helpers import poll as _wait

DECLARATION = '''"""The fake job's declaration: what runs, its files and who writes which state."""
from pipeline.run_folder.jobs import Job, Option, declare

FAKE = declare(Job(
    kind="fake", what="the fake job", module="fake_job_worker", status_file="fake_status.json",
    launcher_file="fake_launcher.json", log_file="fake.log", worker="faker",
    worker_states=("running", "done", "failed", "stopped"), options=(Option("seconds", float, 30.0, "--seconds"),),
    doing="running a fake job", busy="already has a fake job running.",
))
'''

WORKER = '''"""The fake job's worker: says it runs, waits, and is done; a Stop makes it stopped."""
import argparse
import sys
import time

from fake_job_kind import FAKE
from pipeline.run_folder.jobstate import job_worker


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    with job_worker(args.run_dir, FAKE, seconds=args.seconds) as job:
        print("fake job running", flush=True)
        time.sleep(args.seconds)
        job.finish("done")
    return job.exit_code


if __name__ == "__main__":
    sys.exit(main())
'''


@pytest.fixture
def fake_kind(tmp_path, monkeypatch):
    """The two files in a folder on the import path (this process's and the worker's), a data directory of
    its own and a run folder."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "fake_job_kind.py").write_text(DECLARATION)
    (code / "fake_job_worker.py").write_text(WORKER)
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.setenv("PYTHONPATH", str(code))
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path / "data"))
    import fake_job_kind

    run_dir = runs.new_run_dir("fake")
    runs.write_json_atomic(run_dir / run_files.CONFIG, {})
    try:
        yield fake_job_kind.FAKE, run_dir
    finally:  # the next test imports the declaration afresh
        jobs.JOBS.pop("fake", None)
        sys.modules.pop("fake_job_kind", None)


def test_a_new_kind_starts_reports_and_stops_through_the_shared_code(fake_kind):
    spec, run_dir = fake_kind
    assert runner.status("fake", run_dir) is None  # never ran
    assert runner.start("fake", run_dir) == run_dir
    assert runner.status("fake", run_dir)["state"] in ("queued", "running")  # "queued" is the launcher's
    assert _wait(lambda: runner.status("fake", run_dir)["state"] == "running")
    assert runner.active("fake") == [run_dir] and runner.launcher_alive("fake", run_dir)
    assert runner.status("fake", run_dir)["seconds"] == 30.0  # its typed option reached the worker
    with pytest.raises(runner.RunnerError, match="already has a fake job running"):
        runner.start("fake", run_dir)  # one job of a kind per run
    with pytest.raises(ValueError, match="This run is running a fake job: wait for the fake job"):
        runs.delete_run(run_dir)  # a run is busy while any kind of job is active on it
    assert spec.status_file in live.action_files()  # the Runs panel's jobs box follows its state file
    assert _wait(lambda: "fake job running" in (run_dir / spec.log_file).read_text())

    assert runner.stop("fake", run_dir, grace_s=15)
    status = runner.status("fake", run_dir)
    assert status["state"] == "stopped" and status["error"] is None, status
    assert runner.active("fake") == [] and runner.stop("fake", run_dir) is False
    assert _wait(lambda: not runner.launcher_alive("fake", run_dir))


def test_a_new_kind_runs_to_its_end_and_its_states_keep_their_owners(fake_kind):
    spec, run_dir = fake_kind
    runner.start("fake", run_dir, seconds=0.2)
    assert _wait(lambda: (runner.status("fake", run_dir) or {}).get("state") == "done")
    with pytest.raises(ValueError, match="does not write state 'running'"):
        jobstate.write_state(run_dir, spec.status_file, "launcher", "running")
    with pytest.raises(ValueError, match="does not write state 'queued'"):
        jobstate.write_state(run_dir, spec.status_file, "faker", "queued")
    # A second kind can't widen what a writer of an existing state file may write.
    with pytest.raises(ValueError, match="owners declared"):
        jobs.declare(jobs.Job(kind="wider", what="x", module="x", status_file=run_files.STATUS,
                              launcher_file="x.json", log_file="x.log", worker="trainer",
                              worker_states=("running", "done")))
    assert "wider" not in jobs.JOBS
    with pytest.raises(ValueError, match="known: .*eval.*fake.*train"):
        runner.start("no-such-kind", run_dir)


def test_a_new_kind_whose_worker_dies_without_reporting_reads_as_failed(fake_kind):
    spec, run_dir = fake_kind
    runner.start("fake", run_dir, seconds=0.2)
    assert _wait(lambda: (runner.status("fake", run_dir) or {}).get("state") == "done")
    # A worker that exits while its file says "running" (a pid that is no longer there) reads as failed.
    jobstate.write_state(run_dir, spec.status_file, "faker", "running", pid=2**22 + 12345, pid_create_time=0.0)
    status = runner.status("fake", run_dir)
    assert status["state"] == "failed" and status["crashed"] and spec.log_file in status["error"], status


def test_a_new_kind_that_fails_to_launch_leaves_nothing_behind(fake_kind, monkeypatch):
    spec, run_dir = fake_kind
    real_popen = subprocess.Popen

    def popen_fails(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(runner.subprocess, "Popen", popen_fails)
    with pytest.raises(runner.RunnerError, match=r"^Could not start the fake job: \[Errno 24\]"):
        runner.start("fake", run_dir)
    assert not (run_dir / spec.status_file).exists()  # the launcher owns only "queued": nothing was started
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
        runner.start("push", run_dir, repo_id="me/model", token="hf_secret_token")  # no merged model yet
    (run_dir / "merged").mkdir()
    (run_dir / "merged" / "config.json").write_text("{}")
    with pytest.raises(runner.RunnerError, match="repository id"):
        runner.start("push", run_dir, repo_id="no-slash", token="hf_secret_token")
    runner.start("push", run_dir, repo_id="me/model", token="hf_secret_token")
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
    status = runner.status("push", tmp_path)
    assert status["state"] == "failed" and "401 Unauthorized for me/model" in status["error"], status
    assert "hf_secret_token" not in (tmp_path / run_files.PUSH_STATUS).read_text()


def test_a_run_being_pushed_is_not_deleted_and_the_runs_panel_shows_the_push(tmp_path, monkeypatch):
    """A push reads the run's merged model while it uploads: Delete refuses the run until the push has ended,
    and the Runs panel's job view says where the push stands (read from push_status.json)."""
    import os

    from ui import runs_panel

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_dir = runs.new_run_dir("pushing")
    runs.write_json_atomic(run_dir / "config.json", {})
    runs.write_status(run_dir, "finished")
    me = os.getpid()  # a live writer: this process stands in for the pusher
    jobstate.write_state(run_dir, run_files.PUSH_STATUS, "pusher", "running", repo="me/model", pid=me,
                         pid_create_time=jobstate.process_create_time(me))
    with pytest.raises(ValueError, match="being pushed to the Hub"):
        runs.delete_run(run_dir)
    assert run_dir.is_dir()
    text = runs_panel.eval_view(run_dir.name)
    assert "Pushing **" + run_dir.name + "** to `me/model`" in text

    jobstate.write_state(run_dir, run_files.PUSH_STATUS, "pusher", "failed", error="Push failed: offline.")
    text = runs_panel.eval_view(run_dir.name)
    assert "Push failed: offline." in text
    assert runs_panel.stop_push(run_dir.name) == "No push is running."  # the Runs panel's Stop push, nothing to stop
    runs.delete_run(run_dir)
    assert not run_dir.exists()


SLOW_MODULE = '''import os, time
print("importing", flush=True)
time.sleep(2)
open(os.environ["IMPORT_DONE"], "w").write("done")
'''

WORKER_IN_AN_IMPORT = '''import sys
import time

from fake_job_kind import FAKE
from pipeline.run_folder.jobstate import job_worker

with job_worker(sys.argv[1], FAKE) as job:
    import slow_module  # noqa: F401 - the Stop lands in here
    time.sleep(30)
    job.finish("done")
sys.exit(job.exit_code)
'''


def test_a_stop_during_an_import_waits_for_the_import_then_stops(fake_kind, tmp_path):
    """A Stop raised inside an import can cross torch's C++ (an evaluation stopped while it imported torch aborted
    with "terminate called", and read as crashed): the worker lets the import finish, then stops."""
    import os
    import signal

    spec, run_dir = fake_kind
    (tmp_path / "code" / "slow_module.py").write_text(SLOW_MODULE)
    (tmp_path / "code" / "worker_in_an_import.py").write_text(WORKER_IN_AN_IMPORT)
    done = tmp_path / "import-done"
    proc = subprocess.Popen([sys.executable, "-m", "worker_in_an_import", str(run_dir)], cwd=runner.ROOT,
                            env={**os.environ, "IMPORT_DONE": str(done)}, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "importing"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 130
    assert done.exists()  # the import ran to its end
    status = runs.read_json(run_dir / spec.status_file)
    assert status["state"] == "stopped" and status["error"] is None, status


WORKER_THAT_CRASHES = '''import ctypes
import sys

from fake_job_kind import FAKE
from pipeline.run_folder.jobstate import job_worker


def read_through_a_null_pointer():
    ctypes.string_at(0)  # a segfault, as a library's native code can have


with job_worker(sys.argv[1], FAKE) as job:
    read_through_a_null_pointer()
'''


def test_a_native_crash_leaves_the_python_stack_in_the_jobs_log(fake_kind, tmp_path):
    """A segfault writes no state (the Runs panel says the job exited without reporting): the log says where."""
    import os

    spec, run_dir = fake_kind
    (tmp_path / "code" / "worker_that_crashes.py").write_text(WORKER_THAT_CRASHES)
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        code = subprocess.run([sys.executable, "-m", "worker_that_crashes", str(run_dir)], cwd=runner.ROOT,
                              env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT, timeout=60).returncode
    assert code == -11
    text = log.read_text()
    assert "Fatal Python error: Segmentation fault" in text and "read_through_a_null_pointer" in text, text


def test_an_evaluation_older_than_the_runs_last_training_says_so(tmp_path, monkeypatch):
    """Resumed to a later step after it was evaluated: the Runs panel still shows the numbers, marked as the
    model's before, with what to press."""
    import os
    import time

    from ui import runs_panel

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_dir = runs.new_run_dir("evaluated")
    runs.write_json_atomic(run_dir / "config.json", {})
    runs.write_status(run_dir, "finished", ended_at=time.time() - 60)
    jobstate.write_state(run_dir, run_files.EVAL_STATUS, "evaluator", "done")
    result = {"base": {"reward_mean": 1.0}, "tuned": {"reward_mean": 2.0}, "delta": 1.0, "gap_closed": 0.5}
    runs.write_json_atomic(run_dir / run_files.EVAL_RESULT, result)
    assert "trained since" not in runs_panel.eval_view(run_dir.name)
    runs.write_status(run_dir, "finished", ended_at=time.time() + 5)  # a resume to a later step ended after it
    assert "⚠️ The run has trained since this evaluation" in runs_panel.eval_view(run_dir.name)
    os.utime(run_dir / run_files.EVAL_RESULT)  # evaluated again: current
    runs.write_status(run_dir, "finished", ended_at=time.time() - 1)
    assert "trained since" not in runs_panel.eval_view(run_dir.name)
