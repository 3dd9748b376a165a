"""Group-relative advantages, computed exactly as TRL's GRPOTrainer computes them
(multi_objective_aggregation="sum_then_normalize", scale_rewards="group" or "none").

Pure Python so the reward test bench and the tests can use it without torch:
    A_i = (r_i - mean(r_group)) / (std(r_group) + 1e-4)
with the sample std (Bessel's correction), missing rewards (None) left out of mean and std, and a
missing completion's advantage set to 0.
"""

from __future__ import annotations

import math
from typing import Sequence

STD_EPS = 1e-4  # TRL adds this to the std so an all-equal group gives 0, not a division by zero


def group_stats(rewards: Sequence[float | None]) -> tuple[float, float]:
    """Mean and sample std of a group, ignoring None. A group with <2 values has std nan.

    >>> group_stats([1, 1, 1, 1, 0, 0, 0, 0])
    (0.5, 0.5345224838248488)
    """
    vals = [float(r) for r in rewards if r is not None and not math.isnan(float(r))]
    if not vals:
        return float("nan"), float("nan")
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    return mean, math.sqrt(var)


def group_advantages(rewards: Sequence[float | None], scale: bool = True) -> list[float]:
    """Advantages for one group of G rewards.

    >>> [round(a, 2) for a in group_advantages([1, 1, 1, 1, 0, 0, 0, 0])]
    [0.94, 0.94, 0.94, 0.94, -0.94, -0.94, -0.94, -0.94]
    >>> group_advantages([3, 3, 3])
    [0.0, 0.0, 0.0]
    """
    mean, std = group_stats(rewards)
    out = []
    for r in rewards:
        if r is None or math.isnan(float(r)) or math.isnan(mean):
            out.append(0.0)
            continue
        a = float(r) - mean
        if scale:
            a = a / ((0.0 if math.isnan(std) else std) + STD_EPS)
        out.append(a)
    return out


def batch_advantages(rewards: Sequence[float | None], group_size: int, scale: bool = True) -> list[float]:
    """Advantages for a flat batch laid out group by group (G consecutive completions per prompt)."""
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        out.extend(group_advantages(rewards[start:start + group_size], scale=scale))
    return out


def weighted_totals(per_reward: dict[str, Sequence[float | None]], weights: dict[str, float]) -> list[float | None]:
    """Weighted sum per completion, skipping missing values; None when every reward is missing. Monitors
    (weight 0) are left out, as in the trainer: a completion only they could score has no total.

    >>> weighted_totals({"correct": [1.0, None], "monitor": [5.0, 5.0]}, {"correct": 2.0, "monitor": 0.0})
    [2.0, None]
    """
    names = [k for k in per_reward if weights.get(k, 1.0) != 0]
    n = len(next(iter(per_reward.values()))) if per_reward else 0
    totals: list[float | None] = []
    for i in range(n):
        parts = [per_reward[k][i] * weights.get(k, 1.0) for k in names if per_reward[k][i] is not None
                 and not math.isnan(float(per_reward[k][i]))]
        totals.append(sum(parts) if parts else None)
    return totals
