import subprocess
import sys
import time

import pytest

from pipeline import runner
from pipeline.run_folder import run_files, runs
from pipeline.setup.config import RunConfig
from tests.integration.helpers import fake_trainer, stand_in


def test_command_is_an_argument_list_and_scales_out(tmp_path):
    cmd = runner.command("train", tmp_path / "my run", nproc=2, resume=True)
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"]  # a free rendezvous port per launch
    assert cmd[cmd.index("--nproc_per_node") + 1] == "2"
    # torchrun waits this long after passing a Stop on before it kills the ranks: save + merge fit.
    assert int(cmd[cmd.index("--shutdown_timeout") + 1]) >= 600
    assert cmd[-3:] == ["--run-dir", str(tmp_path / "my run"), "--resume"]
    assert "'" in runner.command_preview(cmd)  # the space in the path is quoted for a shell


def test_one_run_at_a_time_and_stop(monkeypatch):
    launched = []

    def fake_command(run_dir, **kw):
        launched.append(run_dir)
        return fake_trainer(run_dir)

    stand_in(monkeypatch, "train", fake_command)
    first = runner.start("train", cfg=RunConfig(), label="first")
    deadline = time.time() + 60  # a loaded machine starts Python slowly
    while runs.read_status(first)["state"] != "running" and time.time() < deadline:
        time.sleep(0.1)
    assert runs.read_status(first)["state"] == "running"
    assert runner.active_run() == first
    with pytest.raises(runner.RunnerError, match="still training"):
        runner.start("train", cfg=RunConfig(), label="second")
    assert len(launched) == 1

    assert runner.stop("train", first, grace_s=15)
    assert runs.read_status(first)["state"] == "stopped"
    assert runner.active_run() is None
    assert runner.stop("train", first) is False


def test_launcher_that_dies_before_starting_reads_as_failed(monkeypatch):
    stand_in(monkeypatch, "train", lambda run_dir, **kw: [sys.executable, "-c", "raise SystemExit(3)"])
    run_dir = runner.start("train", cfg=RunConfig(), label="dies")
    deadline = time.time() + 20
    while runs.read_status(run_dir)["state"] == "queued" and time.time() < deadline:
        time.sleep(0.1)
    assert runs.read_status(run_dir)["state"] == "failed"


def test_invalid_config_never_launches():
    with pytest.raises(Exception, match="multiple of the group size"):
        runner.start("train", cfg=RunConfig(batch_size=3), label="bad")


def test_resume_relaunches_with_the_runs_process_count(monkeypatch):
    launched = []
    monkeypatch.setattr(runner, "_launch", lambda run_dir, cmd, nproc=1, **kw: launched.append((cmd, nproc)))
    run_dir = runs.new_run_dir("nproc")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    runs.write_json_atomic(run_dir / "command.json", {"argv": [], "nproc": 2})
    runs.write_status(run_dir, "stopped")
    runner.start("train", run_dir, resume=True)
    cmd, nproc = launched[-1]
    assert nproc == 2 and "torch.distributed.run" in cmd and cmd[-1] == "--resume"
    runner.start("train", run_dir, resume=True, nproc=1)  # an explicit count wins
    assert launched[-1][1] == 1 and "torch.distributed.run" not in launched[-1][0]


def test_a_finished_run_trains_further_only_to_a_step_above_its_last(monkeypatch):
    launched = []
    monkeypatch.setattr(runner, "_launch", lambda run_dir, cmd, nproc=1, **kw: launched.append(cmd))
    run_dir = runs.new_run_dir("further")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=2).to_dict())
    runs.write_status(run_dir, "finished", step=2, max_steps=2)
    with pytest.raises(runner.RunnerError, match=r"already finished all its 2 steps: to train it further, give a "
                                                 r"step count above 2 and resume\.$"):
        runner.start("train", run_dir, resume=True)
    with pytest.raises(runner.RunnerError, match=r"is at step 2: to train it further, give a step count above 2\.$"):
        runner.start("train", run_dir, resume=True, steps=2)
    with pytest.raises(runner.RunnerError, match=r"^The step count to train to must be at least 1\.$"):
        runner.start("train", run_dir, resume=True, steps=0)
    assert launched == []
    runner.start("train", run_dir, resume=True, steps=5)
    assert launched[-1][-3:] == ["--resume", "--steps", "5"], launched[-1]


