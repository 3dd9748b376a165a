"""Warning signs of a sick GRPO run (the warning table of TRL's GRPO guide), read from metrics.jsonl rows and, for the
held-out check, from the probe lines in evals.jsonl. Monitor rewards (weight 0, TRL #3018) back the
reward-hacking check: a trained reward that climbs while a monitor drops.

Each warning says what is wrong and the fix to try. Pure Python.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from types import SimpleNamespace

from pipeline.rewards.scoring import metric_names

KL_LIMIT = 0.5
ZERO_STD_FRACTION = 0.5
CLIPPED_LIMIT = 0.5
ENTROPY_FLOOR = 0.1
ENTROPY_DROP = 0.25  # entropy below a quarter of where the run started
WINDOW = 3  # judge on the last few steps, so one odd step does not raise an alarm
PROBE_WINDOW = 3  # probes are greedy (no sampling noise), so three in a row falling is a trend


@dataclass(frozen=True)
class Warning_:
    key: str
    title: str
    detail: str
    fix: str
    # "warn": a sign to act on. "note": what this run's own settings are already fixing (shown calmly, with what
    # to do if it does not pass).
    level: str = "warn"


def _recent(rows: list[dict], key: str) -> list[float]:
    return [r[key] for r in rows[-WINDOW:] if isinstance(r.get(key), (int, float))]


def _train_reward_near(rows: list[dict], step: int) -> float | None:
    """Mean train reward of the WINDOW steps up to `step` (for step 0, the first WINDOW steps)."""
    done = [r for r in rows if isinstance(r.get("step"), int) and r["step"] <= step]
    near = done[-WINDOW:] if done else rows[:WINDOW]
    vals = [r["reward"] for r in near if isinstance(r.get("reward"), (int, float))]
    return sum(vals) / len(vals) if vals else None


def held_out_divergence(rows: list[dict], evals: list[dict]) -> Warning_ | None:
    """Train reward up while the held-out probe reward goes down over the last PROBE_WINDOW probes.

    >>> train = [{"step": s, "reward": float(s)} for s in range(1, 11)]
    >>> probes = [{"step": 0, "reward": 5.0}, {"step": 5, "reward": 4.0}, {"step": 10, "reward": 3.0}]
    >>> held_out_divergence(train, probes).key
    'held_out_falls'
    >>> held_out_divergence(train, probes[:2]) is None  # two probes are not a trend yet
    True
    >>> bumpy = [dict(p, reward=r) for p, r in zip(probes, [5.0, 3.0, 4.0])]
    >>> held_out_divergence(train, bumpy) is None  # down, then up again: not a steady fall
    True
    """
    recent = [e for e in evals if isinstance(e.get("reward"), (int, float))][-PROBE_WINDOW:]
    if len(recent) < PROBE_WINDOW:
        return None
    held = [e["reward"] for e in recent]
    # Falling: never up from one probe to the next, and down overall.
    if any(b > a for a, b in zip(held, held[1:])) or not held[-1] < held[0]:
        return None
    first, last = recent[0]["step"], recent[-1]["step"]
    t0, t1 = _train_reward_near(rows, first), _train_reward_near(rows, last)
    if t0 is None or t1 is None or not t1 > t0:
        return None
    return Warning_(
        "held_out_falls", "Held-out reward falls while the train reward rises",
        f"From step {first} to {last} the train reward rose from {t0:.3g} to {t1:.3g}, but the reward on the "
        f"held-out probe prompts fell from {held[0]:.3g} to {held[-1]:.3g}: a sign of reward hacking (the model "
        "games the reward instead of doing the task) or of overfitting the training prompts.",
        "Read the Completions over time panel to see what changed; lower the learning rate or raise beta; "
        "add a reward for the real task (e.g. correctness, or a penalty for what the model is exploiting).")


def reward_weights(rows: list[dict]) -> dict[str, float]:
    """Each reward's weight, as the newest metrics row that records them says ({} for runs from before)."""
    for r in reversed(rows):
        if isinstance(r.get("reward_weights"), dict):
            return r["reward_weights"]
    return {}


