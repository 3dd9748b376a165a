"""A monitor reward (weight 0) is scored and logged, and leaves every advantage exactly as it is without it.

Runs TRL's own advantage code: `_generate_and_score_completions` of the studio's GRPOTrainer subclass, on a
tiny random model, with generation stubbed out (advantages depend on the rewards alone) and rewards that
return fixed numbers, missing ones included.
"""

import math
import random

import pytest
import torch

G, PROMPTS = 4, 5
N = G * PROMPTS


def _fixed(name, values):
    def reward(completions, **kwargs):
        assert len(completions) == len(values)
        return list(values)

    reward.__name__ = name
    return reward


def _reward_columns():
    """Two trained rewards and a monitor, one column per completion, laid out group by group."""
    rng = random.Random(7)
    correct = [float(rng.random() < 0.4) for _ in range(N)]
    fmt = [round(rng.uniform(-3, 3), 3) for _ in range(N)]
    monitor = [rng.uniform(-1e6, 1e6) for _ in range(N)]
    # Group 1: completion 4 has no trained score at all (both rewards failed: None), but the monitor has one.
    correct[4] = fmt[4] = None
    # Group 2: every trained total is equal (no signal), while the monitor varies wildly.
    for i in range(8, 12):
        correct[i], fmt[i] = 1.0, 0.5
    # Group 3: one trained reward missing here and there, and the monitor missing too.
    correct[13], fmt[14], monitor[15] = None, None, None
    # Group 4: the monitor's own score is the only one missing.
    monitor[16] = None
    return correct, fmt, monitor


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[EOS]": 1, "[UNK]": 2, **{f"w{i}": i + 3 for i in range(29)}}
    inner = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    inner.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]")


def _advantages(tmp_path, funcs, weights, scale_rewards):
    """The advantages TRL computes for one generation batch, through the studio's trainer subclass."""
    trainer, out = _scored_trainer(tmp_path, funcs, weights, scale_rewards)
    return out["advantages"], trainer._metrics["train"]


def _scored_trainer(tmp_path, funcs, weights, scale_rewards):
    """The studio's trainer subclass after it generated (stubbed) and scored one batch, and that batch."""
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig

    from pipeline.training.grpo_trainer import StepClock, make_trainer_class

    torch.manual_seed(0)
    tokenizer = _tokenizer()
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=64, pad_token_id=0, eos_token_id=1))
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=N, num_generations=G,
                      max_completion_length=4, beta=0.0, scale_rewards=scale_rewards, report_to="none",
                      reward_weights=weights, logging_steps=1)
    trainer = make_trainer_class()(model=model, processing_class=tokenizer, reward_funcs=funcs, args=args,
                                   train_dataset=Dataset.from_list([{"prompt": "w1 w2"}] * N))
    trainer.studio_clock = StepClock()

    def fixed_generation(prompts):  # (prompt ids, completion ids, tool mask, texts, logprobs, extra, images, ...)
        return [[4, 5]] * len(prompts), [[6, 7, 1]] * len(prompts), None, ["w3 w4"] * len(prompts), None, {}, \
            None, None

    trainer._generate = fixed_generation
    trainer.model.train()
    out = trainer._generate_and_score_completions([{"prompt": "w1 w2"} for _ in range(N)])
    return trainer, out


@pytest.mark.parametrize("scale_rewards,monitor_first", [("group", False), ("batch", False), ("none", False),
                                                          ("group", True)])
def test_a_weight_0_reward_leaves_every_advantage_exactly_as_without_it(tmp_path, scale_rewards, monitor_first):
    correct, fmt, monitor = _reward_columns()
    trained, weights = [_fixed("correct", correct), _fixed("format", fmt)], [2.0, 0.5]
    without, _ = _advantages(tmp_path / "without", trained, weights, scale_rewards)
    if monitor_first:  # the Train form lists rewards in the registry's order, so a monitor may come first
        funcs, weights = [_fixed("monitor", monitor), *trained], [0.0, *weights]
    else:
        funcs, weights = [*trained, _fixed("monitor", monitor)], [*weights, 0.0]
    with_monitor, metrics = _advantages(tmp_path / "with", funcs, weights, scale_rewards)
    assert torch.equal(with_monitor, without), (with_monitor - without).abs().max()
    assert without[4] == 0 and all(a == 0 for a in without[8:12].tolist())  # the cases the data sets up
    # ...and the monitor is still scored and logged (its mean leaves out the completion no trained reward scored).
    logged = [m for m in monitor if m is not None]
    logged.remove(monitor[4])
    assert math.isclose(metrics["rewards/monitor/mean"][-1], sum(logged) / len(logged), rel_tol=1e-5)


def test_under_batch_scaling_the_logged_zero_std_share_counts_flat_groups(tmp_path):
    """TRL's frac_reward_zero_std under scale_rewards="batch" asks whether the whole batch is flat (0 here); the
    studio's trainer logs the share of groups whose totals are all equal, which is what the chart says. The
    group inspector's record carries the mode and the batch std every advantage was divided by."""
    from pipeline.run_folder import runs
    from pipeline.rewards.advantages import group_stats

    correct, fmt, _ = _reward_columns()
    trainer, out = _scored_trainer(tmp_path, [_fixed("correct", correct), _fixed("format", fmt)], [2.0, 0.5], "batch")
    trainer.studio_run_dir, trainer.studio_weights = tmp_path, {"correct": 2.0, "format": 0.5}
    trainer.log({})
    record = runs.read_groups(tmp_path)[-1]
    totals = [c["total"] for group in record["groups"] for c in group["completions"]]
    assert record["scale_rewards"] == "batch" and record["batch_std"] == pytest.approx(group_stats(totals)[1])
    assert [c["advantage"] for g in record["groups"] for c in g["completions"]] == pytest.approx(
        out["advantages"].tolist(), abs=1e-6)
    assert trainer.state.log_history[-1]["frac_reward_zero_std"] == pytest.approx(1 / PROMPTS)  # group 2 only
