"""The learnability scan on the bundled model, and a run that keeps only the prompts the scan found signal on."""

import json
import math
import time

import pytest

from pipeline.run_folder import runs
from pipeline.rewards.advantages import group_stats
from pipeline.setup.config import RewardSpec, RunConfig
from pipeline.setup.data import load_dataset_split
from pipeline.training.probes import prompt_text

from .helpers import QUICK

pytestmark = pytest.mark.slow

# The cheap rewards (no embedder to load): a continuous length score and a right-or-wrong-like diversity one.
CHEAP = [RewardSpec("length_target", 1.0, {"target": 20}), RewardSpec("token_diversity", 1.0, {})]


def test_scan_samples_and_scores_as_the_trainer_would_and_its_numbers_add_up(bundled_model_dir):
    """Three prompts, G=3, short completions: every number the scan shows follows from the completions it
    sampled, scored again here with the same rewards."""
    from pipeline.training.preflight import learnability_scan
    from pipeline.rewards import build_rewards, score

    cfg = RunConfig(num_generations=3, batch_size=6, max_completion_length=10, rewards=CHEAP)
    stages = []
    report = learnability_scan(cfg, prompts=3, progress=lambda share, desc: stages.append(desc))
    train, _ = load_dataset_split(cfg.dataset, cfg.seed)
    # The first training prompts, in the run's order; G completions each.
    assert [p.prompt for p in report.prompts] == [prompt_text(r["prompt"]) for r in train[:3]]
    assert report.group_size == 3 and all(len(p.completions) == 3 == len(p.totals) for p in report.prompts)
    assert any(s.startswith("Sampling 3 completions for each of 3 prompts") for s in stages)
    funcs, weights = build_rewards(cfg.rewards)
    for p, row in zip(report.prompts, train):
        again = score(funcs, weights, [[{"role": "assistant", "content": c}] for c in p.completions],
                      prompts=[row["prompt"]] * 3)
        assert p.totals == pytest.approx(again["total"])
        assert p.rewards == {k: pytest.approx(v) for k, v in again["per_reward"].items()}
        mean, std = group_stats(again["total"])
        assert math.isclose(p.std, std, abs_tol=1e-9) and (p.low, p.high) == (min(p.totals), max(p.totals))
        assert p.signal == (max(p.totals) - min(p.totals) > 1e-8)
    assert report.kept == [p.prompt for p in report.prompts if p.signal]
    assert report.no_signal_share == sum(not p.signal for p in report.prompts) / 3
    # The scan's seed makes it repeatable.
    assert [p.completions for p in learnability_scan(cfg, prompts=3).prompts] == [p.completions for p in report.prompts]


def test_a_run_that_keeps_the_scanned_prompts_records_them_and_trains_on_exactly_those(tiny_model_dir):
    """Through the Train tab's Start handler: the kept prompts go into config.json, and every group the trainer
    samples is one of them (two prompts, one step; the model's answers don't matter, so a two-layer one)."""
    from ui.form import config_to_form
    from ui.train_form import start_training

    cfg = RunConfig(**{**QUICK, "num_generations": 2, "batch_size": 4, "max_completion_length": 8, "max_steps": 1,
                       "model": str(tiny_model_dir)},
                    rewards=CHEAP, keep_signal_prompts=True)
    train, _ = load_dataset_split(cfg.dataset, cfg.seed)
    kept = [prompt_text(train[i]["prompt"]) for i in (5, 11)]  # two that the first steps would not reach
    form = config_to_form(cfg)
    form["signal_prompts"] = kept  # what the scan leaves in the page
    picked, message = start_training(False, 1, **form)
    assert message.startswith("▶ Started"), message
    run_dir = runs.resolve_run(picked["value"] if isinstance(picked, dict) else picked.value)
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["keep_signal_prompts"] is True and saved["signal_prompts"] == kept
    assert saved["model"] == str(tiny_model_dir)
    deadline = time.time() + 600
    while runs.read_status(run_dir).get("state") not in ("finished", "failed", "stopped"):
        assert time.time() < deadline, "the run did not end in 10 minutes"
        time.sleep(1)
    assert runs.read_status(run_dir)["state"] == "finished", (run_dir / "train.log").read_text()[-2000:]
    trained = [g["prompt"] for record in runs.read_groups(run_dir) for g in record["groups"]]
    assert len(trained) == 2  # one step of two prompts
    assert all(any(text in prompt for text in kept) for prompt in trained), trained
    assert all(any(text in prompt for prompt in trained) for text in kept)
    assert "Keeping the 2 prompts the learnability scan found signal on" in (run_dir / "train.log").read_text()
