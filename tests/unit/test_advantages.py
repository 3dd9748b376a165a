import random
import types

import pytest

from pipeline.rewards.advantages import batch_advantages, group_advantages, group_stats, weighted_totals, zero_std_share


def test_seed_001_table():
    mean, std = group_stats([1, 1, 1, 1, 0, 0, 0, 0])
    assert mean == 0.5 and round(std, 2) == 0.53
    adv = group_advantages([1, 1, 1, 1, 0, 0, 0, 0])
    assert [round(a, 2) for a in adv] == [0.94] * 4 + [-0.94] * 4


def test_equal_rewards_give_zero_advantage():
    assert group_advantages([2.0, 2.0, 2.0, 2.0]) == [0.0] * 4


def test_missing_reward_is_excluded_and_gets_zero():
    adv = group_advantages([1.0, None, 0.0])
    assert adv[1] == 0.0 and adv[0] == pytest.approx(-adv[2])


def test_unscaled_is_mean_centred():
    assert group_advantages([3.0, 1.0], scale=False) == [1.0, -1.0]


def test_batch_splits_into_groups():
    adv = batch_advantages([1, 0, 5, 5], group_size=2)
    assert adv[2:] == [0.0, 0.0] and adv[0] > 0 > adv[1]
    with pytest.raises(ValueError):
        batch_advantages([1, 2, 3], group_size=2)


def test_weighted_totals():
    assert weighted_totals({"a": [1.0, None], "b": [2.0, None]}, {"a": 2.0}) == [4.0, None]


def trl_advantages(rewards_per_func: list[list[float | None]], weights: list[float], group_size: int,
                   scale_rewards: str, want: str = "advantages") -> list[float]:
    """Advantages from TRL's own code: the aggregation block of GRPOTrainer._generate_and_score_completions,
    cut from TRL's installed source and run on these rewards (None is how a reward says "no score"; TRL holds
    it as NaN). No copy of the formula: if TRL changes it, this runs the new one."""
    import inspect
    import textwrap

    import torch
    from trl.trainer import grpo_trainer

    source = inspect.getsource(grpo_trainer.GRPOTrainer._generate_and_score_completions)
    first = source.index("        unscorable_mask = torch.isnan(rewards_per_func)")
    last = source.index("advantages = torch.nan_to_num(advantages, nan=0.0)", first)
    block = textwrap.dedent(source[first:source.index("\n", last)])
    trainer = types.SimpleNamespace(reward_weights=torch.tensor(weights), scale_rewards=scale_rewards,
                                    multi_objective_aggregation="sum_then_normalize", reward_funcs=weights)
    table = torch.tensor([[float("nan") if v is None else v for v in row] for row in rewards_per_func])
    scope = {"torch": torch, "nanstd": grpo_trainer.nanstd, "self": trainer, "rewards_per_func": table,
             "num_generations": group_size, "device": "cpu"}
    exec(block, scope)
    return scope[want].tolist()


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_matches_trls_own_advantage_code_with_missing_rewards(scale_rewards):
    """Random groups of G=8, two weighted rewards, some scores missing: one reward of a completion, both
    rewards of a completion, and all but one completion of a group (std undefined)."""
    rng = random.Random(0)
    weights = {"a": 1.0, "b": 0.5}
    per_func = [[rng.uniform(-3, 3), rng.uniform(0, 1)] for _ in range(32)]
    per_func[1][0] = None                        # one reward missing: the other still counts
    per_func[2] = [None, None]                   # unscorable: out of the group's mean and std, advantage 0
    per_func[9][1] = float("nan")                # NaN is missing too
    for i in range(17, 24):                      # a group with one scored completion
        per_func[i] = [None, None]
    per_func[24:32] = [[None, None]] * 8         # a group with none
    expected = trl_advantages(per_func, list(weights.values()), 8, scale_rewards)

    per_reward = {name: [row[k] for row in per_func] for k, name in enumerate(weights)}
    ours = batch_advantages(weighted_totals(per_reward, weights), 8, scale=scale_rewards)
    assert ours == pytest.approx(expected, rel=1e-5, abs=1e-5)
    assert ours[2] == 0.0 and ours[16] == 0.0 and ours[24:] == [0.0] * 8 and ours[0] != 0.0


def test_zero_std_share_is_trls_share_of_flat_groups():
    """Under batch scaling the trainer writes zero_std_share: it must be what TRL reports under group scaling
    (the share of groups whose G rewards are all equal), on the same rewards."""
    rows = [[1.0], [1.0], [1.0], [1.0], [0.0], [2.0], [0.0], [0.0], [3.0], [3.0], [3.0], [3.0]]
    flags = trl_advantages(rows, [1.0], 4, "group", want="is_std_zero")
    assert zero_std_share([r[0] for r in rows], 4) == pytest.approx(sum(flags) / len(flags)) == pytest.approx(2 / 3)
    # ...and TRL's own figure under batch scaling is 0 here: only a flat batch counts.
    assert sum(trl_advantages(rows, [1.0], 4, "batch", want="is_std_zero")) == 0