def _reward_change(rows: list[dict], name: str) -> tuple[float, float, float] | None:
    """(mean of the first WINDOW rows, mean of the last WINDOW rows, pooled std of the two windows) of one
    reward's per-step mean over `rows` (2 x WINDOW steps); None when a step lacks it."""
    vals = [((r.get("rewards") or {}).get(name) or {}).get("mean") for r in rows]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
        return None
    before, after = vals[:WINDOW], vals[-WINDOW:]
    noise = math.sqrt((statistics.pvariance(before) + statistics.pvariance(after)) / 2)
    return statistics.fmean(before), statistics.fmean(after), noise


def _moved(change: tuple[float, float, float] | None, sign: int) -> bool:
    """Whether the reward moved in the direction `sign` (+1 up, -1 down) by more than its step-to-step noise."""
    if change is None:
        return False
    before, after, noise = change
    return sign * (after - before) > max(noise, 1e-9)


def reward_hacking(rows: list[dict]) -> Warning_ | None:
    """A trained reward (weight > 0) rises while a monitor (weight 0) falls, each by more than its noise,
    comparing the last WINDOW steps with the WINDOW steps before them.

    >>> up = [{"step": s, "reward_weights": {"format": 1.0, "strict": 0.0},
    ...        "rewards": {"format": {"mean": 0.1 * s}, "strict": {"mean": 1.0 - 0.1 * s}}} for s in range(1, 7)]
    >>> reward_hacking(up).key
    'reward_hacking'
    >>> reward_hacking(up[:5]) is None  # five steps are not two windows yet
    True
    """
    weights = reward_weights(rows)
    recent = rows[-2 * WINDOW:]
    if len(recent) < 2 * WINDOW or not weights:
        return None
    trained = [n for n, w in weights.items() if w > 0]
    monitors = [n for n, w in weights.items() if w == 0]
    rising = [(n, _reward_change(recent, n)) for n in trained if _moved(_reward_change(recent, n), +1)]
    falling = [(n, _reward_change(recent, n)) for n in monitors if _moved(_reward_change(recent, n), -1)]
    if not rising or not falling:
        return None
    (up, (u0, u1, _)), (down, (d0, d1, _)) = rising[0], falling[0]
    first, last = recent[0].get("step"), recent[-1].get("step")
    return Warning_(
        "reward_hacking", "A trained reward rises while a monitor falls",
        f"From step {first} to {last} the trained reward {up} rose from {u0:.3g} to {u1:.3g}, while the monitor "
        f"{down} (weight 0: scored, never trained on) fell from {d0:.3g} to {d1:.3g}. The model may be gaming "
        f"{up} (reward hacking) rather than doing what {down} checks.",
        f"Open the group inspector and compare completions that score high on {up} with their {down} score; "
        f"tighten {up} or give {down} a weight, or lower the learning rate or raise beta.")


def _trained_length_reward(rows: list[dict]) -> str | None:
    """The name of the length reward the run trains (weight > 0), or None."""
    return next((n for n, w in reward_weights(rows).items() if w > 0 and n.startswith("length_target")), None)


def _length_reward_progress(rows: list[dict]) -> tuple[str, float | None, float | None] | None:
    """The trained length reward (weight > 0) and its mean over the run's first and last WINDOW steps, when it is
    moving completions toward its target (its mean rose; (name, None, None) while the run is too young to say).
    None when no length reward is trained, or it is not rising."""
    name = _trained_length_reward(rows)
    if name is None:
        return None
    vals = [v for r in rows if isinstance(v := ((r.get("rewards") or {}).get(name) or {}).get("mean"), (int, float))
            and math.isfinite(v)]
    if len(vals) < 2 * WINDOW:
        return name, None, None
    first, last = statistics.fmean(vals[:WINDOW]), statistics.fmean(vals[-WINDOW:])
    return (name, first, last) if last > first else None


def _opening_rewards(rows: list[dict]) -> list[str]:
    """The rewards the run trains (weight > 0) when every one of them is scored from what an answer says first (the
    registry's reads_opening, as the Movie questions rewards are); [] when any one needs the whole answer."""
    from pipeline.rewards.registry import reward_registry

    trained = [n for n, w in reward_weights(rows).items() if isinstance(w, (int, float)) and w > 0]
    base = [n if n in reward_registry.names() else re.sub(r"_\d+$", "", n) for n in trained]  # used again: "_2"
    return trained if trained and all(reward_registry.reads_opening(n) for n in base) else []


