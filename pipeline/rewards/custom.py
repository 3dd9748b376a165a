"""A reward written as Python by the user: opt-in (--allow-custom-rewards), run only by the trainer."""

from __future__ import annotations

from typing import Any

from pipeline.rewards.text import completion_text

# What the rewards table offers to edit: a reward that runs and scores everything 0.
TEMPLATE = "def reward(completions, **kwargs):\n    return [0.0 for _ in completions]\n"


class CustomPython:
    """User-typed code defining `reward(completions, **kwargs) -> list[float]`.

    Arbitrary code: the registry only builds it when the app or CLI was started with
    --allow-custom-rewards, and only the trainer subprocess ever calls it.
    """

    def __init__(self, code: str = TEMPLATE, name: str = "custom"):
        self.code, self.__name__ = code, name
        self.max_value = None  # unknown: evaluation reports a plain delta
        namespace: dict[str, Any] = {}
        exec(compile(code, f"<custom reward {name}>", "exec"), namespace)  # noqa: S102 - opt-in only
        fn = namespace.get("reward")
        if not callable(fn):
            raise ValueError("custom reward code must define a function named 'reward(completions, **kwargs)'")
        self._fn = fn

    def __call__(self, completions, **kwargs) -> list[float]:
        texts = [completion_text(c) for c in completions]
        return list(self._fn(texts, **kwargs))

    @staticmethod
    def check(code: str) -> None:
        """Parse the code without running it (the web server never executes custom rewards).

        >>> CustomPython.check("def reward(completions, **kw): return [0.0] * len(completions)")
        >>> CustomPython.check("x = 1")
        Traceback (most recent call last):
        ValueError: custom reward code must define a function named 'reward(completions, **kwargs)'
        """
        import ast

        try:
            tree = ast.parse(code or "", "<custom reward>")
        except SyntaxError as exc:
            raise ValueError(f"custom reward code has a syntax error on line {exc.lineno}: {exc.msg}") from None
        if not any(isinstance(node, ast.FunctionDef) and node.name == "reward" for node in tree.body):
            raise ValueError("custom reward code must define a function named 'reward(completions, **kwargs)'")
