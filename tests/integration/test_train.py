"""Real GRPO steps on the bundled model on CPU, through the CLI entry point."""

import json

import pytest

from pipeline.run_folder import runs
from pipeline.rewards.advantages import batch_advantages, group_stats, zero_std_share

from . import forked
from .helpers import DEFAULT_REWARDS, said, status

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(shared_run):
    return shared_run.path


def test_run_directory_layout(finished_run):
    for name in ("config.json", "status.json", "metrics.jsonl", "groups.jsonl", "train.log", "eval_prompts.json"):
        assert (finished_run / name).exists(), name
    assert (finished_run / "adapter" / "adapter_config.json").exists()
    assert (finished_run / "merged" / "config.json").exists()
    st = status(finished_run)
    assert st["state"] == "finished" and st["step"] == 2 and st["error"] is None


def test_metrics_lines_have_every_chart_series(finished_run):
    rows = runs.read_metrics(finished_run)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in ("reward", "reward_std", "kl", "loss", "entropy", "completion_length", "clipped_ratio",
                    "step_seconds", "elapsed", "eta_seconds"):
            assert row[key] is not None, key
        assert set(row["rewards"]) == DEFAULT_REWARDS
        assert row["step_seconds"] > row["gen_seconds"] > 0
    assert rows[-1]["eta_seconds"] == 0


def test_advantages_are_weighted_totals_centred_on_their_group_and_scaled_by_the_batch_std(finished_run):
    """The default scales by the batch's std (scale_rewards="batch"): the group inspector's record says so and
    carries that std, TRL's advantages match the pure formula, and the zero-std share is the share of flat
    groups (TRL's own figure would ask whether the whole batch is flat)."""
    steps = runs.read_groups(finished_run)
    rows = runs.read_metrics(finished_run)
    assert [s["step"] for s in steps] == [r["step"] for r in rows] == [1, 2]
    for step, row in zip(steps, rows):
        weights = step["weights"]
        assert step["scale_rewards"] == "batch" and len(step["groups"]) == 2
        items = [item for group in step["groups"] for item in group["completions"]]
        assert all(len(group["completions"]) == 4 and group["prompt"] for group in step["groups"])
        for item in items:
            expected = sum(v * weights[k] for k, v in item["rewards"].items())
            assert item["total"] == pytest.approx(expected, rel=1e-5)
        totals = [i["total"] for i in items]
        assert step["batch_std"] == pytest.approx(group_stats(totals)[1], rel=1e-5)
        assert [i["advantage"] for i in items] == pytest.approx(batch_advantages(totals, 4, scale="batch"),
                                                                rel=1e-3, abs=1e-3)
        assert row["frac_reward_zero_std"] == pytest.approx(zero_std_share(totals, 4))


def test_the_reward_bench_loads_a_logged_group_and_gives_the_advantages_the_run_gave(finished_run):
    """A group loaded into the Reward test bench, scored with the run's rewards and divided as the run did (by the
    std of its step's whole batch, rescored), gets the advantages the run logged; divided by its own std, others."""
    from ui.reward_bench import load_group, score_candidates

    logged = runs.read_groups(finished_run)[-1]["groups"][1]["completions"]
    rewards, prompt, candidates, answer, _, loaded, scale = load_group(finished_run.name, 0, 2)
    assert scale == "batch" and len(loaded["others"]) == 1
    table, summary = score_candidates(rewards, prompt, candidates, answer, "", scale, loaded=loaded)
    assert "of all 8 totals of the step's 2 groups" in summary, summary
    assert table["total"].tolist() == pytest.approx([c["total"] for c in logged], abs=0.01)
    assert table["advantage"].tolist() == pytest.approx([c["advantage"] for c in logged], abs=0.01)
    assert table["advantage in the run"].tolist() == pytest.approx([c["advantage"] for c in logged], abs=1e-4)
    own, _ = score_candidates(rewards, prompt, candidates, answer, "", "group", loaded=loaded)
    assert own["advantage"].tolist() != pytest.approx([c["advantage"] for c in logged], abs=0.01)
    edited, _ = score_candidates(rewards, prompt, candidates + "\n---\nOne more.", answer, "", "batch", loaded=loaded)
    assert "advantage in the run" not in edited.columns  # not the run's group any more


def test_merged_model_loads_generates_and_matches_base_plus_adapter(finished_run, bundled_model_dir):
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from pipeline.training.generate import generate_batch
    from pipeline.models.loading import load_model

    # The adapter learned something: LoRA's B matrices start at zero, so after training they must not be.
    weights = load_file(finished_run / "adapter" / "adapter_model.safetensors")
    b_norms = [w.float().norm().item() for k, w in weights.items() if "lora_B" in k]
    assert b_norms and max(b_norms) > 1e-4, b_norms

    merged, tok = load_model(str(finished_run / "merged"))
    base = AutoModelForCausalLM.from_pretrained(bundled_model_dir, dtype=torch.float32).eval()
    text = "Summarize: the library reopens on Monday after a new roof, and the cafe stays closed until May."
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        base_logits = base(ids).logits
        again = base(ids).logits
        merged_logits = merged(ids).logits
    noise = (base_logits - again).abs().max().item()  # run-to-run noise of the same forward
    moved = (merged_logits - base_logits).abs().max().item()
    # The merged weights are not the base's: a merge that drops the adapter fails here.
    assert moved > max(100 * noise, 1e-3), (moved, noise)

    with_adapter = PeftModel.from_pretrained(base, finished_run / "adapter").eval()
    with torch.no_grad():
        adapter_logits = with_adapter(ids).logits
    # merged == base + adapter, to float32 rounding (far below how far training moved the logits).
    gap = (merged_logits - adapter_logits).abs().max().item()
    assert gap < max(moved / 50, 1e-4), (gap, moved)

    prompt = [[{"role": "user", "content": "Summarize: the library reopens on Monday after a new roof."}]]
    merged_text = generate_batch(merged, tok, prompt, max_new_tokens=20)[0]
    assert merged_text.strip()
    assert generate_batch(with_adapter, tok, prompt, max_new_tokens=20)[0] == merged_text
    # Tied embeddings stay tied: the merged head is the merged embedding matrix.
    assert torch.equal(merged.get_input_embeddings().weight, merged.get_output_embeddings().weight)


def test_evaluate_scores_base_and_tuned(finished_run):
    import sys

    proc = forked.run([sys.executable, "-m", "pipeline.evaluate", "--run-dir", str(finished_run), "--limit", "3"],
                      timeout=600)
    assert proc.returncode == 0, said(proc.stderr)
    result = json.loads((finished_run / "eval.json").read_text())
    assert result["n"] == 3 and len(result["samples"]) == 3
    for side in ("base", "tuned"):
        assert result[side]["reward_mean"] is not None
        assert set(result[side]["rewards"]) == DEFAULT_REWARDS
    assert result["delta"] == pytest.approx(result["tuned"]["reward_mean"] - result["base"]["reward_mean"])
    # Prompt by prompt: every prompt is counted once, and three are too few for an interval (both said).
    paired = result["paired"]
    assert paired["n"] == 3 and paired["better"] + paired["worse"] + paired["same"] == 3 and paired["low"] is None
    assert "Prompt by prompt: tuned scored higher on" in proc.stdout and "Too few prompts" in proc.stdout
