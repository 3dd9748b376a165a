"""The learnability scan's arithmetic: which prompts give GRPO something to learn from.

GRPO learns from the differences between a prompt's G completions. When all G score the same, every
advantage is 0 and the prompt teaches nothing, however long the run. The scan samples G completions
for a few prompts before a run starts (pipeline/training/preflight.py: learnability_scan) and this module reads
the scores: the spread per prompt, the share of prompts with no signal, why they have none, and the fix
to try. Pure Python: no torch, no Gradio.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from pipeline.rewards.advantages import group_stats
from pipeline.setup.data import DatasetError
from pipeline.training.health import ZERO_STD_FRACTION
from pipeline.training.probes import prompt_text

# Scores closer than this count as equal: as in the trainer's share of groups with zero std.
TOLERANCE = 1e-8

# Why a prompt carries no signal (or "signal" when it does).
SIGNAL = "signal"
ALL_MAX = "all_max"  # every completion earned full marks: too easy
ALL_ZERO = "all_zero"  # no completion earned some trained reward: too hard
CONSTANT = "constant"  # the same score for all, neither full nor nothing: the reward doesn't tell them apart
UNSCORED = "unscored"  # fewer than two completions could be scored

ADVICE = {
    ALL_ZERO: ("On {count} of {total} prompts no completion earned {rewards}: the task is out of the model's "
               "reach there. Try easier prompts, a larger group size G (more tries make a rare right answer "
               "likelier), or a reward that gives partial credit for getting part of the way."),
    ALL_MAX: ("On {count} of {total} prompts every completion already earned full marks: the task is too easy "
              "there. Try harder prompts or a stricter reward."),
    CONSTANT: ("On {count} of {total} prompts every completion got the same score: the rewards don't tell the "
               "completions apart. Try a reward that grades more finely, or a higher temperature so the "
               "completions differ more."),
    UNSCORED: ("On {count} of {total} prompts the rewards could not score the completions (see the reward "
               "errors in pre-flight); fix the rewards first."),
}
# One trained reward flat on most prompts while the totals still differ: the run learns the other rewards there.
REWARD_ADVICE = {
    ALL_ZERO: ("No completion earned {reward} on {count} of {total} prompts: whatever signal those prompts carry "
               "comes from the other rewards, so the run learns them, not {reward}. If {reward} is the one that "
               "matters, try easier prompts, a larger G, or partial credit for it."),
    ALL_MAX: ("Every completion already earned full marks from {reward} on {count} of {total} prompts: there is "
              "little left for it to teach."),
    CONSTANT: ("{reward} gave all G completions the same middling score on {count} of {total} prompts: it doesn't "
               "tell them apart. Try a version of it that grades more finely."),
}


@dataclass
class PromptScan:
    """One scanned prompt: its G completions' totals and per-reward scores, and what they say."""

    prompt: str  # the prompt's text (its last user turn): what the run records to keep it
    totals: list[float | None]
    rewards: dict[str, list[float | None]] = field(default_factory=dict)
    completions: list[str] = field(default_factory=list)
    kind: str = SIGNAL
    flat_rewards: list[str] = field(default_factory=list)  # for ALL_ZERO: the rewards no completion earned

    @property
    def scored(self) -> list[float]:
        return [float(t) for t in self.totals if t is not None and not math.isnan(float(t))]

    @property
    def std(self) -> float | None:
        std = group_stats(self.scored)[1]
        return None if math.isnan(std) else std

    @property
    def low(self) -> float | None:
        return min(self.scored) if self.scored else None

    @property
    def high(self) -> float | None:
        return max(self.scored) if self.scored else None

    @property
    def mean(self) -> float | None:
        return sum(self.scored) / len(self.scored) if self.scored else None

    @property
    def signal(self) -> bool:
        return self.kind == SIGNAL


@dataclass
class ScanReport:
    """The whole scan: every prompt, the no-signal share, a verdict and the fixes to try."""

    prompts: list[PromptScan]
    group_size: int
    verdict: str
    advice: list[str]
    seconds: float | None = None
    # trained reward -> prompts on which it scored all G the same: (in all, at 0, at its best)
    flat_by_reward: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    @property
    def no_signal(self) -> list[PromptScan]:
        return [p for p in self.prompts if not p.signal]

    @property
    def no_signal_share(self) -> float:
        return len(self.no_signal) / len(self.prompts) if self.prompts else 0.0

    @property
    def kept(self) -> list[str]:
        """The prompts that showed signal, as a run records them (RunConfig.signal_prompts)."""
        return [p.prompt for p in self.prompts if p.signal]

    @property
    def mostly_flat(self) -> bool:
        return bool(self.prompts) and self.no_signal_share >= ZERO_STD_FRACTION


