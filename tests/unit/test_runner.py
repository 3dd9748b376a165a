import subprocess
import sys
import time

import pytest

from pipeline import runner, runs
from pipeline.config import RunConfig


def test_command_is_an_argument_list_and_scales_out(tmp_path):
    cmd = runner.train_command(tmp_path / "my run", nproc=2, resume=True)
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"]  # a free rendezvous port per launch
    assert cmd[cmd.index("--nproc_per_node") + 1] == "2"
    # torchrun waits this long after passing a Stop on before it kills the ranks: save + merge fit.
    assert int(cmd[cmd.index("--shutdown_timeout") + 1]) >= 600
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


def test_resume_relaunches_with_the_runs_process_count(monkeypatch):
    launched = []
    monkeypatch.setattr(runner, "_launch", lambda run_dir, cmd, nproc=1: launched.append((cmd, nproc)))
    run_dir = runs.new_run_dir("nproc")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    runs.write_json_atomic(run_dir / "command.json", {"argv": [], "nproc": 2})
    runs.write_status(run_dir, "stopped")
    runner.resume_run(run_dir)
    cmd, nproc = launched[-1]
    assert nproc == 2 and "torch.distributed.run" in cmd and cmd[-1] == "--resume"
    runner.resume_run(run_dir, nproc=1)  # an explicit count wins
    assert launched[-1][1] == 1 and "torch.distributed.run" not in launched[-1][0]


def test_a_run_whose_processes_are_still_exiting_blocks_the_next_start(monkeypatch):
    """Rank 0 writes 'stopped' before torchrun and the other ranks have exited."""
    run_dir = runs.new_run_dir("exiting")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    runs.write_status(run_dir, "stopped")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        runs.write_json_atomic(run_dir / runs.LAUNCHER_FILE,
                               {"pid": proc.pid, "create_time": runs.process_create_time(proc.pid)})
        with pytest.raises(runner.RunnerError, match="still shutting down"):
            runner.start_run(RunConfig(), "next")
    finally:
        proc.kill()
        proc.wait()
    assert runner.busy_run() is None
