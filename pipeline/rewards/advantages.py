"""Group-relative advantages, computed exactly as TRL's GRPOTrainer computes them
(multi_objective_aggregation="sum_then_normalize", scale_rewards "group", "batch" or "none").

Pure Python so the reward test bench and the tests can use it without torch:
    A_i = (r_i - mean(r_group)) / (std(r_group) + 1e-4)
with the sample std (Bessel's correction), missing rewards (None) left out of mean and std, and a
missing completion's advantage set to 0. With scale_rewards="batch" the divisor is the std of every total
in the batch instead of the group's.
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


def group_advantages(rewards: Sequence[float | None], scale: bool = True, divisor: float | None = None) -> list[float]:
    """Advantages for one group of G rewards. `divisor` is the std to scale by in place of the group's own (the
    batch's, under scale_rewards="batch").

    >>> [round(a, 2) for a in group_advantages([1, 1, 1, 1, 0, 0, 0, 0])]
    [0.94, 0.94, 0.94, 0.94, -0.94, -0.94, -0.94, -0.94]
    >>> group_advantages([3, 3, 3])
    [0.0, 0.0, 0.0]
    >>> [round(a, 4) for a in group_advantages([1, 0], divisor=2.0)]
    [0.25, -0.25]
    """
    mean, std = group_stats(rewards)
    std = std if divisor is None else divisor
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


def batch_advantages(rewards: Sequence[float | None], group_size: int, scale: str = "group") -> list[float]:
    """Advantages for a flat batch laid out group by group (G consecutive completions per prompt).

    `scale` is TRL's scale_rewards: "group" divides by each group's std, "batch" by the std of the whole
    batch's totals, "none" only subtracts the group's mean.

    >>> [round(a, 2) for a in batch_advantages([1, 0, 5, 5], 2, scale="batch")]
    [0.19, -0.19, 0.0, 0.0]
    >>> [round(a, 2) for a in batch_advantages([1, 0, 5, 5], 2, scale="group")]
    [0.71, -0.71, 0.0, 0.0]
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', not {scale!r}")
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    out: list[float] = []
    batch_std = group_stats(rewards)[1] if scale == "batch" else None
    for start in range(0, len(rewards), group_size):
        out.extend(group_advantages(rewards[start:start + group_size], scale=scale != "none", divisor=batch_std))
    return out


def zero_std_share(rewards: Sequence[float | None], group_size: int) -> float:
    """Share of groups whose G totals are all equal (std 0): groups that teach nothing. TRL logs this as
    frac_reward_zero_std under group scaling; under batch scaling its figure asks whether the whole batch
    is flat instead, so the trainer writes this one.

    >>> zero_std_share([1, 1, 0, 2, 3, 3], 2)
    0.6666666666666666
    """
    starts = range(0, len(rewards) - group_size + 1, group_size)
    flat = [abs(group_stats(rewards[s:s + group_size])[1]) < 1e-8 for s in starts]
    return sum(flat) / len(flat) if flat else 0.0


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
