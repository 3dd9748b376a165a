"""Correctness rewards: compare the final answer with the row's reference answer."""

from __future__ import annotations

import re
from typing import Any

from pipeline.rewards.errors import RewardFunctionError
from pipeline.rewards.text import (
    _normalise, completion_text, extract_answer, names_title, normalise_title, parse_number)


def _answers(kwargs: dict, n: int, reward: str) -> list[Any]:
    answers = kwargs.get("answer")
    if answers is None:
        raise RewardFunctionError(
            f"Reward '{reward}' needs a reference answer column named 'answer' in the dataset."
        )
    if isinstance(answers, (str, int, float)):
        answers = [answers] * n
    return list(answers)


class ExactAnswer:
    """1.0 when the extracted answer equals the reference (case, spaces and a trailing dot ignored).

    >>> ExactAnswer()(["<answer>Paris</answer>", "london"], answer=["paris", "Paris"])
    [1.0, 0.0]
    """

    needs_answer = True
    max_value = 1.0

    def __init__(self, name: str = "exact_answer"):
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float]:
        refs = _answers(kwargs, len(completions), self.__name__)
        return [
            1.0 if _normalise(extract_answer(completion_text(c))) == _normalise(str(ref)) else 0.0
            for c, ref in zip(completions, refs)
        ]


class NumericTolerance:
    """1.0 when the answer's last number is within `atol` (or `rtol` of the reference), else 0.0.
    The GRPO tutorial's correctness reward; works with or without <answer> tags.

    >>> NumericTolerance(atol=0.5)(["<answer>14</answer>", "it is 14.4", "15", "no idea"], answer=["14"] * 4)
    [1.0, 1.0, 0.0, 0.0]
    """

    needs_answer = True
    max_value = 1.0

    def __init__(self, atol: float = 1e-6, rtol: float = 0.0, name: str = "numeric_tolerance"):
        self.atol, self.rtol, self.__name__ = float(atol), float(rtol), name

    def __call__(self, completions, **kwargs) -> list[float]:
        refs = _answers(kwargs, len(completions), self.__name__)
        out = []
        for c, ref in zip(completions, refs):
            got, want = parse_number(extract_answer(completion_text(c))), parse_number(str(ref))
            if got is None or want is None:
                out.append(0.0)
                continue
            ok = abs(got - want) <= max(self.atol, self.rtol * abs(want))
            out.append(1.0 if ok else 0.0)
        return out


def other_titles_named(text: str, answer: str, candidates) -> bool:
    """Whether `text` names a candidate film other than `answer` (the answer's own title taken out first, so
    "Psycho II" does not count as naming "Psycho").

    >>> other_titles_named("Psycho II [1]", "Psycho II", ["Psycho", "Psycho II"])
    False
    >>> other_titles_named("Psycho or Vertigo", "Psycho", ["Psycho", "Vertigo"])
    True
    """
    folded = " " + re.sub(r"[\W_]+", " ", str(text).lower()).strip() + " "
    wanted = normalise_title(answer)
    if wanted:
        folded = folded.replace(f" {wanted} ", " | ")
    for title in candidates or ():
        other = normalise_title(title)
        if other and other != wanted and len(other) >= 3 and f" {other} " in folded:
            return True
    return False


class MovieTitle:
    """1.0 when the answer names the right film: its title appears (case, punctuation, spacing and a leading
    "the/a/an" ignored) and no other retrieved film (the row's `candidates`, when the dataset has them) is
    named beside it, so listing every title earns nothing.

    >>> films = ["Psycho", "Vertigo", "The Birds"]
    >>> MovieTitle()(["It is Psycho [1].", "psycho", "Psycho or Vertigo?", "[1]", "Birds [3]"],
    ...              answer=["Psycho"] * 4 + ["The Birds"], candidates=[films] * 5)
    [1.0, 1.0, 0.0, 0.0, 1.0]
    """

    needs_answer = True
    max_value = 1.0

    def __init__(self, name: str = "movie_title"):
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float]:
        refs = _answers(kwargs, len(completions), self.__name__)
        options = kwargs.get("candidates") or [None] * len(completions)
        out = []
        for c, ref, candidates in zip(completions, refs, options):
            text = completion_text(c)
            right = names_title(text, str(ref)) and not other_titles_named(text, str(ref), candidates)
            out.append(1.0 if right else 0.0)
        return out
