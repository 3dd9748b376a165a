"""Warning signs of a sick GRPO run (seed 002's table), read from metrics.jsonl rows.

Each warning says what is wrong and the fix to try. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass

KL_LIMIT = 0.5
ZERO_STD_FRACTION = 0.5
CLIPPED_LIMIT = 0.5
ENTROPY_FLOOR = 0.1
ENTROPY_DROP = 0.25  # entropy below a quarter of where the run started
WINDOW = 3  # judge on the last few steps, so one odd step does not raise an alarm


@dataclass(frozen=True)
class Warning_:
    key: str
    title: str
    detail: str
    fix: str


def _recent(rows: list[dict], key: str) -> list[float]:
    return [r[key] for r in rows[-WINDOW:] if isinstance(r.get(key), (int, float))]


def health_warnings(rows: list[dict]) -> list[Warning_]:
    """Warnings for the latest steps. Needs WINDOW steps before judging trends.

    >>> rows = [{"step": i, "reward_std": 0.0, "frac_reward_zero_std": 1.0, "kl": 0.01} for i in range(1, 4)]
    >>> [w.key for w in health_warnings(rows)]
    ['no_signal']
    """
    if not rows:
        return []
    out: list[Warning_] = []
    stds = _recent(rows, "reward_std")
    zero = _recent(rows, "frac_reward_zero_std")
    if len(rows) >= WINDOW and ((zero and min(zero) >= ZERO_STD_FRACTION) or (stds and max(stds) < 1e-6)):
        share = f"{sum(zero) / len(zero):.0%} of groups" if zero else "every group"
        out.append(Warning_(
            "no_signal", "No learning signal",
            f"In {share} all G completions got the same reward, so every advantage is 0 and nothing is learned.",
            "Raise the temperature or G, or use a reward that gives partial credit (e.g. incremental_format)."))
    kls = _recent(rows, "kl")
    if kls and kls[-1] > KL_LIMIT:
        out.append(Warning_(
            "kl_high", "KL is high",
            f"KL to the reference model is {kls[-1]:.2f} (> {KL_LIMIT}): the policy is drifting far from the base model.",
            "Lower the learning rate or raise beta."))
    clipped = _recent(rows, "clipped_ratio")
    if len(clipped) >= min(WINDOW, len(rows)) and clipped and min(clipped) > CLIPPED_LIMIT:
        out.append(Warning_(
            "clipped", "Completions are cut off",
            f"{clipped[-1]:.0%} of completions hit max_completion_length, so their endings are never scored.",
            "Raise max_completion_length, or reward shorter answers (length_target)."))
    ent = [r["entropy"] for r in rows if isinstance(r.get("entropy"), (int, float))]
    if len(ent) >= WINDOW:
        start, now = ent[0], sum(ent[-WINDOW:]) / WINDOW
        if now < ENTROPY_FLOOR or (start > 0 and now < ENTROPY_DROP * start):
            out.append(Warning_(
                "entropy_collapse", "Entropy collapse",
                f"Token entropy fell from {start:.2f} to {now:.2f}: the model is becoming deterministic and the "
                "group will stop varying.",
                "Raise the temperature, lower the learning rate, or add token_diversity."))
    return out
