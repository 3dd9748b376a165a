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
    expected = generate_batch(base, tok, [r["prompt"] for r in held_out],
                              max_new_tokens=config["max_completion_length"])
    assert [s["completion"] for s in evals[0]["samples"]] == expected


def test_a_real_runs_probes_read_side_by_side_with_another_runs(shared_run, studio_data):
    """Held-out answers side by side reads what the trainer writes: the shared run beside a run that ended after its
    base probe (the shared run's own step 0 line) answer the same prompts, from one base answer, the shared run at
    step 2."""
    import re

    from ui.runs_panel import compare_answers

    evals = runs.read_evals(shared_run.path)
    early = runs.new_run_dir("answers-early")
    try:
        (early / "config.json").write_bytes(shared_run.created_config)
        runs.append_jsonl(early / "evals.jsonl", evals[0])
        picker, text = compare_answers([shared_run.path.name, early.name])
        assert len(picker.choices) == 2 and "runs)" not in picker.choices[0][0]  # both answered both prompts
        assert "Base model</b>, step 0" in text and text.count("<div class='gs-probe gs-answer-base'>") == 1
        steps = dict(re.findall(r"data-run='([^']+)'><div class='gs-probe-scores'><b>\d\. [^<]+</b>, step (\d+)", text))
        assert steps == {shared_run.path.name: "2", early.name: "0"}, steps
        assert "no probe since step 0" in text and "of 2</td></tr>" in text
    finally:
        import shutil

        shutil.rmtree(early)


def test_a_next_stage_starts_from_the_model_the_earlier_run_ended_with(shared_run):
    """Train a next stage: a run made (as Start makes it) from the shared run's merged model takes that model as its
    own start_model/, and that folder loads as the model the shared run ended with: greedily, it answers the held-out
    prompts as the shared run's last probe did (its first probe, the base model, answered otherwise). The trainer
    loads a model folder as every run of the two-layer model does; tests/unit/test_stages.py covers the rest."""
    import dataclasses
    import os
    import shutil

    from pipeline import runner
    from pipeline.models.loading import load_model
    from pipeline.run_folder import run_files
    from pipeline.setup.config import RunConfig
    from pipeline.training.generate import generate_batch

    source = shared_run.path
    cfg = dataclasses.replace(RunConfig.load(source / "config.json"), model=str(source / run_files.MERGED))
    stage = runner._new_run(cfg, label=runner.default_label(cfg))  # the folder Start makes, before its launch
    try:
        start = stage / run_files.STAGE_BASE
        assert stage.name.endswith("-shared-stage2") and RunConfig.load(stage / "config.json").model == str(start)
        assert runs.read_json(start / run_files.STAGE_FILE)["step"] == 2
        assert os.stat(start / "model.safetensors").st_ino == os.stat(source / "merged" / "model.safetensors").st_ino
        evals = runs.read_evals(source)
        held_out = json.loads((source / "eval_prompts.json").read_text())[:2]
        model, tok = load_model(str(start))
        answers = generate_batch(model, tok, [r["prompt"] for r in held_out], max_new_tokens=cfg.max_completion_length)
        assert answers == [s["completion"] for s in evals[-1]["samples"]]
        assert answers != [s["completion"] for s in evals[0]["samples"]]  # so the check tells the two models apart
    finally:
        shutil.rmtree(stage, ignore_errors=True)
