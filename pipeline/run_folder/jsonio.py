"""JSON files that several processes share: written atomically, and read back without ever failing on a
half-written file (a torn last JSONL line is skipped, a damaged JSON file reads as None with the reason
from `file_problem`). No torch or gradio import.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON so a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk leaves no stray temp file; the old file is untouched
        raise


def append_jsonl(path: str | Path, obj: Any) -> None:
    """Append one JSON line. A crash can at worst leave a torn last line, which readers skip."""
    line = json.dumps(obj, default=_json_default, allow_nan=False) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        # A torn line from a killed writer would glue onto ours: start on a fresh line.
        if fh.tell() > 0:
            with open(path, "rb") as rh:
                rh.seek(-1, os.SEEK_END)
                if rh.read(1) != b"\n":
                    fh.write("\n")
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def json_number(value: Any) -> float | None:
    """`value` as a number JSON can hold: a finite float, or None for NaN, infinities and non-numbers (the
    metrics, groups and probe records are written with allow_nan=False, and a chart skips a None).

    >>> json_number(2), json_number("0.5"), json_number(float("nan")), json_number(float("-inf")), json_number(None)
    (2.0, 0.5, None, None, None)
    """
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def read_jsonl(path: str | Path) -> list[dict]:
    """Every complete JSON object line; torn or garbled lines are skipped."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                rows.append(obj)
    return rows


_BAD_LINES: dict[str, tuple[tuple[int, int], list[int], int]] = {}


def unreadable_lines(path: str | Path, active: bool = False) -> list[int]:
    """1-based numbers of the lines `read_jsonl` skips (not a JSON object: garbled, binary, torn).

    A torn last line of a run that is still writing is normal, and not counted when `active`.
    Cached by file size and modification time: the runs list asks every few seconds.

    >>> import tempfile; f = Path(tempfile.mkdtemp()) / "m.jsonl"
    >>> _ = f.write_bytes(b'{"step": 1}\\n\\x00\\xff\\n{"step": 2}\\n{"step": ')
    >>> unreadable_lines(f), unreadable_lines(f, active=True)
    ([2, 4], [2])
    """
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        return []
    key = (st.st_size, st.st_mtime_ns)
    cached = _BAD_LINES.get(str(path))
    if cached is None or cached[0] != key:
        lines = path.read_bytes().split(b"\n")
        bad = []
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                ok = isinstance(json.loads(raw.decode("utf-8")), dict)
            except (UnicodeDecodeError, json.JSONDecodeError):
                ok = False
            if not ok:
                bad.append(number)
        cached = _BAD_LINES[str(path)] = (key, bad, len(lines))
    _, bad, count = cached
    if active and bad and bad[-1] == count:  # the line a live writer is still finishing
        return bad[:-1]
    return list(bad)


def _read_json(path: Path) -> dict | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        return obj if isinstance(obj, dict) else None
    except (OSError, ValueError):  # missing, unreadable, not UTF-8, not JSON
        return None



def read_json(path: str | Path) -> dict | None:
    """A JSON file's object, or None when it is missing or unreadable."""
    return _read_json(Path(path))



def file_problem(path: Path) -> str | None:
    """Why a run's JSON file can't be used, in words; None when it reads as a JSON object."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return f"{path.name} is missing."
    except OSError as exc:
        return f"{path.name} can't be read ({exc.strerror or exc})."
    if not data.strip():
        return f"{path.name} is empty."
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return f"{path.name} is not text (binary data)."
    except json.JSONDecodeError as exc:
        return f"{path.name} is damaged: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})."
    if not isinstance(obj, dict):
        return f"{path.name} is damaged: it holds a {type(obj).__name__}, not a JSON object."
    return None