def test_a_run_whose_processes_are_still_exiting_blocks_the_next_start(monkeypatch):
    """Rank 0 writes 'stopped' before torchrun and the other ranks have exited."""
    run_dir = runs.new_run_dir("exiting")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    runs.write_status(run_dir, "stopped")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        runs.write_json_atomic(run_dir / run_files.LAUNCHER,
                               {"pid": proc.pid, "create_time": runs.process_create_time(proc.pid)})
        with pytest.raises(runner.RunnerError, match="still shutting down"):
            runner.start("train", cfg=RunConfig(), label="next")
    finally:
        proc.kill()
        proc.wait()
    assert runner.busy_run() is None


@pytest.fixture
def own_runs(tmp_path, monkeypatch):
    """A data directory of this test's own, so no other test's runs make the machine busy."""
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    return runs.runs_dir()


@pytest.fixture
def unrelated_process():
    """A live process that is not a trainer, in a session of its own (so a wrongly aimed Stop reaches it alone,
    never pytest's own process group)."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def recycled_run(own_runs, unrelated_process):
    """A run whose trainer died and whose pid now belongs to another live process: status.json and
    launcher.json name that pid with the dead trainer's start time (an hour before the live process's)."""
    pid = unrelated_process.pid
    dead_trainer_started = runs.process_create_time(pid) - 3600.0
    run_dir = runs.new_run_dir("recycled")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    runs.write_status(run_dir, "running", pid=pid, pid_create_time=dead_trainer_started)
    runs.write_json_atomic(run_dir / run_files.LAUNCHER, {"pid": pid, "create_time": dead_trainer_started})
    return run_dir


def test_a_recycled_pid_reads_as_a_dead_trainer(recycled_run, unrelated_process):
    status = runs.read_status(recycled_run)
    assert status["state"] == "failed" and status["crashed"], status
    assert not runs.launcher_alive(recycled_run)
    # The same pid with its true start time is alive: the check compares start times, not just pids.
    runs.write_status(recycled_run, "running", pid=unrelated_process.pid,
                      pid_create_time=runs.process_create_time(unrelated_process.pid))
    assert runs.read_status(recycled_run)["state"] == "running"


def test_a_recycled_pid_does_not_refuse_start(recycled_run, monkeypatch):
    launched = []
    monkeypatch.setattr(runner, "_launch", lambda run_dir, cmd, nproc=1, **kw: launched.append(run_dir))
    assert runner.start("train", cfg=RunConfig(), label="next") == launched[0]


def test_stop_never_signals_the_process_that_got_a_recycled_pid(recycled_run, unrelated_process):
    assert runner.stop("train", recycled_run, grace_s=1) is False
    assert unrelated_process.poll() is None  # not signalled: still running


def test_a_launch_that_fails_leaves_nothing_that_blocks_the_next_start(own_runs, monkeypatch):
    """Popen raising (no such interpreter, too many processes, a full disk) after the run folder was made: the
    user hears why, no 'queued' run is left behind to refuse every Start, and the next Start goes."""
    import shutil

    real_popen = subprocess.Popen

    def popen_fails(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(runner.subprocess, "Popen", popen_fails)
    with pytest.raises(runner.RunnerError, match=r"^Could not start the trainer: \[Errno 24\] Too many open files"):
        runner.start("train", cfg=RunConfig(), label="first")
    assert runner.busy_run() is None
    assert [p for p in own_runs.iterdir() if p.is_dir()] == []  # no half-made run folder

    # A resume that fails to launch: the run stays, and reads as failed with the reason.
    stopped = runs.new_run_dir("stopped")
    runs.write_json_atomic(stopped / "config.json", RunConfig().to_dict())
    runs.write_status(stopped, "stopped")
    with pytest.raises(runner.RunnerError, match="Could not start the trainer"):
        runner.start("train", stopped, resume=True)
    status = runs.read_status(stopped)
    assert status["state"] == "failed", status
    assert status["error"] == "Could not start the trainer: [Errno 24] Too many open files"
    assert runner.busy_run() is None

    monkeypatch.setattr(runner.subprocess, "Popen", real_popen)
    stand_in(monkeypatch, "train", lambda run_dir, **kw: [sys.executable, "-c", "pass"])
    run_dir = runner.start("train", cfg=RunConfig(), label="second")
    assert run_dir.is_dir() and runs.launcher(run_dir)["pid"] > 0
    shutil.rmtree(stopped)


def test_two_starts_at_once_start_one_run(own_runs, monkeypatch):
    """The start lock: two Starts inside the check-then-create window together (creating a folder is slowed
    down, as on a busy disk) start one run; the other hears which run is training."""
    import threading

    real_new_run_dir = runs.new_run_dir

    def slow_new_run_dir(label="run"):
        time.sleep(0.3)
        return real_new_run_dir(label)

    monkeypatch.setattr(runs, "new_run_dir", slow_new_run_dir)
    stand_in(monkeypatch, "train", lambda run_dir, **kw: fake_trainer(run_dir))
    barrier = threading.Barrier(2)
    results: list = []

    def press_start(i: int):
        barrier.wait()
        try:
            results.append(runner.start("train", cfg=RunConfig(), label=f"race-{i}"))
        except runner.RunnerError as exc:
            results.append(exc)

    threads = [threading.Thread(target=press_start, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    started = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, Exception)]
    try:
        assert len(started) == 1 and len(refused) == 1, results
        assert "one training runs at a time" in str(refused[0]) and started[0].name in str(refused[0])
        assert [p for p in own_runs.iterdir() if p.is_dir()] == started
    finally:
        for run_dir in started:
            runner.stop("train", run_dir, grace_s=15)


def _hold_start_lock_elsewhere(seconds: float, then: str = "") -> subprocess.Popen:
    """Another process (a second app, a script) holding the start lock for `seconds`, then running the line
    `then` (pipeline.run_folder.runs is imported) before it lets go; returns once it holds the lock."""
    code = ("import sys, time\n"
            "from pipeline import runner; from pipeline.run_folder import runs\n"
            "with runner.start_lock():\n"
            "    print('locked', flush=True)\n"
            f"    time.sleep({seconds})\n"
            f"    {then or 'pass'}\n")
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=runner.ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


@pytest.mark.parametrize("job", ["start", "resume", "evaluate"])
def test_start_resume_and_evaluate_wait_for_the_start_lock_of_another_process(own_runs, monkeypatch, job):
    """The start lock holds across processes, not only threads (an flock on runs/.start.lock, not a lock in
    memory), and every launch takes it: while another process holds it, Start, Resume and Evaluate wait."""
    stand_in(monkeypatch, "train", lambda run_dir, **kw: [sys.executable, "-c", "pass"])
    stand_in(monkeypatch, "eval", lambda run_dir, limit=0: [sys.executable, "-c", "pass"])
    run_dir = runs.new_run_dir("earlier")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    runs.write_status(run_dir, "stopped")
    (run_dir / "merged").mkdir()
    (run_dir / "merged" / "config.json").write_text("{}")
    launch = {"start": lambda: runner.start("train", cfg=RunConfig(), label="waiting"), "resume": lambda: runner.start("train", run_dir, resume=True),
              "evaluate": lambda: runner.start("eval", run_dir)}[job]

    holder = _hold_start_lock_elsewhere(1.5)
    began = time.monotonic()
    launch()
    waited = time.monotonic() - began
    holder.wait(10)
    assert waited >= 1.0, f"{job} went ahead after {waited:.2f} s while another process held the start lock"


def test_a_live_trainer_stays_alive_when_the_system_clock_steps(own_runs, unrelated_process, monkeypatch):
    """The wall clock jumps 2 s (NTP, a VM resumed): psutil's create time, boot time + ticks since boot, moves
    with it. The trainer's start is compared in ticks since boot, which no clock step moves."""
    import psutil

    from pipeline.run_folder import jobstate

    pid = unrelated_process.pid
    run_dir = runs.new_run_dir("clock")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    runs.write_status(run_dir, "running", pid=pid, **runs.process_start(pid, "pid_"))
    runs.write_json_atomic(run_dir / run_files.LAUNCHER, {"pid": pid, **runs.process_start(pid)})
    assert runs.read_status(run_dir)["state"] == "running"

    real_create_time, real_time = psutil.Process.create_time, time.time
    monkeypatch.setattr(psutil.Process, "create_time", lambda self, *a, **k: real_create_time(self, *a, **k) + 2.0)
    monkeypatch.setattr(jobstate.time, "time", lambda: real_time() + 2.0)
    assert runs.read_status(run_dir)["state"] == "running"
    assert runs.launcher_alive(run_dir)
    with pytest.raises(runner.RunnerError, match="still training"):
        runner.start("train", run_dir, resume=True)
    with pytest.raises(ValueError, match="still training"):
        runs.delete_run(run_dir)
    # A record from before (a wall-clock create time only) still reads as it did: alive without a clock step.
    monkeypatch.setattr(psutil.Process, "create_time", real_create_time)
    runs.write_status(run_dir, "running", pid=pid, pid_create_time=runs.process_create_time(pid))
    assert runs.read_status(run_dir)["state"] == "running"


