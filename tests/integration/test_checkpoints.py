"""keep_checkpoints on a real trainer: old checkpoints go, the newest complete ones never do, and a kill at
the worst moment (after transformers' rotation, before the new checkpoint is marked complete) resumes."""

import os
import subprocess
import sys

import pytest

from pipeline import runs

from .helpers import ROOT, make_run, run, status

pytestmark = pytest.mark.slow


def run_with_spy(run_dir, rotations, *extra, kill_at=None):
    env = {**os.environ, "ROTATION_LOG": str(rotations)}
    if kill_at is not None:
        env["ROTATION_KILL_AT"] = str(kill_at)
    return subprocess.run([sys.executable, "-m", "tests.integration.rotation_spy", "--run-dir", str(run_dir), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def steps_on_disk(run_dir, complete_only=True):
    return [runs.checkpoint_step(p) for p in runs.checkpoints(run_dir, complete_only=complete_only)]


def test_keep_checkpoints_keeps_the_newest_complete_ones_and_a_kill_after_rotation_resumes(bundled_model_dir,
                                                                                            tmp_path):
    run_dir = make_run("keep", max_steps=4, save_steps=1, keep_checkpoints=2)
    rotations = tmp_path / "rotations.jsonl"

    proc = run_with_spy(run_dir, rotations)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert status(run_dir)["state"] == "finished"
    # Exactly the two newest are left, both complete.
    assert steps_on_disk(run_dir, complete_only=False) == steps_on_disk(run_dir) == [3, 4]
    # While each new checkpoint was still unmarked, the two before it were complete on disk: rotation
    # never took one of the newest complete checkpoints.
    seen = runs.read_jsonl(rotations)
    assert seen == [{"saved": n, "complete": list(range(max(1, n - 2), n))} for n in (1, 2, 3, 4)], seen

    # SIGKILL right after transformers rotated at save 5, before checkpoint-5 got its marker.
    proc = run_with_spy(run_dir, rotations, "--resume", "--steps", "5", kill_at=5)
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert status(run_dir)["state"] == "failed"
    assert steps_on_disk(run_dir) == [3, 4] and steps_on_disk(run_dir, complete_only=False) == [3, 4, 5]

    # Resume drops the unmarked checkpoint-5 and continues from checkpoint-4.
    proc = run(run_dir, "--resume", "--steps", "6")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert status(run_dir)["state"] == "finished"
    assert "Resuming from checkpoint-4" in (run_dir / "train.log").read_text()
    assert [r["step"] for r in runs.read_metrics(run_dir)][-1] == 6
    assert steps_on_disk(run_dir, complete_only=False) == steps_on_disk(run_dir) == [5, 6]


def test_a_resume_with_steps_keeps_config_json_and_records_the_override(bundled_model_dir):
    run_dir = make_run("override", max_steps=1, save_steps=1)
    written = (run_dir / "config.json").read_bytes()
    proc = run(run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / "config.json").read_bytes() == written  # a start does not rewrite it

    proc = run(run_dir, "--resume", "--steps", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # config.json still holds what the run was created with; the override is in the run's history.
    assert (run_dir / "config.json").read_bytes() == written
    assert [(r["resume"], r["from_step"], r["overrides"]) for r in runs.read_launches(run_dir)] == [
        (False, 0, {}), (True, 1, {"max_steps": 2})]
    st = status(run_dir)
    assert st["state"] == "finished" and st["max_steps"] == 2
    assert [r["step"] for r in runs.read_metrics(run_dir)] == [1, 2]
    assert runs.run_summary(run_dir)["max_steps"] == 2  # the runs list shows the steps it trained to
