"""Probes in a real run: the trainer answers held-out prompts at step 0 (the base model), every
probe_every steps and at the end, and writes evals.jsonl."""

import json

import pytest

from pipeline.run_folder import runs

from .helpers import DEFAULT_REWARDS

pytestmark = pytest.mark.slow


def test_a_two_step_run_probes_steps_0_1_and_2(shared_run, bundled_model_dir):
    """The shared run probes every step on 2 prompts: step 0 and 1 in its first process, step 2 after the
    resume (which does not probe step 0 again)."""
    run_dir = shared_run.path

    evals = runs.read_evals(run_dir)
    assert [e["step"] for e in evals] == [0, 1, 2]
    held_out = json.loads((run_dir / "eval_prompts.json").read_text())[:2]
    config = json.loads((run_dir / "config.json").read_text())
    weights = {r["name"]: r["weight"] for r in config["rewards"]}
    for e in evals:
        assert set(e["rewards"]) == DEFAULT_REWARDS
        assert len(e["samples"]) == 2 and e["seconds"] > 0
        totals = [s["total"] for s in e["samples"]]
        assert e["reward"] == pytest.approx(sum(totals) / 2)
        for sample, row in zip(e["samples"], held_out):
            assert sample["prompt"] == row["prompt"][-1]["content"]  # the same held-out prompts every time
            assert sample["completion"].strip()
            assert sample["total"] == pytest.approx(sum(weights[k] * v for k, v in sample["rewards"].items()))
        assert e["task"]["kind"] == "summary" and len(e["task"]["per_prompt"]) == 2

    # Step 0 is the base model: the same greedy answers as the untouched model gives.
    from pipeline.training.generate import generate_batch
    from pipeline.models.loading import load_model

    base, tok = load_model(str(bundled_model_dir))
    expected = generate_batch(base, tok, [r["prompt"] for r in held_out], max_new_tokens=config["max_completion_length"])
    assert [s["completion"] for s in evals[0]["samples"]] == expected
