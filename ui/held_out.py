"""A run's held-out prompts (never trained on, eval_prompts.json) as the Chat and RAG tabs offer them: the first few
to click, the system prompt and worked example each came with, and the columns its rewards score with (a reference
answer, the post summarised). Pure: no torch or gradio import."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.run_folder import run_files
from ui.prompt_names import prompt_question

HELD_OUT_SHOWN = 6  # how many a tab offers


def held_out_rows(run_dir: Path | None) -> list[dict]:
    """A run's held-out prompt rows (never trained on), as the trainer wrote them; [] for a base model, or when none
    were written (eval_fraction 0) or the file is damaged."""
    try:
        rows = json.loads((run_dir / run_files.EVAL_PROMPTS).read_text(encoding="utf-8")) if run_dir else []
    except (OSError, ValueError):
        return []
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def held_out_offers(run_dir: Path | None, limit: int = HELD_OUT_SHOWN) -> list[tuple[str, str]]:
    """The first held-out prompts of a run (never trained on) as (text, what names it): the text as the model saw it
    in training, its last user message; named by the row's question where it has one (a Movie questions prompt
    opens with the films' list, so its first line would name them all alike), else by the text's own "Question:"
    line (prompt_names), else by the text itself. Empty for a
    base model, or for a run whose prompts file can't be read.

    >>> import json, tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> movie = [{"role": "user", "content": "Films: [1] ... Question: Which film?"}]
    >>> _ = (run / run_files.EVAL_PROMPTS).write_text(json.dumps([{"prompt": "A post. TL;DR:"},
    ...     {"prompt": movie, "question": "Which film?"}, {"prompt": "Films: [1] ...\\nQuestion: Whose plot?"}]))
    >>> held_out_offers(run)  # doctest: +NORMALIZE_WHITESPACE
    [('A post. TL;DR:', 'A post. TL;DR:'), ('Films: [1] ... Question: Which film?', 'Which film?'),
     ('Films: [1] ...\\nQuestion: Whose plot?', 'Whose plot?')]
    """
    offers = []
    for row in held_out_rows(run_dir):
        prompt = row.get("prompt")
        if isinstance(prompt, list):  # chat messages: the last user turn
            prompt = next((m.get("content") for m in reversed(prompt)
                           if isinstance(m, dict) and m.get("role") == "user"), None)
        if isinstance(prompt, str) and prompt.strip():
            question = row.get("question")
            named = question if isinstance(question, str) and question.strip() else prompt_question(prompt)
            offers.append((prompt, named or prompt))
    return offers[:limit]


def training_context(run_dir: Path | None, text: str) -> tuple[str, list[dict]] | None:
    """The system prompt ("" for none) and the earlier turns (a worked example, say) that the run's held-out prompt
    ending in the user message `text` came with, as the run trained on its prompts; None when no such prompt.

    >>> import json, tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> shot = [{"role": "user", "content": "Calculate 1 + 1"}, {"role": "assistant", "content": "<answer>2</answer>"}]
    >>> _ = (run / run_files.EVAL_PROMPTS).write_text(json.dumps([{"prompt": "Post\\n\\nTL;DR:"}, {"prompt": [
    ...     {"role": "system", "content": "Answer in tags."}, *shot, {"role": "user", "content": "Calculate 2 + 5"}]}]))
    >>> training_context(run, "Calculate 2 + 5") == ("Answer in tags.", shot)
    True
    >>> training_context(run, "Post\\n\\nTL;DR:"), training_context(run, "Calculate 9 + 9")
    (('', []), None)
    """
    for row in held_out_rows(run_dir):
        prompt = row.get("prompt")
        if prompt == text:
            return "", []
        if not isinstance(prompt, list):
            continue
        turns = [m for m in prompt if isinstance(m, dict) and isinstance(m.get("content"), str)]
        if not turns or turns[-1].get("role") != "user" or turns[-1]["content"] != text:
            continue
        system = turns[0]["content"] if turns[0].get("role") == "system" else ""
        return system, [{"role": m["role"], "content": m["content"]} for m in turns[:-1]
                        if m.get("role") in ("user", "assistant")]
    return None


def held_out_questions(run_dir: Path | None, limit: int = HELD_OUT_SHOWN) -> list[str]:
    """The first questions a Movie questions run held out (never trained on), as asked in training; [] for a base
    model or a run of other prompts, or when its prompts file can't be read."""
    questions = [row.get("question") for row in held_out_rows(run_dir)]
    return [q for q in questions if isinstance(q, str) and q.strip()][:limit]


def held_out_columns(run_dir: Path | None, message: str | None) -> dict:
    """The columns of the run's held-out prompt whose user message is `message` (its reference answer, the post
    it summarises, ...), as the run's rewards saw them; {} for a message that is none of them."""
    from pipeline.training.probes import prompt_text

    if not (message or "").strip():
        return {}
    row = next((r for r in held_out_rows(run_dir) if prompt_text(r.get("prompt")) == message), {})
    return {key: value for key, value in row.items() if key not in ("prompt", "id")}