def test_a_relaunch_never_reads_as_a_crash(own_runs, monkeypatch):
    """Resume of a stopped run whose last launcher has exited: from the new "queued" on, every read of the
    run sees a launch in progress, never the old, dead launcher next to the new state."""
    run_dir = runs.new_run_dir("relaunch")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    old = subprocess.Popen([sys.executable, "-c", "pass"])
    old.wait()
    runs.write_json_atomic(run_dir / run_files.LAUNCHER, {"pid": old.pid, **runs.process_start(old.pid)})
    runs.write_status(run_dir, "stopped")
    seen = []
    real_write_state = runner.jobstate.write_state

    def write_and_look(*args, **kwargs):  # what a reader sees right after the launcher writes "queued"
        written = real_write_state(*args, **kwargs)
        seen.append(runs.read_status(run_dir))
        return written

    monkeypatch.setattr(runner.jobstate, "write_state", write_and_look)
    stand_in(monkeypatch, "train", lambda run_dir, **kw: [sys.executable, "-c", "import time; time.sleep(2)"])
    runner.start("train", run_dir, resume=True)
    assert [s["state"] for s in seen] == ["queued"], seen
    assert runs.read_status(run_dir)["state"] == "queued"  # with the new launcher record
    assert runs.launcher_alive(run_dir)


def test_delete_waits_for_the_start_lock_and_then_sees_the_relaunch(own_runs):
    """A Resume in progress elsewhere holds the start lock and writes "queued" before it lets go: a Delete
    pressed meanwhile waits for it, then refuses, instead of removing the folder under the new trainer."""
    run_dir = runs.new_run_dir("deleted-while-resumed")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    runs.write_status(run_dir, "stopped")
    holder = _hold_start_lock_elsewhere(0.5, then=f"runs.write_status({str(run_dir)!r}, 'queued', queued_at=time.time())")
    try:
        with pytest.raises(ValueError, match="still training"):
            runs.delete_run(run_dir)
    finally:
        holder.wait(10)
    assert (run_dir / "config.json").exists()
