"""Rewards on the format: the <think>/<answer> tags (strict and partial credit) and a regex."""

from __future__ import annotations

import re

from pipeline.rewards.text import THINK_ANSWER, completion_text


class StrictFormat:
    """1.0 when the whole completion is `<think>...</think><answer>...</answer>`, else 0.0.

    >>> StrictFormat()(["<think>a</think>\\n<answer>b</answer>", "<answer>b</answer>"])
    [1.0, 0.0]
    """

    max_value = 1.0

    def __init__(self, name: str = "strict_format"):
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float]:
        return [1.0 if THINK_ANSWER.match(completion_text(c)) else 0.0 for c in completions]


class IncrementalFormat:
    """Partial credit (TRL's GRPO guide): 0.25 per tag that appears exactly once, minus 0.001 per
    character left after </answer>.

    >>> IncrementalFormat()(["<think>x</think><answer>y</answer>", "<think>x", "<answer>y</answer>tail"])
    [1.0, 0.25, 0.496]
    """

    TAGS = ("<think>", "</think>", "<answer>", "</answer>")
    max_value = 1.0

    def __init__(self, name: str = "incremental_format"):
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float]:
        out = []
        for c in completions:
            text = completion_text(c)
            score = sum(0.25 for tag in self.TAGS if text.count(tag) == 1)
            if text.count("</answer>") == 1:
                score -= 0.001 * len(text.split("</answer>")[-1].strip())
            out.append(float(round(score, 6)))
        return out


class KeywordPresence:
    """`value` when the regex matches (or, with mode='penalize', `-value` when it matches).

    >>> KeywordPresence(pattern=r"\\bTL;DR\\b")(["TL;DR: short", "nothing"])
    [1.0, 0.0]
    >>> KeywordPresence(pattern="sorry", mode="penalize", ignore_case=True)(["Sorry!", "ok"])
    [-1.0, 0.0]
    """

    def __init__(self, pattern: str = "TL;DR", mode: str = "reward", value: float = 1.0, ignore_case: bool = False,
                 name: str = "keyword_presence"):
        if mode not in ("reward", "penalize"):
            raise ValueError("mode must be 'reward' or 'penalize'")
        if not pattern:
            raise ValueError("pattern must not be empty")
        self.pattern = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        self.value = float(value) if mode == "reward" else -float(value)
        self.max_value = max(self.value, 0.0)
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float]:
        return [self.value if self.pattern.search(completion_text(c)) else 0.0 for c in completions]