# About how much text a token holds, in English with the BPE tokenizers of the models people train here: enough to
# tell a length target far above the completion cap from one below it.
CHARS_PER_TOKEN = 4.0
WORDS_PER_TOKEN = 0.75


def length_targets(config: dict | None) -> tuple[dict[str, float], int | None]:
    """From a run's config: each length_target reward's target in tokens (about), keyed by its name in the metrics
    (a second one is length_target_2), and max_completion_length.

    >>> length_targets({"max_completion_length": 32, "rewards": [
    ...     {"name": "length_target", "params": {"target": 50}},
    ...     {"name": "length_target", "params": {"target": 60, "unit": "words"}}]})
    ({'length_target': 12.5, 'length_target_2': 80.0}, 32)
    """
    if not config:
        return {}, None
    specs = [SimpleNamespace(name=spec.get("name"), params=spec.get("params") or {})
             for spec in config.get("rewards") or []]
    out = {}
    for key, spec in zip(metric_names(specs), specs):
        if spec.name == "length_target":
            per_token = WORDS_PER_TOKEN if spec.params.get("unit") == "words" else CHARS_PER_TOKEN
            out[key] = float(spec.params.get("target", 50)) / per_token
    cap = config.get("max_completion_length")
    return out, int(cap) if isinstance(cap, (int, float)) else None


def clipped_completions(rows: list[dict], config: dict | None = None) -> Warning_ | None:
    """Most completions hit max_completion_length over the last WINDOW steps. A run that trains a length reward
    which is shortening them gets a note, not a warning: the cut-off share is what that reward is fixing. With the
    run's `config`, a length target at or above the cap is a warning of its own: that reward asks for longer answers.

    >>> cut = [{"step": s, "clipped_ratio": 0.7, "reward_weights": {"length_target": 1.0},
    ...         "rewards": {"length_target": {"mean": -80.0 + 5 * s}}} for s in range(1, 7)]
    >>> clipped_completions(cut).level
    'note'
    >>> clipped_completions([dict(r, rewards={"length_target": {"mean": -80.0}}) for r in cut]).level
    'warn'
    """
    clipped = _recent(rows, "clipped_ratio")
    if not (clipped and len(clipped) >= min(WINDOW, len(rows)) and min(clipped) > CLIPPED_LIMIT):
        return None
    share = f"{clipped[-1]:.0%} of completions hit max_completion_length"
    targets, cap = length_targets(config)
    name = _trained_length_reward(rows)
    if name is not None and cap and targets.get(name, 0.0) >= cap:
        return Warning_(
            "clipped", f"Completions are cut off, and {name} asks for longer ones",
            f"{share}. {name}'s target is about {targets[name]:.0f} tokens, at or above max_completion_length "
            f"({cap}): every completion falls short of it, so this reward pushes them longer, not shorter.",
            "Raise max_completion_length above the target, or lower the target.")
    opening = _opening_rewards(rows)
    if opening:
        return Warning_(
            "clipped", "Completions run to the cap, which this run's rewards allow",
            f"{share}. {', '.join(opening)} {'scores' if len(opening) == 1 else 'score'} what an answer says first, "
            "so the cut loses nothing they read.",
            "To read whole answers, raise max_completion_length (each step then samples longer ones).", level="note")
    progress = _length_reward_progress(rows)
    if progress is None:
        return Warning_("clipped", "Completions are cut off", f"{share}, so their endings are never scored.",
                        "Raise max_completion_length, or reward shorter answers (length_target).")
    name, first, last = progress
    moving = (f"Its mean rose from {first:.3g} to {last:.3g} so far: completions are getting shorter."
              if first is not None else "The share should fall as the run learns.")
    return Warning_(
        "clipped", f"Completions are cut off, and {name} is shortening them",
        f"{share}. This run trains {name}, which rewards answers near its target length. {moving}",
        "If more than half are still cut off near the end of the run, raise max_completion_length.", level="note")


def _values(rows: list[dict], key: str) -> list[float]:
    return [r[key] for r in rows if isinstance(r.get(key), (int, float))]


