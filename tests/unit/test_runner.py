import sys
import time

import pytest

from pipeline import runner, runs
from pipeline.config import RunConfig


def test_command_is_an_argument_list_and_scales_out(tmp_path):
    cmd = runner.train_command(tmp_path / "my run", nproc=2, resume=True)
    assert cmd[1:6] == ["-m", "torch.distributed.run", "--nproc_per_node", "2", "-m"]
    assert cmd[-3:] == ["--run-dir", str(tmp_path / "my run"), "--resume"]
    assert "'" in runner.command_preview(cmd)  # the space in the path is quoted for a shell


def _fake_trainer(run_dir, seconds=30):
    """A stand-in process that behaves like the trainer towards the status file (starts, waits, obeys SIGTERM)."""
    code = (
        "import signal, sys, time, os\n"
        "from pipeline import runs\n"
        f"d = {str(run_dir)!r}\n"
        "runs.write_status(d, 'running', pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()))\n"
        "signal.signal(signal.SIGTERM, lambda *a: (runs.write_status(d, 'stopped'), sys.exit(0)))\n"
        f"time.sleep({seconds})\n"
        "runs.write_status(d, 'finished')\n"
    )
    return [sys.executable, "-c", code]


def test_one_run_at_a_time_and_stop(monkeypatch):
    launched = []

    def fake_command(run_dir, **kw):
        launched.append(run_dir)
        return _fake_trainer(run_dir)

    monkeypatch.setattr(runner, "train_command", fake_command)
    first = runner.start_run(RunConfig(), "first")
    deadline = time.time() + 20
    while runs.read_status(first)["state"] != "running" and time.time() < deadline:
        time.sleep(0.1)
    assert runs.read_status(first)["state"] == "running"
    assert runner.active_run() == first
    with pytest.raises(runner.RunnerError, match="still training"):
        runner.start_run(RunConfig(), "second")
    assert len(launched) == 1

    assert runner.stop_run(first, grace_s=15)
    assert runs.read_status(first)["state"] == "stopped"
    assert runner.active_run() is None
    assert runner.stop_run(first) is False


def test_launcher_that_dies_before_starting_reads_as_failed(monkeypatch):
    monkeypatch.setattr(runner, "train_command", lambda run_dir, **kw: [sys.executable, "-c", "raise SystemExit(3)"])
    run_dir = runner.start_run(RunConfig(), "dies")
    deadline = time.time() + 20
    while runs.read_status(run_dir)["state"] == "queued" and time.time() < deadline:
        time.sleep(0.1)
    assert runs.read_status(run_dir)["state"] == "failed"


def test_invalid_config_never_launches():
    with pytest.raises(Exception, match="multiple of the group size"):
        runner.start_run(RunConfig(batch_size=3), "bad")
