"""Checkpoints on a real trainer: keep_checkpoints removes old ones but never the newest complete ones, a kill at
the worst moment (after transformers' rotation, before the new checkpoint is marked complete) resumes, a resume
continues the trainer's own state, and Chat refuses a checkpoint that was never marked complete."""

import json
import shutil
import sys

import pytest

from pipeline.run_folder import run_files, runs

from . import forked
from .helpers import make_run, run, said, status, tiny_settings

pytestmark = pytest.mark.slow


def run_with_spy(run_dir, rotations, *extra, kill_at=None):
    env = {"ROTATION_LOG": str(rotations)}
    if kill_at is not None:
        env["ROTATION_KILL_AT"] = str(kill_at)
    return forked.run([sys.executable, "-m", "tests.integration.rotation_spy", "--run-dir", str(run_dir), *extra],
                      timeout=900, own_env=env)


def steps_on_disk(run_dir, complete_only=True):
    return [runs.checkpoint_step(p) for p in runs.checkpoints(run_dir, complete_only=complete_only)]


def test_keep_checkpoints_keeps_the_newest_complete_ones_and_a_kill_after_rotation_resumes(tiny_model_dir, tmp_path):
    run_dir = make_run("keep", **tiny_settings(tiny_model_dir), max_steps=4, save_steps=1, keep_checkpoints=2)
    rotations = tmp_path / "rotations.jsonl"

    proc = run_with_spy(run_dir, rotations)
    assert proc.returncode == 0, said(proc.stderr)
    assert status(run_dir)["state"] == "finished"
    # Exactly the two newest are left, both complete.
    assert steps_on_disk(run_dir, complete_only=False) == steps_on_disk(run_dir) == [3, 4]
    # While each new checkpoint was still unmarked, the two before it were complete on disk: rotation
    # never took one of the newest complete checkpoints.
    seen = runs.read_jsonl(rotations)
    assert seen == [{"saved": n, "complete": list(range(max(1, n - 2), n))} for n in (1, 2, 3, 4)], seen

    # SIGKILL right after transformers rotated at save 5, before checkpoint-5 got its marker.
    proc = run_with_spy(run_dir, rotations, "--resume", "--steps", "5", kill_at=5)
    assert proc.returncode == -9, said(proc.stderr)
    assert status(run_dir)["state"] == "failed"
    assert steps_on_disk(run_dir) == [3, 4] and steps_on_disk(run_dir, complete_only=False) == [3, 4, 5]

    # Resume drops the unmarked checkpoint-5 and continues from checkpoint-4.
    proc = run(run_dir, "--resume", "--steps", "6")
    assert proc.returncode == 0, said(proc.stderr)
    assert status(run_dir)["state"] == "finished"
    assert "Resuming from checkpoint-4" in (run_dir / "train.log").read_text()
    assert [r["step"] for r in runs.read_metrics(run_dir)][-1] == 6
    assert steps_on_disk(run_dir, complete_only=False) == steps_on_disk(run_dir) == [5, 6]


@pytest.fixture(scope="module")
def resumed_run(shared_run):
    """One step with a checkpoint, then a resume to step 2 with --steps (the session's shared run, see
    conftest.py). Returns the run folder, config.json's bytes at creation, and checkpoint-1's
    trainer_state.json as the first process left it."""
    run_dir = shared_run.path
    assert (run_dir / "config.json").read_bytes() == shared_run.created_config  # a start does not rewrite it
    return run_dir, shared_run.created_config, shared_run.first_state


def test_a_resume_with_steps_keeps_config_json_and_records_the_override(resumed_run):
    run_dir, written, _ = resumed_run
    # config.json still holds what the run was created with; the override is in the run's history.
    assert (run_dir / "config.json").read_bytes() == written
    assert [(r["resume"], r["from_step"], r["overrides"]) for r in runs.read_launches(run_dir)] == [
        (False, 0, {}), (True, 1, {"max_steps": 2})]
    st = status(run_dir)
    assert st["state"] == "finished" and st["max_steps"] == 2
    assert [r["step"] for r in runs.read_metrics(run_dir)] == [1, 2]
    assert runs.run_summary(run_dir)["max_steps"] == 2  # the runs list shows the steps it trained to


def test_a_resume_continues_the_trainers_own_state_from_the_checkpoint(resumed_run):
    """The resumed trainer started at checkpoint-1's state, not at step 0: its history carries the first
    process's step-1 entry as that process logged it (TRL's step_time is wall-clock, so a step 1 trained
    again would differ), and it trained step 2 only (metrics.jsonl holds each step once, in order)."""
    run_dir, _, first_state = resumed_run
    assert first_state["global_step"] == 1
    final = json.loads((run_dir / "checkpoint-2" / "trainer_state.json").read_text())
    assert final["global_step"] == 2
    steps = [entry["step"] for entry in final["log_history"]]
    assert steps == [1, 2], final["log_history"]
    assert "step_time" in first_state["log_history"][0]
    assert final["log_history"][0] == first_state["log_history"][0]
    assert [row["step"] for row in runs.read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]


def test_chat_refuses_a_real_checkpoint_that_was_never_marked_complete(resumed_run):
    """A loadable checkpoint folder (adapter weights and all) whose save never reached its completion marker,
    as a kill during the save leaves it: Chat refuses it by name instead of loading half-written weights."""
    from pipeline.training.generate import ChatModelError, ModelCache

    run_dir, _, _ = resumed_run
    unmarked = run_dir / "checkpoint-3"
    shutil.copytree(run_dir / "checkpoint-2", unmarked)
    (unmarked / run_files.CHECKPOINT_MARKER).unlink()
    assert (unmarked / "adapter_model.safetensors").stat().st_size > 0
    try:
        with pytest.raises(ChatModelError, match=rf"^Checkpoint 3 of '{run_dir.name}' is missing or incomplete\.$"):
            ModelCache().get(f"ckpt:{run_dir.name}:3")
    finally:
        shutil.rmtree(unmarked)
