"""Rewards on the format: the <think>/<answer> tags (strict and partial credit) and a regex."""

from __future__ import annotations

import re

from pipeline.rewards.errors import RewardTimeout
from pipeline.rewards.text import THINK_ANSWER, completion_text

# How long the user's pattern may search one completion. A real keyword search takes microseconds; a pattern
# that backtracks without end (nested repeats such as (a|aa)*$) would otherwise hold the process for hours.
MATCH_TIMEOUT_S = 1.0


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

    The pattern is the user's, so it runs under a time limit (MATCH_TIMEOUT_S per completion) and without
    holding the interpreter: the `regex` package searches with the GIL released (`concurrent=True`), so the
    server's other threads, and the reward guard's own timeout, keep running while it searches.

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
        import regex  # re's syntax, plus timeouts and matching without the GIL

        try:
            self.pattern = regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
        except regex.error as exc:
            raise ValueError(f"the pattern is not a valid regular expression: {exc}") from None
        self.value = float(value) if mode == "reward" else -float(value)
        self.max_value = max(self.value, 0.0)
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float]:
        return [self.value if self._search(completion_text(c), i) else 0.0 for i, c in enumerate(completions)]

    def _search(self, text: str, index: int) -> bool:
        try:
            return self.pattern.search(text, timeout=MATCH_TIMEOUT_S, concurrent=True) is not None
        except TimeoutError:
            raise RewardTimeout(
                f"gave up: its pattern {self.pattern.pattern!r} searched completion #{index} for over "
                f"{MATCH_TIMEOUT_S:g} s. A pattern with nested repeats, such as (a|aa)* or (a+)+, can backtrack "
                "without end: simplify it.") from None


FILM_CITATION = re.compile(r"\[(\d{1,2})\]|(?:\b(?:film|movie)|#)\s*(\d{1,2})\b", re.IGNORECASE)


class FilmCitation:
    """1.0 when the answer cites one of the numbered films it was given, as the RAG tab's prompt asks: "[2]",
    "film 2" or "#2", with the number in range (the row's `candidates` count them; 5 without them). 0.5
    when it cites more than one film, 0.0 when it cites none or a number that isn't there.

    With `right_film`, only a citation of the film the question is about counts (the row's `answer` among its
    `candidates`): citing the plot the answer should come from, not any plot.

    >>> FilmCitation()(["Psycho [1].", "Films [1] and [2].", "Psycho.", "See [9]"], candidates=[["a", "b", "c"]] * 4)
    [1.0, 0.5, 0.0, 0.0]
    >>> FilmCitation(right_film=True)(["[1]", "[2]", "[1] and [2]"], answer=["b"] * 3, candidates=[["a", "b", "c"]] * 3)
    [0.0, 1.0, 0.5]
    """

    max_value = 1.0

    def __init__(self, right_film: bool = False, name: str = "film_citation"):
        self.right_film, self.__name__ = bool(right_film), name

    def __call__(self, completions, **kwargs) -> list[float]:
        options = kwargs.get("candidates") or [None] * len(completions)
        answers = kwargs.get("answer") or [None] * len(completions)
        out = []
        for c, candidates, answer in zip(completions, options, answers):
            count = len(candidates) if candidates else 5
            cited = {int(a or b) for a, b in FILM_CITATION.findall(completion_text(c))}
            if not cited or any(not 1 <= n <= count for n in cited):
                out.append(0.0)
            elif self.right_film and (not candidates or answer not in candidates
                                      or candidates.index(answer) + 1 not in cited):
                out.append(0.0)
            else:
                out.append(1.0 if len(cited) == 1 else 0.5)
        return out
