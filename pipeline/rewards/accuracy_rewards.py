"""Correctness rewards: compare the final answer with the row's reference answer."""

from __future__ import annotations

from typing import Any

from pipeline.rewards.errors import RewardFunctionError
from pipeline.rewards.text import _normalise, completion_text, extract_answer, parse_number


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
