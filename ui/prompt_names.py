"""How the views name a prompt in one line: the probes panel, the group inspector, the learnability scan, the
answers side by side and the downloaded comparison. A prompt that gives its material first and asks last (the
RAG tab's prompts and the Movie questions set open with "Films: [1] ...") is named by its question, since its
first words would name every prompt alike. Pure: no torch or gradio import."""

from __future__ import annotations

QUESTION_MARK = "Question:"  # the line retrieval/rag.py's prompts ask on


def prompt_question(prompt: str) -> str | None:
    """The question of a prompt that asks on a line of its own after its material ("Question: ..."), or None.

    >>> prompt_question("Films:\\n\\n[1] Psycho (1960): A clerk steals.\\n\\nQuestion: Who steals?\\nAnswer concisely.")
    'Who steals?'
    >>> prompt_question("Calculate 2 + 2"), prompt_question("Question:\\n"), prompt_question("A post. TL;DR:")
    (None, None, None)
    """
    for line in reversed(prompt.splitlines()):
        if line.startswith(QUESTION_MARK):
            return line[len(QUESTION_MARK):].strip() or None
    return None


def short_prompt(prompt: str, width: int = 80) -> str:
    """A prompt on one line within `width` characters, cut at a word: its question where it has one, else its
    first words.

    >>> short_prompt("Bike lanes\\nopen  today."), short_prompt("one two three", 8)
    ('Bike lanes open today.', 'one two …')
    >>> short_prompt("Films:\\n[1] Psycho (1960): A clerk steals.\\nQuestion: Which film from 1960 is this?")
    'Which film from 1960 is this?'
    """
    text = " ".join((prompt_question(prompt) or prompt).split())
    return text if len(text) <= width else text[:width].rsplit(" ", 1)[0] + " …"


def prompt_tail(prompt: str, limit: int = 160) -> str:
    """A prompt's last `limit` characters (where the instruction is), cut at a word, marked as cut; its question
    where it has one.

    >>> prompt_tail("short prompt")
    'short prompt'
    >>> prompt_tail("one two three four", 12)
    '…three four'
    >>> prompt_tail("Films:\\n[1] Psycho (1960): A clerk steals.\\nQuestion: Who steals?\\nAnswer concisely.")
    'Who steals?'
    """
    if prompt_question(prompt):
        return short_prompt(prompt, limit)
    if len(prompt) <= limit:
        return prompt
    tail = prompt[-limit:]
    cut = tail.find(" ") if not prompt[-limit - 1].isspace() else -1
    return "…" + (tail[cut + 1:] if 0 <= cut < limit // 2 else tail).lstrip()