def entropy_collapse(rows: list[dict]) -> Warning_ | None:
    """Token entropy below ENTROPY_FLOOR, or below ENTROPY_DROP of where the run started (last WINDOW steps' mean).
    A warning while the groups' reward spread falls with it (the sign that sampling is running out of variety); a
    note while the spread holds: a task with one short right answer makes the model sure of itself, and the groups
    still teach. Steps that logged no reward std (a batch trained on again) are left out of the spread.

    >>> falling = [{"step": s, "entropy": 2.0 / s} for s in range(1, 11)]
    >>> entropy_collapse([dict(r, reward_std=1.0) for r in falling]).level
    'note'
    >>> entropy_collapse([dict(r, reward_std=1.0 / r["step"]) for r in falling]).level
    'warn'
    >>> entropy_collapse([dict(r, entropy=2.0, reward_std=0.1) for r in falling]) is None
    True
    """
    ent = _values(rows, "entropy")
    if len(ent) < WINDOW:
        return None
    start, now = ent[0], sum(ent[-WINDOW:]) / WINDOW
    if not (now < ENTROPY_FLOOR or (start > 0 and now < ENTROPY_DROP * start)):
        return None
    stds = _values(rows, "reward_std")
    first, last = stds[:WINDOW], stds[-WINDOW:]
    spread_then = sum(first) / len(first) if first else None
    spread_now = sum(last) / len(last) if last else None
    fell = f"Token entropy fell from {start:.2f} to {now:.2f}"
    known = bool(spread_then) and spread_now is not None and len(stds) > WINDOW  # a spread then and one since
    if known and spread_now >= 0.5 * spread_then:
        return Warning_(
            "entropy_collapse", "Entropy is low, and the groups still differ",
            f"{fell}, but the reward std is {spread_now:.2g} against {spread_then:.2g} at the start, so the groups "
            "still teach. A task with one short right answer (a number, a name) makes the model sure of itself.",
            "If the reward std falls towards 0 too, raise the temperature or lower the learning rate.", level="note")
    spread = f" and the reward std from {spread_then:.2g} to {spread_now:.2g}" if known else ""
    return Warning_(
        "entropy_collapse", "Entropy collapse",
        f"{fell}{spread}: the model is becoming deterministic and the group will stop varying.",
        "Raise the temperature, lower the learning rate, or add token_diversity.")


def health_warnings(rows: list[dict], evals: list[dict] | None = None, config: dict | None = None) -> list[Warning_]:
    """Warnings for the latest steps. Needs WINDOW steps before judging trends (and PROBE_WINDOW
    probes, from evals.jsonl, before comparing train and held-out reward). `config` (the run's, as a dict) lets
    the cut-off check weigh a length target against the completion cap.

    >>> rows = [{"step": i, "reward_std": 0.0, "frac_reward_zero_std": 1.0, "kl": 0.01} for i in range(1, 4)]
    >>> [w.key for w in health_warnings(rows)]
    ['no_signal']
    """
    if not rows:
        return []
    out: list[Warning_] = []
    stds = _recent(rows, "reward_std")
    zero = _recent(rows, "frac_reward_zero_std")
    # TRL's reward_std is the whole batch's: 0 means every group is flat, whatever frac_reward_zero_std says
    # (the trainer writes None for it when TRL did not log it).
    all_flat = bool(stds) and max(stds) < 1e-6
    if len(rows) >= WINDOW and ((zero and min(zero) >= ZERO_STD_FRACTION) or all_flat):
        share = "every group" if all_flat or not zero else f"{sum(zero) / len(zero):.0%} of groups"
        out.append(Warning_(
            "no_signal", "No learning signal",
            f"In {share} all G completions got the same reward, so every advantage is 0 and nothing is learned.",
            "Raise the temperature or G, or use a reward that gives partial credit (e.g. incremental_format)."))
    kls = _recent(rows, "kl")
    if kls and kls[-1] > KL_LIMIT:
        out.append(Warning_(
            "kl_high", "KL is high",
            f"KL to the reference model is {kls[-1]:.2f} (> {KL_LIMIT}): "
            "the policy is drifting far from the base model.",
            "Lower the learning rate or raise beta."))
    clipped = clipped_completions(rows, config)
    if clipped:
        out.append(clipped)
    collapse = entropy_collapse(rows)
    if collapse:
        out.append(collapse)
    hacking = reward_hacking(rows)
    if hacking:
        out.append(hacking)
    diverging = held_out_divergence(rows, evals or [])
    if diverging:
        out.append(diverging)
    return out
