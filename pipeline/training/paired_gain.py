"""Is a held-out gain more than chance? Base and tuned answer the same prompts, so they are compared prompt by
prompt: how many scored higher, lower or the same, and a bootstrap interval of the mean gain (the prompts
resampled with replacement). Pure Python: the evaluator writes the result into eval.json, the Runs panel and the
command line word it."""

from __future__ import annotations

import math
import random
import statistics
from typing import Sequence

LEVEL = 0.9  # the interval's coverage: wide enough to mean something on 14 prompts, narrow enough to be read
DRAWS = 2000  # resamples; the interval's ends move by well under a tenth of its width between seeds
MIN_PROMPTS = 5  # below this the resamples repeat a handful of values, and the interval says nothing


def paired_gain(base: Sequence[float | None], tuned: Sequence[float | None], level: float = LEVEL,
                draws: int = DRAWS, seed: int = 0) -> dict | None:
    """Compare two lists of per-prompt totals, position by position (a prompt either side could not score is
    left out). Returns n, how many went up / down / stayed, the mean gain and, from MIN_PROMPTS prompts on, its
    `level` bootstrap interval (`low`, `high`; None below that). None when no prompt has both scores.

    >>> g = paired_gain([1, 2, 3, 4, 5, 6], [2, 3, 4, 5, 6, 6])
    >>> g["better"], g["worse"], g["same"], round(g["mean"], 3), g["low"] > 0
    (5, 0, 1, 0.833, True)
    >>> g = paired_gain([0, 0, 0, 0, 0, 0], [1, -1, 2, -2, 1, -1])
    >>> g["better"], g["worse"], g["low"] < 0 < g["high"]
    (3, 3, True)
    >>> paired_gain([0, 0], [1, 1])["low"] is None  # too few prompts for an interval
    True
    >>> paired_gain([None, float("nan")], [1, 2]) is None
    True
    """
    pairs = [(float(b), float(t)) for b, t in zip(base, tuned) if _finite(b) and _finite(t)]
    if not pairs:
        return None
    gains = [t - b for b, t in pairs]
    # A gain within rounding of zero is "the same": rewards that sum floats rarely tie exactly.
    tie = 1e-9 * max(1.0, *(abs(x) for pair in pairs for x in pair))
    better, worse = sum(g > tie for g in gains), sum(g < -tie for g in gains)
    result = {"n": len(gains), "better": better, "worse": worse, "same": len(gains) - better - worse,
              "mean": statistics.fmean(gains), "level": level, "low": None, "high": None}
    if len(gains) >= MIN_PROMPTS:
        rng = random.Random(seed)  # the same eval.json always gets the same interval
        means = sorted(statistics.fmean(rng.choices(gains, k=len(gains))) for _ in range(draws))
        tail = (1 - level) / 2
        result["low"], result["high"] = means[int(tail * draws)], means[min(draws - 1, int((1 - tail) * draws))]
    return result


def verdict(gain: dict | None) -> str:
    """'up' (the interval is above zero), 'down' (below), 'unclear' (it holds zero) or 'too few' (no interval).

    >>> verdict({"low": 0.5, "high": 2.0}), verdict({"low": -1.0, "high": 2.0}), verdict({"low": None})
    ('up', 'unclear', 'too few')
    """
    if not gain or gain.get("low") is None:
        return "too few"
    if gain["low"] > 0:
        return "up"
    return "down" if gain["high"] < 0 else "unclear"


def gain_sentence(gain: dict | None, bold: str = "") -> str:
    """The comparison in words, for the Runs panel (`bold="**"`) and the command line. Empty without a gain.

    >>> print(gain_sentence(paired_gain([1, 2, 3, 4, 5, 6], [2, 3, 4, 5, 6, 6])))
    Prompt by prompt: tuned scored higher on 5, lower on 0, the same on 1 of 6. 90% interval of the mean gain (bootstrap over these prompts): +0.5 to +1: above zero, so the gain holds across these prompts.
    """
    if not gain:
        return ""
    b = bold
    counts = (f"Prompt by prompt: tuned scored higher on {b}{gain['better']}{b}, lower on {b}{gain['worse']}{b}, "
              f"the same on {gain['same']} of {gain['n']}.")
    kind = verdict(gain)
    if kind == "too few":
        return f"{counts} Too few prompts to tell a gain from chance."
    interval = (f" {gain['level']:.0%} interval of the mean gain (bootstrap over these prompts): "
                f"{b}{gain['low']:+.3g} to {gain['high']:+.3g}{b}")
    meaning = {
        "up": "above zero, so the gain holds across these prompts.",
        "down": "below zero: the tuned model scores lower on these prompts.",
        "unclear": (f"it holds zero, so on {gain['n']} prompts this difference may be chance. Evaluate on more "
                    "held-out prompts, if the run holds more out, or train further (Resume to step) and evaluate "
                    "again."),
    }[kind]
    return f"{counts}{interval}: {meaning}"


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
