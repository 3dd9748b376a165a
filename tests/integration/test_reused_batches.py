"""A run that trains more than once on each sampled batch (iterations per batch above 1) still has a metrics
line for every optimizer step: the step that samples logs the batch's rewards, and the step that trains on it
again logs its own loss, KL and clip ratio (the one that moves once a batch is reused). Before, such steps wrote
no line, so the charts drew every other step, the clip ratio read 0 throughout and the last step was missing."""

import math

import pytest

from pipeline.run_folder import runs
from pipeline.setup.config import RewardSpec

from .helpers import make_run, run, said, status

pytestmark = pytest.mark.slow


def test_every_step_of_a_run_that_reuses_its_batches_has_a_metrics_line(tiny_model_dir):
    run_dir = make_run("reused-batches", model=str(tiny_model_dir), num_iterations=2, max_steps=4,
                       rewards=[RewardSpec("length_target", 1.0, {}), RewardSpec("token_diversity", 1.0, {})])
    proc = run(run_dir)
    assert proc.returncode == 0, said(proc.stderr)
    assert status(run_dir)["state"] == "finished"

    rows = runs.read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    sampled, reused = [rows[0], rows[2]], [rows[1], rows[3]]
    assert [g["step"] for g in runs.read_groups(run_dir)] == [1, 3]  # a batch is sampled every second step
    for row in sampled:
        assert math.isfinite(row["reward"]) and set(row["rewards"]) == {"length_target", "token_diversity"}
    for row in reused:
        # The batch's own figures belong to the step that sampled it...
        assert row["reward"] is None and row["rewards"] == {} and row["completion_length"] is None
        # ...and this step's training figures are its own, with the settings it trained with.
        for key in ("loss", "kl", "clip_ratio", "entropy", "learning_rate", "temperature", "beta"):
            assert isinstance(row[key], (int, float)) and math.isfinite(row[key]), (key, row)
    # The runs list and the run's status give the last sampled batch's reward, not the null of a reused step.
    assert status(run_dir)["final_reward"] == pytest.approx(rows[2]["reward"])
    assert runs.run_summary(run_dir)["final_reward"] == pytest.approx(rows[2]["reward"])
    runs.delete_run(run_dir)  # a finished run would become other tabs' default model