def _equal(a: float, b: float, tol: float = TOLERANCE) -> bool:
    return abs(a - b) <= tol


def _values(values: list) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


def prompt_kind(totals: list, rewards: dict[str, list] | None = None, weights: dict[str, float] | None = None,
                maxima: dict[str, float | None] | None = None, tol: float = TOLERANCE) -> tuple[str, list[str]]:
    """Why one group carries no signal, read from its totals and, when given, its per-reward scores: SIGNAL when
    the totals differ; else ALL_MAX when every trained reward is at its best, ALL_ZERO (with the rewards no
    completion earned) when some trained reward is 0 throughout, CONSTANT otherwise.

    >>> prompt_kind([1.0, 0.0, 1.0, 1.0])
    ('signal', [])
    >>> both = {"weights": {"format": 1.0, "correct": 2.0}, "maxima": {"format": 1.0, "correct": 1.0}}
    >>> prompt_kind([1.0] * 4, {"format": [1.0] * 4, "correct": [0.0] * 4}, **both)
    ('all_zero', ['correct'])
    >>> prompt_kind([3.0] * 4, {"format": [1.0] * 4, "correct": [1.0] * 4}, **both)
    ('all_max', [])
    >>> prompt_kind([0.5] * 4, {"format": [0.5] * 4, "correct": [0.0, 0.0, 0.0, 0.0]}, **both)
    ('all_zero', ['correct'])
    >>> prompt_kind([0.4] * 3), prompt_kind([0.0] * 3), prompt_kind([None, 2.0, None])
    (('constant', []), ('all_zero', []), ('unscored', []))
    """
    scored = _values(totals)
    if len(scored) < 2:
        return UNSCORED, []
    if any(not _equal(v, scored[0], tol) for v in scored):
        return SIGNAL, []
    weights, maxima = weights or {}, maxima or {}
    trained = {n: _values(v) for n, v in (rewards or {}).items() if weights.get(n, 1.0) != 0 and _values(v)}
    if not trained:  # only the totals to go by
        return (ALL_ZERO if _equal(scored[0], 0.0, tol) else CONSTANT), []
    at_best = [n for n, v in trained.items()
               if maxima.get(n) is not None and weights.get(n, 1.0) > 0 and all(_equal(x, maxima[n], tol) for x in v)]
    if len(at_best) == len(trained):
        return ALL_MAX, []
    at_zero = [n for n, v in trained.items() if n not in at_best and all(_equal(x, 0.0, tol) for x in v)]
    if at_zero:
        return ALL_ZERO, at_zero
    return CONSTANT, []


def scan_report(prompts: list[str], totals: list[list], rewards: list[dict[str, list]] | None = None,
                weights: dict[str, float] | None = None, maxima: dict[str, float | None] | None = None,
                completions: list[list[str]] | None = None, seconds: float | None = None,
                tol: float = TOLERANCE) -> ScanReport:
    """Read a scan: for each prompt, its G totals (and per-reward scores, {name: G values}); the verdict says how
    many prompts carry signal, and the advice gives the fix for each reason found, most frequent first.

    >>> r = scan_report(["a", "b", "c", "d"], [[1, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0], [2, 2, 2, 2]])
    >>> [p.kind for p in r.prompts], r.no_signal_share, r.kept, r.mostly_flat
    (['signal', 'all_zero', 'all_zero', 'constant'], 0.75, ['a'], True)
    >>> r.verdict
    'Most prompts carry no learning signal: 3 of 4 gave every completion the same reward.'
    >>> r.advice[0].startswith("On 2 of 4 prompts no completion earned a reward")
    True
    >>> scan_report(["a"], [[0.2, 0.9]]).verdict
    'Every prompt carries signal: its completions scored differently.'
    """
    if len(totals) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(totals)} groups of scores")
    rewards = rewards or [{} for _ in prompts]
    completions = completions or [[] for _ in prompts]
    scans = []
    for prompt, group, per, texts in zip(prompts, totals, rewards, completions):
        kind, flat = prompt_kind(group, per, weights, maxima, tol)
        scans.append(PromptScan(prompt, list(group), dict(per), list(texts), kind, flat))
    group_size = max((len(g) for g in totals), default=0)
    flat = [p for p in scans if not p.signal]
    total = len(scans)
    if not scans:
        verdict = "Nothing was scanned."
    elif not flat:
        verdict = "Every prompt carries signal: its completions scored differently."
    elif len(flat) / total >= ZERO_STD_FRACTION:
        verdict = (f"Most prompts carry no learning signal: {len(flat)} of {total} gave every completion the "
                   "same reward.")
    else:
        verdict = (f"{len(flat)} of {total} prompts carry no learning signal (every completion scored the same); "
                   "the others do.")
    advice = []
    for kind, count in Counter(p.kind for p in flat).most_common():
        names = sorted({n for p in flat if p.kind == kind for n in p.flat_rewards})
        earned = ", ".join(names) if names else "a reward"
        advice.append(ADVICE[kind].format(count=count, total=total, rewards=earned))
    by_reward = flat_by_reward(scans, weights, maxima, tol)
    for name, (flat_n, zero_n, best_n) in by_reward.items():
        if not total or flat_n / total < ZERO_STD_FRACTION or flat_n <= len(flat):  # rare, or said above
            continue
        kind, count = max([(ALL_ZERO, zero_n), (ALL_MAX, best_n), (CONSTANT, flat_n - zero_n - best_n)],
                          key=lambda pair: pair[1])
        advice.append(REWARD_ADVICE[kind].format(reward=name, count=count, total=total))
    return ScanReport(scans, group_size, verdict, advice, seconds, by_reward)


