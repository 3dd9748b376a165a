"""The same entry point under torchrun with two CPU ranks (gloo): the path to several GPUs."""

import os
import subprocess
import sys

import pytest

from pipeline import runs

from .helpers import ROOT, make_run, status

pytestmark = pytest.mark.slow


def test_two_cpu_ranks_train_one_step(bundled_model_dir):
    run_dir = make_run("torchrun", max_steps=1, max_completion_length=16)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
           "-m", "pipeline.train", "--run-dir", str(run_dir)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert status(run_dir)["state"] == "finished"
    assert "world size 2" in (run_dir / "train.log").read_text()
    # Each rank generated one group of 4; rank 0 gathered both, so the step shows two prompts.
    [step] = runs.read_groups(run_dir)
    assert len(step["groups"]) == 2
    assert [r["step"] for r in runs.read_metrics(run_dir)] == [1]


def test_stop_from_the_runner_reaches_every_rank_and_the_next_run_starts_at_once(bundled_model_dir):
    """Stop signals torchrun, which passes it to both ranks (each in its own session); they agree on the
    step, save, merge and exit, and a new run can start straight away."""
    import psutil

    from pipeline import runner
    from pipeline.config import RunConfig

    from .helpers import QUICK, wait_for

    cfg = RunConfig(**{**QUICK, "max_steps": 50, "max_completion_length": 16, "merge_at_end": True})
    run_dir = runner.start_run(cfg, label="torchrun-stop", nproc=2)
    wait_for(lambda: (runs.read_metrics(run_dir) or [{}])[-1].get("step", 0) >= 1, 900, "a first step")
    launcher = psutil.Process(runs.launcher(run_dir)["pid"])
    procs = [launcher, *launcher.children(recursive=True)]
    ranks = [p for p in procs if "pipeline.train" in " ".join(p.cmdline()) and p is not launcher]
    assert len(ranks) >= 2, [p.cmdline() for p in procs]
    assert len({os.getsid(p.pid) for p in ranks}) == 2  # each rank in its own session, as torch 2.13 starts them

    assert runner.stop_run(run_dir)
    gone, alive = psutil.wait_procs(procs, timeout=600)
    # The launcher got the Stop and passed it on (it logs the signal), not rank 0 alone.
    assert "SIGTERM" in (run_dir / "stdout.log").read_text(errors="replace")
    assert not alive, [p.cmdline() for p in alive]  # every process exited: none left waiting in a collective
    st = status(run_dir)
    assert st["state"] == "stopped", st
    ckpt = runs.last_complete_checkpoint(run_dir)
    assert ckpt is not None and int(ckpt.name.split("-")[1]) == st["step"]
    assert (run_dir / "adapter" / "adapter_config.json").exists()
    assert (run_dir / "merged" / "config.json").exists()
    # Both ranks stopped on the same step: no rank logged past it.
    assert max(r["step"] for r in runs.read_metrics(run_dir)) == st["step"]

    nxt = runner.start_run(RunConfig(**{**QUICK, "max_steps": 1}), label="after-stop")
    assert runs.read_status(nxt)["state"] in runs.ACTIVE_STATES
    runner.stop_run(nxt, grace_s=300)


def test_a_failure_on_rank_1_reaches_the_status_and_the_log_and_stop_ends_the_rest(bundled_model_dir):
    """Rank 1's reward raises; rank 0 is left waiting for it in a collective. The run shows rank 1's own
    error (not 'crashed'), the log tail has rank 1's message, and Stop ends the processes that linger."""
    import psutil

    from pipeline import runner
    from pipeline.config import RewardSpec, RunConfig

    from .helpers import QUICK, wait_for

    code = ("import os\n"
            "def reward(completions, **kwargs):\n"
            "    if os.environ.get('RANK') == '1':\n"
            "        raise ValueError('only rank 1 cannot score this')\n"
            "    return [0.0 for _ in completions]\n")
    cfg = RunConfig(**{**QUICK, "max_steps": 3, "max_completion_length": 8, "probe_every": 0,
                       "rewards": [RewardSpec("custom_python", 1.0, {"code": code})]})
    run_dir = runner.start_run(cfg, label="rank1-fails", nproc=2, allow_custom_rewards=True)
    st = wait_for(lambda: (s := runs.read_status(run_dir))["state"] == "failed" and s, 900, "the failed status")
    assert st["error"].startswith("Rank 1: ") and "only rank 1 cannot score this" in st["error"], st
    assert not st.get("crashed")
    wait_for(lambda: "[rank 1]" in runs.log_tail(run_dir, 200), 60, "rank 1's lines in train.log")
    assert "only rank 1 cannot score this" in runs.log_tail(run_dir, 200)

    launcher = psutil.Process(runs.launcher(run_dir)["pid"])
    procs = [launcher, *launcher.children(recursive=True)]
    if runs.launcher_alive(run_dir):  # rank 0 still waiting for rank 1: Stop ends it
        assert runner.stop_run(run_dir)
    gone, alive = psutil.wait_procs(procs, timeout=60)
    assert not alive, [p.cmdline() for p in alive]
    assert runner.busy_run() is None


def _stop_flag_worker(rank: int, port: int, out):
    import threading

    import torch.distributed as dist

    from pipeline.train import agree_to_stop

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        event = threading.Event()
        first = agree_to_stop(event)  # nobody asked: both go on
        if rank == 0:
            event.set()  # only rank 0 got the signal
        out.put((rank, first, agree_to_stop(event), event.is_set()))
    finally:
        dist.destroy_process_group()


def test_a_stop_seen_by_one_rank_stops_every_rank_at_the_same_step():
    """The stop flag is all-reduced: a signal that reached rank 0 alone still stops rank 1 on that step."""
    import torch.multiprocessing as mp

    from .helpers import free_port

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_stop_flag_worker, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert results == [(0, False, True, True), (1, False, True, True)]
