"""Reading a completion: its text whatever shape TRL passed, its final answer, its last number."""

from __future__ import annotations

import re
from typing import Any

THINK_ANSWER = re.compile(r"^\s*<think>(.+?)</think>\s*<answer>(.+?)</answer>\s*$", re.DOTALL)
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")


def completion_text(completion: Any) -> str:
    """Text of one completion, whether TRL passed a string or a list of chat messages.

    >>> completion_text([{"role": "assistant", "content": "hi"}])
    'hi'
    >>> completion_text("plain")
    'plain'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in completion)
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return "" if completion is None else str(completion)


def extract_answer(text: str) -> str:
    """The model's final answer: inside <answer> tags if present, else the last non-empty line.

    >>> extract_answer("<think>2+2</think><answer> 4 </answer>")
    '4'
    >>> extract_answer("so the total is\\n12")
    '12'
    """
    tagged = ANSWER_TAG.findall(text)
    if tagged:
        return tagged[-1].strip()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def parse_number(text: str) -> float | None:
    """Last number in a string, tolerant of thousands separators.

    >>> parse_number("The answer is 1,234.5 apples")
    1234.5
    >>> parse_number("none") is None
    True
    """
    found = NUMBER.findall(text or "")
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower()).strip(" .")


LEADING_ARTICLE = re.compile(r"^(?:the|a|an)\s+")


def normalise_title(text: str) -> str:
    """A film title folded for comparison: case, punctuation, spacing and a leading article ignored
    ("the", "a", "an"); accents and digits are kept.

    >>> normalise_title("  The Cabinet of Dr. Caligari! "), normalise_title("an American Werewolf in London")
    ('cabinet of dr caligari', 'american werewolf in london')
    >>> normalise_title("Se7en"), normalise_title("Amélie")
    ('se7en', 'amélie')
    """
    words = re.sub(r"[\W_]+", " ", str(text).lower()).strip()
    return LEADING_ARTICLE.sub("", words).strip()


def names_title(text: str, title: str) -> bool:
    """Whether `text` names the film `title`: its normalised form appears as whole words.

    >>> names_title("It is The Kid [2].", "The Kid"), names_title("The kidnapping [2]", "The Kid")
    (True, False)
    """
    wanted = normalise_title(title)
    if not wanted:
        return False
    folded = " " + re.sub(r"[\W_]+", " ", str(text).lower()).strip() + " "
    return f" {wanted} " in folded