def flat_by_reward(scans: list[PromptScan], weights: dict[str, float] | None = None,
                   maxima: dict[str, float | None] | None = None,
                   tol: float = TOLERANCE) -> dict[str, tuple[int, int, int]]:
    """For each trained reward (weight not 0): on how many prompts it gave all G completions the same score, on
    how many of those that score was 0 (no completion earned it), and on how many it was the reward's best.

    >>> scans = [PromptScan("a", [1, 3], {"fmt": [1, 1], "right": [0, 1]}), PromptScan("b", [0, 1], {"fmt": [0, 1],
    ...          "right": [0, 0]}), PromptScan("c", [1, 1], {"fmt": [1, 1], "right": [0, 0], "mon": [2, 5]})]
    >>> flat_by_reward(scans, {"fmt": 1, "right": 2, "mon": 0}, {"fmt": 1.0, "right": 1.0})
    {'fmt': (2, 0, 2), 'right': (2, 2, 0)}
    """
    weights, maxima = weights or {}, maxima or {}
    out: dict[str, tuple[int, int, int]] = {}
    for p in scans:
        for name, values in p.rewards.items():
            vals = _values(values)
            if weights.get(name, 1.0) == 0 or len(vals) < 2:
                continue
            flat, zero, best = out.get(name, (0, 0, 0))
            if all(_equal(v, vals[0], tol) for v in vals):
                at_best = maxima.get(name) is not None and _equal(vals[0], maxima[name], tol)
                flat, zero, best = flat + 1, zero + (not at_best and _equal(vals[0], 0.0, tol)), best + at_best
            out[name] = (flat, zero, best)
    return out


def keep_prompts(rows: list[dict], kept: list[str]) -> list[dict]:
    """The training rows whose prompt is one of `kept` (a scan's prompts with signal), in their order. Raises
    DatasetError when one of them is no longer among the training prompts (another dataset, seed or split).

    >>> rows = [{"prompt": [{"role": "user", "content": q}]} for q in ("2+2?", "3+5?", "7×6?")]
    >>> [r["prompt"][0]["content"] for r in keep_prompts(rows, ["7×6?", "2+2?"])]
    ['2+2?', '7×6?']
    >>> keep_prompts(rows, ["9-1?"])
    Traceback (most recent call last):
    ...
    pipeline.setup.data.DatasetError: 1 of the 1 prompts the learnability scan kept are not among the training prompts (first: '9-1?'). The dataset, seed or held-out share changed since the scan: run the scan again.
    """
    wanted = set(kept)
    out = [row for row in rows if prompt_text(row["prompt"]) in wanted]
    missing = wanted - {prompt_text(row["prompt"]) for row in out}
    if missing:
        first = next(k for k in kept if k in missing)
        raise DatasetError(f"{len(missing)} of the {len(wanted)} prompts the learnability scan kept are not among "
                           f"the training prompts (first: {first[:80]!r}). The dataset, seed or held-out share "
                           "changed since the scan: run the scan again.")
    return out
