"""Building a run's guarded rewards from its specs, and scoring completions with them."""

from __future__ import annotations

from typing import Any, Callable

from pipeline.rewards.guard import GuardedReward
from pipeline.rewards.registry import reward_registry


def metric_names(specs) -> list[str]:
    """Each reward's unique name, its metric key: a reward used again gets _2, _3.

    >>> from types import SimpleNamespace as Spec
    >>> metric_names([Spec(name="a"), Spec(name="b"), Spec(name="a")])
    ['a', 'b', 'a_2']
    """
    seen: dict[str, int] = {}
    names = []
    for spec in specs:
        seen[spec.name] = seen.get(spec.name, 0) + 1
        names.append(spec.name if seen[spec.name] == 1 else f"{spec.name}_{seen[spec.name]}")
    return names


def build_rewards(specs, policy: str = "fail", allow_custom: bool = False,
                  on_warning: Callable[[str], None] | None = None,
                  timeout_s: float | None = None) -> tuple[list[GuardedReward], list[float]]:
    """Guarded reward callables and their weights, with unique names (metric keys)."""
    funcs, weights = [], []
    for spec, name in zip(specs, metric_names(specs)):
        fn = reward_registry.build(spec, allow_custom=allow_custom, name=name)
        funcs.append(GuardedReward(fn, policy=policy, on_warning=on_warning, timeout_s=timeout_s))
        weights.append(float(spec.weight))
    return funcs, weights


def reward_maximum(funcs: list[Callable], weights: list[float]) -> float | None:
    """Best possible weighted total, or None when a trained reward declares no maximum (or has a negative
    weight, whose best is the reward's minimum). Monitors (weight 0) add nothing, whatever they declare.

    >>> from pipeline.rewards import CustomPython, LengthTarget, TokenDiversity
    >>> reward_maximum([LengthTarget(), TokenDiversity()], [1.0, 1.0])
    100.0
    >>> reward_maximum([LengthTarget(), CustomPython("def reward(c, **k): return [0] * len(c)")], [1, 1]) is None
    True
    """
    total = 0.0
    for f, w in zip(funcs, weights):
        if w == 0:
            continue
        best = getattr(f, "max_value", None)
        if best is None or w < 0:
            return None
        total += w * best
    return total


def score(funcs: list[Callable], weights: list[float], completions: list, **kwargs) -> dict[str, Any]:
    """Per-reward scores and the weighted total for a list of completions (None = missing)."""
    from pipeline.rewards.advantages import weighted_totals

    per = {f.__name__: f(completions, **kwargs) for f in funcs}
    return {"per_reward": per, "total": weighted_totals(per, {f.__name__: w for f, w in zip(funcs, weights)})}
