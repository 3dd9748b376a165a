"""Retrieval-augmented answers: a prompt made of the query and the numbered retrieved plots, and which
of those films an answer drew on. Generation itself is pipeline.training.generate.stream_chat (as in Chat)."""

from __future__ import annotations

import re
from typing import Iterator

from retrieval.search import Hit

# Greedy decoding of a 135M model over five plots loops on one phrase; a mild penalty keeps it readable
# and still deterministic.
REPETITION_PENALTY = 1.2
PLOT_CHARS = 600  # per film in the prompt: five plots stay well inside a small model's context

SYSTEM_PROMPT = ("You help a screenwriter by answering questions about films. Use only the numbered film "
                 "plots you are given. Refer to films by their number in brackets, like [2], and keep the "
                 "answer short.")


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " …"


def build_messages(query: str, hits: list[Hit], plot_chars: int = PLOT_CHARS,
                   system_prompt: str = SYSTEM_PROMPT) -> list[dict]:
    """Chat messages for the model: a system rule, then the films as a numbered list and the question.

    >>> hit = Hit(1, "Psycho", 1960, "Horror", "Alfred Hitchcock", "A clerk steals money.", 0.3)
    >>> print(build_messages("who steals?", [hit])[1]["content"].splitlines()[2])
    [1] Psycho (1960, Horror, dir. Alfred Hitchcock): A clerk steals money.
    """
    lines = ["Films:", ""]
    for number, hit in enumerate(hits, 1):
        lines.append(f"[{number}] {hit.title} ({hit.release_year}, {hit.genre}, dir. {hit.director}): "
                     f"{_clip(hit.plot, plot_chars)}")
    if not hits:
        lines.append("(no films matched the filters)")
    lines += ["", f"Question: {query}", "Answer concisely, citing the films you use by number."]
    messages = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    return messages + [{"role": "user", "content": "\n".join(lines)}]


def prompt_text(messages: list[dict]) -> str:
    """The messages as a reader sees them (the panel under the answer)."""
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)


def films_used(answer: str, hits: list[Hit]) -> list[int]:
    """1-based numbers of the retrieved films the answer drew on: cited as [n] / 'Film n' / '#n', or
    named by title.

    >>> hits = [Hit(1, "Psycho", 1960, "Horror", "-", "...", 0.3), Hit(2, "Vertigo", 1958, "Thriller", "-", "...", 0.4)]
    >>> films_used("Both [2] and psycho show a double life.", hits)
    [1, 2]
    """
    used: set[int] = set()
    for match in re.finditer(r"\[(\d{1,2})\]|\b(?:film|movie|#)\s*(\d{1,2})\b", answer, flags=re.IGNORECASE):
        number = int(match.group(1) or match.group(2))
        if 1 <= number <= len(hits):
            used.add(number)
    folded = " ".join(answer.lower().split())
    for number, hit in enumerate(hits, 1):
        title = " ".join(hit.title.lower().split())
        if len(title) >= 3 and re.search(r"(?<!\w)" + re.escape(title) + r"(?!\w)", folded):
            used.add(number)
    return sorted(used)


def stream_answer(model, tokenizer, query: str, hits: list[Hit], max_new_tokens: int = 160,
                  temperature: float = 0.0, top_p: float = 0.95, repetition_penalty: float = REPETITION_PENALTY,
                  stop=None, stats=None) -> Iterator[str]:
    """Stream the answer text so far, with the same helper the Chat tab uses."""
    from pipeline.training.generate import stream_chat

    yield from stream_chat(model, tokenizer, build_messages(query, hits), max_new_tokens=max_new_tokens,
                           temperature=temperature, top_p=top_p, stop=stop, stats=stats,
                           repetition_penalty=repetition_penalty)
