"""The same entry point under torchrun with two CPU ranks (gloo): the path to several GPUs."""

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
