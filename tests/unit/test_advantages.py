import random

import pytest

from pipeline.advantages import batch_advantages, group_advantages, group_stats, weighted_totals


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


def test_matches_trl_formula_on_random_groups():
    """Same numbers as TRL's sum_then_normalize path (nanstd with Bessel's correction, +1e-4)."""
    torch = pytest.importorskip("torch")
    from trl.trainer.utils import nanstd

    rng = random.Random(0)
    rewards = [rng.uniform(-3, 3) for _ in range(24)]
    t = torch.tensor(rewards).view(-1, 8)
    expected = ((t - t.mean(dim=1, keepdim=True)) / (nanstd(t, dim=1).unsqueeze(1) + 1e-4)).view(-1).tolist()
    assert batch_advantages(rewards, 8) == pytest.approx(expected, rel=1e-5, abs=1e-5)
