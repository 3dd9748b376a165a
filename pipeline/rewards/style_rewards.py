"""Rewards on the shape of the text: the GRPO recipe's length target and token diversity."""

from __future__ import annotations

from pipeline.rewards.text import completion_text


class LengthTarget:
    """The GRPO recipe's length reward: -|target - length|. 0 is perfect; every unit off costs 1.

    >>> LengthTarget(target=5)(["abcde", "abc", "abcdefg"])
    [0.0, -2.0, -2.0]
    >>> LengthTarget(target=2, unit="words")(["one two three"])
    [-1.0]
    """

    def __init__(self, target: int = 50, unit: str = "chars", name: str = "length_target"):
        if unit not in ("chars", "words"):
            raise ValueError("unit must be 'chars' or 'words'")
        self.target, self.unit, self.__name__ = int(target), unit, name
        self.max_value = 0.0  # exactly on target

    def __call__(self, completions, **kwargs) -> list[float]:
        out = []
        for c in completions:
            text = completion_text(c)
            n = len(text) if self.unit == "chars" else len(text.split())
            out.append(float(-abs(self.target - n)))
        return out


class TokenDiversity:
    """The GRPO recipe's diversity reward: share of unique whitespace tokens, times `scale`. Empty = 0.

    >>> TokenDiversity()(["a b c d", "a a a a", ""])
    [100.0, 25.0, 0.0]
    """

    def __init__(self, scale: float = 100.0, name: str = "token_diversity"):
        self.scale, self.__name__ = float(scale), name
        self.max_value = max(self.scale, 0.0)  # every token different

    def __call__(self, completions, **kwargs) -> list[float]:
        out = []
        for c in completions:
            tokens = completion_text(c).split()
            out.append(self.scale * len(set(tokens)) / len(tokens) if tokens else 0.0)
        return out
