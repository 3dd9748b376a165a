"""The token view's record: for each step's groups, every completion token by token with the policy's
log-probability of the token and the entropy of its distribution there (tokens.jsonl, one line per step).
Its size is bounded (`keeps_step`), and a reader finds one step's line without parsing the others.
No torch or gradio import: the trainer hands plain lists in (pipeline/token_capture.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pipeline.run_folder import run_files
from pipeline.run_folder.jsonio import append_jsonl, json_number

DECIMALS = 4  # log-probs and entropies as the view shows them on hover; 1e-4 is far below what shading shows
# The bound on tokens.jsonl: every step is kept until the file reaches FULL_BYTES, then every THIN_EVERY-th
# step until it reaches MAX_BYTES, then no more (the file ends at most one step's line past MAX_BYTES). A step
# of the default run is a few kilobytes; 8 completions of 512 tokens about 200 kB, so 250 such steps fit.
FULL_BYTES = 32 * 1024 * 1024
MAX_BYTES = 64 * 1024 * 1024
THIN_EVERY = 10


def keeps_step(step: int, size: int) -> bool:
    """Whether a step's line is written to a tokens.jsonl of `size` bytes.

    >>> keeps_step(7, 0), keeps_step(7, FULL_BYTES), keeps_step(20, FULL_BYTES), keeps_step(20, MAX_BYTES)
    (True, False, True, False)
    """
    if size < FULL_BYTES:
        return True
    return size < MAX_BYTES and step % THIN_EVERY == 0


# ---- one completion, token by token -------------------------------------------------------------------


def token_pieces(tokenizer, ids: list[int]) -> tuple[list[str], list[int]]:
    """Each token's text as the tokenizer renders it on its own (spaces kept), and the positions of special
    tokens (end of sequence, ...). The non-special pieces joined give the completion's text as the trainer
    decoded it; a character split over several tokens (an emoji in byte-level BPE) shows on the token that
    completes it, and its other tokens show as empty."""
    special_ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
    special = [k for k, i in enumerate(ids) if i in special_ids]
    pieces = [tokenizer.decode([i]) for i in ids]
    plain_ids = [i for i in ids if i not in special_ids]
    text = tokenizer.decode(plain_ids, skip_special_tokens=True)
    if "".join(p for p, i in zip(pieces, ids) if i not in special_ids) == text:
        return pieces, special
    # Some tokens are not whole characters on their own: take each token's text as what it adds to the text
    # decoded so far (quadratic, so only for the completions that need it).
    kept: list[int] = []
    emitted = ""
    for k, i in enumerate(ids):
        if i in special_ids:
            continue
        kept.append(i)
        so_far = tokenizer.decode(kept, skip_special_tokens=True)
        if so_far.endswith("\ufffd") and len(kept) < len(plain_ids):
            pieces[k] = ""  # the rest of this character comes with a later token
            continue
        pieces[k] = so_far[len(emitted):]
        emitted += pieces[k]
    return pieces, special


def completion_entry(pieces: list[str], logps: list[float], entropies: list[float],
                     special: list[int] | None = None) -> dict:
    """One completion's record, values rounded to DECIMALS (None where a value is not finite).

    >>> completion_entry([" a", "b"], [-0.123456, -2.0], [1.5, 0.000049])
    {'tokens': [' a', 'b'], 'logp': [-0.1235, -2.0], 'entropy': [1.5, 0.0]}
    """
    entry = {"tokens": list(pieces), "logp": [_round(v) for v in logps], "entropy": [_round(v) for v in entropies]}
    if special:
        entry["special"] = list(special)
    return entry


def _round(value) -> float | None:
    number = json_number(value)
    return None if number is None else round(number, DECIMALS)


# ---- the file ------------------------------------------------------------------------------------------


def append_step(run_dir: str | Path, step: int, groups: list[list[dict | None]]) -> bool:
    """Append one step's line ({step, groups: [[completion entry or None] x G]}) when the bound keeps it.
    Returns whether it was written."""
    path = Path(run_dir) / run_files.TOKENS
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        size = 0
    if not keeps_step(step, size):
        return False
    append_jsonl(path, {"step": int(step), "groups": groups})  # "step" first: the reader matches it by prefix
    return True


_LINE_STEP = re.compile(rb'\{"step": (\d+),')  # matched at a line's start (re.match at its offset)
# Per tokens.jsonl: (inode, bytes scanned, {step: [line offsets]}). A file that grows is scanned from where the
# last read stopped, so a live view that reads one step each redraw reads the new lines' first bytes and the
# one line it shows.
_INDEX: dict[str, tuple[int, int, dict[int, list[int]]]] = {}
_INDEX_FILES = 16  # runs remembered (the shown run, and a few picked before it)


def _line_offsets(path: Path) -> dict[int, list[int]]:
    """Where each step's lines start, oldest first (a resumed run logs a step again: the last line counts)."""
    st = path.stat()
    inode, scanned, offsets = _INDEX.get(str(path), (st.st_ino, 0, {}))
    if inode != st.st_ino or st.st_size < scanned:  # replaced or cut: start over
        scanned, offsets = 0, {}
    if st.st_size > scanned:
        offsets = {step: list(found) for step, found in offsets.items()}
        with open(path, "rb") as fh:
            fh.seek(scanned)
            chunk = fh.read(st.st_size - scanned)
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break  # a line still being written (or torn): scanned again once it ends
            match = _LINE_STEP.match(chunk, start, end)
            if match:
                offsets.setdefault(int(match.group(1)), []).append(scanned + start)
            start = end + 1
        scanned += start
    if len(_INDEX) >= _INDEX_FILES and str(path) not in _INDEX:
        _INDEX.pop(next(iter(_INDEX)))
    _INDEX[str(path)] = (st.st_ino, scanned, offsets)
    return offsets


def read_step(run_dir: str | Path, step: int) -> dict | None:
    """The token record of one step ({step, groups}), or None when the run has none for it (an older run, a
    step the bound left out, a torn or damaged line)."""
    path = Path(run_dir) / run_files.TOKENS
    try:
        offsets = _line_offsets(path).get(int(step), [])
        with open(path, "rb") as fh:
            for offset in reversed(offsets):  # the newest line first; a damaged one gives way to an older one
                fh.seek(offset)
                try:
                    record = json.loads(fh.readline().decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    continue
                if isinstance(record, dict) and isinstance(record.get("groups"), list):
                    return record
    except (FileNotFoundError, ValueError):
        return None
    return None


def steps_recorded(run_dir: str | Path) -> list[int]:
    """The steps tokens.jsonl has a line for, in order."""
    path = Path(run_dir) / run_files.TOKENS
    try:
        return sorted(_line_offsets(path))
    except FileNotFoundError:
        return []


def file_bound() -> str:
    """The bound in words, for the docs and the view.

    >>> file_bound()
    'every step until the file reaches 32 MB, then every 10th step until 64 MB, then none'
    """
    mb = 1024 * 1024
    return (f"every step until the file reaches {FULL_BYTES // mb} MB, then every {THIN_EVERY}th step until "
            f"{MAX_BYTES // mb} MB, then none")
