"""Steering a real run (pipeline/setup/steering.py, pipeline/training/steer_trainer.py): the trainer uses a new
reward weight, learning rate and temperature from the step after the change and the old ones before it; a refused
value is recorded with Start's message; a run killed with -9 and resumed keeps the steered values and applies the
change asked for while it was down. Two trainer starts, three steps in all."""

import json
import os
import subprocess
import sys

import pytest

from pipeline.run_folder import run_files, runs
from pipeline.setup import steering as steer
from pipeline.setup.config import RunConfig

from . import forked
from .helpers import ROOT, make_run, said, status

pytestmark = pytest.mark.slow


def run_with_spy(run_dir, spy_log, *extra, **env):
    return forked.run([sys.executable, "-m", "tests.integration.steer_spy", "--run-dir", str(run_dir), *extra],
                      timeout=900, own_env={"STEER_SPY_LOG": str(spy_log), **env})


def used(spy_log, step):
    """What the trainer used at `step`, per the spy."""
    seen = {}
    for row in runs.read_jsonl(spy_log):
        if row["step"] == step:
            seen.update({k: v for k, v in row.items() if k != "step"})
    return seen


def test_steered_values_apply_from_the_next_step_and_survive_a_kill_and_resume(tiny_model_dir, tmp_path):
    run_dir = make_run("steer", model=str(tiny_model_dir), max_steps=3, save_steps=2, lr_scheduler="constant",
                       learning_rate=3e-4, temperature=1.0, beta=0.04)
    spy_log = tmp_path / "spy.jsonl"
    names = [spec.name for spec in RunConfig().rewards]  # length_target, token_diversity, post_similarity
    # After step 1 a user asks for a temperature Start refuses, then for three changes at once. Right after
    # checkpoint-2 is saved they ask for a new temperature and KL off, and the trainer is killed (-9).
    asked = [{"temperature": 0}, {"learning_rate": 1e-4, "temperature": 0.7, "weights": {"length_target": 0}}]
    proc = run_with_spy(run_dir, spy_log, STEER_AT="1", STEER_REQUESTS=json.dumps(asked), STEER_KILL_AT="2",
                        STEER_PENDING=json.dumps({"temperature": 0.5, "beta": 0.0}))
    assert proc.returncode == -9, said(proc.stderr)

    # Step 1 trained with the config's values; step 2, the one after the change, with the new ones.
    before, after = used(spy_log, 1), used(spy_log, 2)
    assert before["weights"] == [1.0, 1.0, 2.0] and after["weights"] == [0.0, 1.0, 2.0]
    assert before["lr"] == pytest.approx(3e-4) and after["lr"] == pytest.approx(1e-4)
    for key in ("sampling_temperature", "logps_temperature", "fused_head_temperature"):
        assert (before[key], after[key]) == (1.0, 0.7), key
    assert before["beta"] == after["beta"] == 0.04

    # The record: the refusal in Start's words, then one line per setting changed, at step 2.
    record = steer.read_record(run_dir)
    start_says = RunConfig(temperature=0).problems()
    assert record[0]["refused"] == " ".join(start_says) and record[0]["step"] == 2
    assert [(r["step"], r["setting"], r["old"], r["new"]) for r in record[1:]] == [
        (2, "learning_rate", 3e-4, 1e-4), (2, "temperature", 1.0, 0.7), (2, "weight/length_target", 1.0, 0.0)]
    # The metrics lines and the group inspector's records carry the values each step trained with.
    metrics = {row["step"]: row for row in runs.read_metrics(run_dir)}
    assert (metrics[1]["temperature"], metrics[2]["temperature"]) == (1.0, 0.7)
    assert metrics[1]["learning_rate"] == pytest.approx(3e-4) and metrics[2]["learning_rate"] == pytest.approx(1e-4)
    assert metrics[1]["reward_weights"]["length_target"] == 1.0 and metrics[2]["reward_weights"]["length_target"] == 0
    assert {g["step"]: g["weights"]["length_target"] for g in runs.read_groups(run_dir)} == {1: 1.0, 2: 0.0}
    # The request made while the run was down waits for the resume.
    assert [r["changes"] for r in steer.pending_requests(run_dir)] == [{"temperature": 0.5, "beta": 0.0}]

    # Resume: the recorded changes hold from the first step, and the waiting request is applied there.
    proc = run_with_spy(run_dir, spy_log, "--resume")
    assert proc.returncode == 0, said(proc.stderr)
    assert status(run_dir)["state"] == "finished"
    resumed = used(spy_log, 3)
    assert resumed["weights"] == [0.0, 1.0, 2.0] and resumed["lr"] == pytest.approx(1e-4)
    assert resumed["sampling_temperature"] == resumed["logps_temperature"] == resumed["fused_head_temperature"] == 0.5
    assert resumed["beta"] == 0.0
    assert [(r["step"], r["setting"], r["new"]) for r in steer.read_record(run_dir)[4:]] == [
        (3, "temperature", 0.5), (3, "beta", 0.0)]
    row = runs.read_metrics(run_dir)[-1]
    assert (row["step"], row["temperature"], row["beta"], row["kl"]) == (3, 0.5, 0.0, None)
    force = steer.settings_in_force(run_dir)
    assert (force["learning_rate"], force["temperature"], force["beta"]) == (1e-4, 0.5, 0.0)
    assert force["weights"] == dict(zip(names, [0.0, 1.0, 2.0]))


def test_every_torchrun_rank_applies_rank_0s_change_at_the_same_step(tmp_path):
    """Only rank 0 reads the requests; the other ranks get the same changes from it (a rank that trained with
    other values would take a different step, or wait in a collective its peers never join)."""
    for rank in (0, 1):
        run_dir = tmp_path / f"rank{rank}"
        run_dir.mkdir()
        runs.write_json_atomic(run_dir / run_files.CONFIG, RunConfig().to_dict())
    steer.request(tmp_path / "rank0", {"temperature": 0.6, "beta": 0.0, "learning_rate": 1e-4,
                                       "weights": {"token_diversity": 0}})
    # Written by hand: a request that changes nothing is answered too, so it no longer reads as waiting.
    runs.append_jsonl(tmp_path / "rank0" / run_files.STEER_REQUESTS, {"changes": {"temperature": 0.6}})
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "tests.integration.steer_ranks", str(tmp_path)],
                          cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, said(proc.stderr)
    seen = [json.loads((tmp_path / f"seen-{rank}.json").read_text()) for rank in (0, 1)]
    assert seen[0] == seen[1]
    assert seen[1]["weights"] == seen[1]["metrics_weights"] == [1.0, 0.0, 2.0]
    assert (seen[1]["temperature"], seen[1]["sampling_temperature"], seen[1]["beta"]) == (0.6, 0.6, 0.0)
    assert seen[1]["lr"] == pytest.approx(1e-4)
    record = steer.read_record(tmp_path / "rank0")
    assert [r["step"] for r in record] == [1] * 5 and record[-1]["unchanged"] is True
    assert not steer.pending_requests(tmp_path / "rank0")
    assert not steer.read_record(tmp_path / "rank1")  # rank 0 is the record's only writer
