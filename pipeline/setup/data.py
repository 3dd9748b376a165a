"""Prompt sources: the bundled TL;DR and Arithmetic sets, user CSV/JSONL files, and hub datasets.

Every source ends as rows `{"prompt": [chat messages], "answer": str (optional)}` split into train
and held-out eval rows. Bad data raises DatasetError naming the file and the problem.
Pure Python apart from the optional hub path (which imports `datasets` late).
"""

from __future__ import annotations

import csv
import io
import json
import operator
import random
import re
from pathlib import Path
from typing import Any, Callable

from pipeline.setup.config import NO_PROMPTS_FILE, DatasetSpec

ASSETS = Path(__file__).resolve().parents[2] / "assets"
TLDR_PATH = ASSETS / "prompts" / "tldr.jsonl"
MOVIES_PATH = ASSETS / "prompts" / "movies.jsonl"  # built by bench/movie_questions.py
MOVIES_MIN_HELD_OUT = 0.24  # the movie set holds out at least this share: 50 of its 210 questions

# The instruction goes in the user turn, after the post: the 135M model follows a system prompt weakly
# and, with the instruction only there, often answers as if asked to edit the post.
TLDR_INSTRUCTION = "TL;DR of the post above, in one short sentence:"
ARITHMETIC_SYSTEM = (
    "Solve the problem. Think briefly inside <think></think>, then give only the final number "
    "inside <answer></answer>."
)
# One worked exchange opens every Arithmetic prompt. The 135M model never wrote the tags from the instruction
# alone (0 of 64 sampled answers, with it in the system or the user turn); after this example, 30 of 32 greedy
# held-out answers carry them. A two-step example ("4 + 3 × 2") made it add a spurious second step to one-step
# problems: 1 of 32 held-out answers right, against 4 of 32 with this one (on the earlier set of multi-step problems).
ARITHMETIC_EXAMPLE = ("Calculate 12 + 7", "<think>12 + 7 = 19</think><answer>19</answer>")
ARITHMETIC_SIZE = 400
ARITHMETIC_SEED = 1234  # fixed: the set is the same for every run; the run seed only shuffles it
MAX_FILE_BYTES = 50 * 1024 * 1024


class DatasetError(ValueError):
    """The prompts can't be used. The message names the source and the problem."""


def chat(user: str, system: str = "") -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user})
    return messages


# ---- bundled TL;DR -----------------------------------------------------------------------------


def tldr_prompt(post: str) -> str:
    """The user turn for one post: the post, then the instruction."""
    return f"{post}\n\n{TLDR_INSTRUCTION}"


def tldr_posts() -> list[dict]:
    """The bundled posts: id, kind, title, text."""
    return [json.loads(line) for line in TLDR_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]


def tldr_rows(system_prompt: str = "") -> list[dict]:
    # "source" keeps the bare post so a task metric can compare the answer with it.
    return [{"prompt": chat(tldr_prompt(post["text"]), system_prompt), "id": post["id"], "source": post["text"]}
            for post in tldr_posts()]


# ---- bundled Arithmetic ------------------------------------------------------------------------


_OPERATIONS: dict[str, Callable[[int, int], int]] = {"+": operator.add, "-": operator.sub, "×": operator.mul}


def _one_operation(first: tuple[int, int], op: str,
                   second: tuple[int, int]) -> Callable[[random.Random], tuple[str, int]]:
    """A level: `Calculate a op b` with a and b drawn (in that order) from the inclusive ranges."""
    def draw(rng: random.Random) -> tuple[str, int]:
        a, b = rng.randint(*first), rng.randint(*second)
        return f"Calculate {a} {op} {b}", _OPERATIONS[op](a, b)
    return draw


# The levels, in the order the set cycles through them. Chosen with bench/arithmetic_levels.py: the base model
# answers them right some of the time, so its groups of tries hold right and wrong answers to learn from
# (bench/results/arithmetic-levels-scan-2026-11-26b.txt).
ARITHMETIC_LEVELS: dict[str, Callable[[random.Random], tuple[str, int]]] = {
    "add2": _one_operation((10, 99), "+", (10, 99)),  # 48 + 41
    "add21": _one_operation((10, 99), "+", (1, 9)),  # 68 + 7
    "sub21": _one_operation((10, 99), "-", (1, 9)),  # 44 - 8
    "mul21": _one_operation((11, 30), "×", (2, 9)),  # 23 × 4
}


def arithmetic_problems(n: int = ARITHMETIC_SIZE, seed: int = ARITHMETIC_SEED) -> list[tuple[str, int]]:
    """Seeded one-operation problems with exact integer answers, one level after another
    (ARITHMETIC_LEVELS), no problem twice (so none is both trained on and held out).

    >>> arithmetic_problems(4, seed=0) == arithmetic_problems(4, seed=0)
    True
    >>> [q.split()[2] for q, _ in arithmetic_problems(4)]
    ['+', '+', '-', '×']
    """
    rng = random.Random(seed)
    levels = list(ARITHMETIC_LEVELS.values())
    out: list[tuple[str, int]] = []
    seen = {ARITHMETIC_EXAMPLE[0]}  # each level has well over n / len(levels) distinct problems
    while len(out) < n:
        question, answer = levels[len(out) % len(levels)](rng)
        if question not in seen:
            seen.add(question)
            out.append((question, answer))
    return out


def arithmetic_rows(system_prompt: str = "") -> list[dict]:
    """Chat prompts: the system message, the worked example (a user turn and its answer), then the problem.

    >>> [m["role"] for m in arithmetic_rows()[0]["prompt"]]
    ['system', 'user', 'assistant', 'user']
    """
    opening = [{"role": "system", "content": system_prompt or ARITHMETIC_SYSTEM},
               {"role": "user", "content": ARITHMETIC_EXAMPLE[0]},
               {"role": "assistant", "content": ARITHMETIC_EXAMPLE[1]}]
    return [{"prompt": [*opening, {"role": "user", "content": q}], "answer": str(a)} for q, a in arithmetic_problems()]


# ---- bundled Movie questions --------------------------------------------------------------------


def movie_rows(system_prompt: str = "") -> list[dict]:
    """One question per bundled film, with the plots the RAG tab's default search found for it and the
    film's title as the answer. Columns: prompt, answer, film_id, question, candidates (the retrieved
    films' titles, in prompt order) and retrieved (whether the film is among them). One row per film, so
    the held-out rows are about films no training row is about. A system prompt replaces the RAG tab's.

    >>> rows = movie_rows()
    >>> len({r["film_id"] for r in rows}) == len(rows), rows[0]["prompt"][0]["role"]
    (True, 'system')
    """
    rows = [json.loads(line) for line in MOVIES_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
    if system_prompt:
        for row in rows:
            row["prompt"] = chat(row["prompt"][-1]["content"], system_prompt)
    return rows


# ---- user files ---------------------------------------------------------------------------------


def shown_name(path: str | Path) -> str:
    """A file's name as its user knows it: an upload's stored copy (uploads/<8 hex>-name) by the name it was
    uploaded with.

    >>> shown_name("/data/uploads/a0daf7d6-prompts.csv"), shown_name("/home/me/a0daf7d6-prompts.csv")
    ('prompts.csv', 'a0daf7d6-prompts.csv')
    """
    path = Path(path)
    return re.sub(r"^[0-9a-f]{8}-", "", path.name) if path.parent.name == "uploads" else path.name


def csv_delimiter(text: str, suffix: str = ".csv") -> str:
    r"""The column separator of a CSV or TSV file, from its header row: a tab for .tsv; for .csv a comma, or the
    semicolon, tab or bar that a header without commas holds (spreadsheets in many locales save CSV with ";").

    >>> csv_delimiter("prompt,answer\n"), csv_delimiter("prompt;answer\n"), csv_delimiter("q\ta"), csv_delimiter("q")
    (',', ';', '\t', ',')
    >>> csv_delimiter("prompt;answer", ".tsv"), csv_delimiter('"a;b",c\n')
    ('\t', ',')
    """
    if suffix == ".tsv":
        return "\t"
    header = next((line for line in text.splitlines() if line.strip()), "")
    if "," in header:
        return ","
    counts = {sep: header.count(sep) for sep in (";", "\t", "|")}
    best = max(counts, key=counts.get)
    return best if counts[best] else ","


def read_table(path: str | Path) -> tuple[list[dict], list[str]]:
    """Rows and column names of a CSV (comma, semicolon or tab separated), TSV, JSONL or JSON-list file."""
    path = Path(path)
    name = shown_name(path)
    if not path.exists():
        raise DatasetError(f"{name}: file not found.")
    if not path.is_file():
        raise DatasetError(f"{name}: a folder, not a file. Give a CSV, TSV, JSONL or JSON file.")
    size = path.stat().st_size
    if size == 0:
        raise DatasetError(f"{name}: the file is empty.")
    if size > MAX_FILE_BYTES:
        raise DatasetError(f"{name}: {size / 1e6:.0f} MB is over the {MAX_FILE_BYTES // 10**6} MB limit.")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{name}: can't be read as UTF-8 text (byte {exc.start}). "
                           "Save it as UTF-8 and retry.") from None
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        try:
            reader = csv.DictReader(io.StringIO(text), delimiter=csv_delimiter(text, suffix))
            rows = [dict(r) for r in reader]
        except csv.Error as exc:
            raise DatasetError(f"{name}: malformed CSV ({exc}).") from None
        columns = list(reader.fieldnames or [])
        if not columns:
            raise DatasetError(f"{name}: no header row found.")
    elif suffix in (".jsonl", ".ndjson"):
        rows = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{name}: line {i} is not valid JSON ({exc.msg}).") from None
            except RecursionError:
                raise DatasetError(f"{name}: line {i} is nested too deeply to be a row of prompts.") from None
            if not isinstance(obj, dict):
                raise DatasetError(f"{name}: line {i} is not a JSON object.")
            rows.append(obj)
        columns = list(dict.fromkeys(k for r in rows for k in r))
    elif suffix == ".json":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno}).") from None
        except RecursionError:  # e.g. [[[[...]]]] thousands deep: Python's parser gives up
            raise DatasetError(f"{name}: nested too deeply; a .json file must hold a list of objects.") from None
        if not isinstance(obj, list) or not all(isinstance(r, dict) for r in obj):
            raise DatasetError(f"{name}: a .json file must hold a list of objects.")
        rows, columns = obj, list(dict.fromkeys(k for r in obj for k in r))
    else:
        raise DatasetError(f"{name}: unsupported file type '{suffix}'. Use .csv, .tsv, .jsonl or .json.")
    if not rows:
        raise DatasetError(f"{name}: no data rows.")
    return rows, columns


def _as_prompt(value: Any, system: str, where: str) -> list[dict]:
    if isinstance(value, list):  # already chat messages
        if not value or not all(isinstance(m, dict) and "role" in m and "content" in m for m in value):
            raise DatasetError(f"{where}: chat prompts must be lists of {{role, content}} messages.")
        msgs = [dict(role=str(m["role"]), content=str(m["content"])) for m in value]
        if system and msgs[0]["role"] != "system":
            msgs.insert(0, {"role": "system", "content": system})
        return msgs
    if isinstance(value, dict):  # one message, or a record whose text is a field of it
        raise DatasetError(f"{where}: the prompt is a JSON object; give it as text, or as a list of "
                           "{role, content} chat messages.")
    return chat(str(value), system)  # blank ones are counted by the caller (_blank)


def _blank(value: Any) -> bool:
    return value is None or value == [] or (isinstance(value, str) and not value.strip())


def rows_from_records(records: list[dict], columns: list[str], spec: DatasetSpec, source: str) -> list[dict]:
    if spec.prompt_column not in columns:
        raise DatasetError(
            f"{source}: no column '{spec.prompt_column}'. Columns found: {', '.join(columns) or 'none'}."
        )
    if spec.answer_column and spec.answer_column not in columns:
        raise DatasetError(
            f"{source}: no answer column '{spec.answer_column}'. Columns found: {', '.join(columns)}."
        )
    rows, empty = [], []
    for i, rec in enumerate(records, 1):
        value = rec.get(spec.prompt_column)
        if _blank(value):
            empty.append(i)  # counted, and listed together below
            continue
        row = {"prompt": _as_prompt(value, spec.system_prompt, f"{source} row {i}")}  # a malformed one: said now
        if spec.answer_column:
            answer = rec.get(spec.answer_column)
            if answer is None or str(answer).strip() == "":
                empty.append(i)
                continue
            row["answer"] = str(answer)
        rows.append(row)
    if empty:
        shown = ", ".join(map(str, empty[:10])) + (" ..." if len(empty) > 10 else "")
        raise DatasetError(f"{source}: {len(empty)} row(s) have an empty prompt or answer (rows {shown}).")
    return rows


def file_rows(spec: DatasetSpec) -> list[dict]:
    if not spec.path.strip():  # the upload was refused, or none was made yet
        raise DatasetError(NO_PROMPTS_FILE)
    records, columns = read_table(spec.path)
    return rows_from_records(records, columns, spec, shown_name(spec.path))


def hub_rows(spec: DatasetSpec) -> list[dict]:
    """Rows of a hub dataset, or of a dataset folder the app may read (pipeline/models/sources.py's rule)."""
    from pipeline.models.sources import SourceRefused, check_source, hub_cache_dir, hub_token

    try:
        source = check_source(spec.hub_id, "dataset")
    except SourceRefused as exc:
        raise DatasetError(str(exc)) from None
    if source.kind == "local":
        where, token, cache = source.value, None, hub_cache_dir("datasets-local")
    else:
        from pipeline.models.hub import HubUnreachable, require_hub
        from pipeline.models.loading import DATASET_OFFLINE_HINT

        try:
            require_hub(f"dataset '{spec.hub_id}'", DATASET_OFFLINE_HINT)
        except HubUnreachable as exc:  # a DatasetError, so the pre-flight check and the trainer report it as one
            raise DatasetError(str(exc)) from None
        # The hf:// form is looked up on the Hub only: a bare id that is also a folder in the app's working
        # directory would otherwise be read from disk.
        where, token, cache = f"hf://datasets/{source.value}", hub_token(), hub_cache_dir()
    import datasets  # heavy: only when a hub dataset is asked for

    part = f"split '{spec.hub_split}'" + (f", config '{spec.hub_config}'" if spec.hub_config else "")
    try:
        ds = datasets.load_dataset(where, spec.hub_config or None, split=spec.hub_split, token=token, cache_dir=cache)
    except Exception as exc:  # noqa: BLE001 - report any loader failure plainly
        raise DatasetError(f"Hub dataset '{spec.hub_id}' ({part}) could not be loaded: {exc}") from None
    records = [dict(r) for r in ds]
    return rows_from_records(records, list(ds.column_names), spec, spec.hub_id)


# ---- entry points -------------------------------------------------------------------------------


def load_rows(spec: DatasetSpec) -> list[dict]:
    if spec.source == "tldr":
        rows = tldr_rows(spec.system_prompt)
    elif spec.source == "arithmetic":
        rows = arithmetic_rows(spec.system_prompt)
    elif spec.source == "movies":
        rows = movie_rows(spec.system_prompt)
    elif spec.source == "file":
        rows = file_rows(spec)
    elif spec.source == "hub":
        rows = hub_rows(spec)
    else:
        raise DatasetError(f"Unknown dataset source '{spec.source}'.")
    if not rows:
        raise DatasetError(f"{spec.source}: no usable prompts.")
    return rows


def split_rows(rows: list[dict], eval_fraction: float, seed: int, limit: int = 0) -> tuple[list[dict], list[dict]]:
    """Shuffle with the seed, cap at `limit`, then hold out the last share for evaluation.

    >>> train, held = split_rows([{"i": i} for i in range(20)], 0.1, seed=1)
    >>> len(train), len(held), {r["i"] for r in train} & {r["i"] for r in held}
    (18, 2, set())
    """
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    if limit:
        rows = rows[:limit]
    n_eval = int(round(len(rows) * eval_fraction)) if eval_fraction > 0 else 0
    if eval_fraction > 0 and len(rows) >= 2:
        n_eval = max(1, n_eval)
    n_eval = min(n_eval, len(rows) - 1)
    return rows[: len(rows) - n_eval], rows[len(rows) - n_eval:]


def check_prompt_budget(rows: list[dict], count_tokens: Callable[[list[dict]], int], budget: int,
                        source: str) -> int:
    """Raise when any prompt (after the chat template) is longer than the token budget; else return the
    longest prompt's token count."""
    too_long, longest = [], 0
    for i, row in enumerate(rows, 1):
        n = count_tokens(row["prompt"])
        longest = max(longest, n)
        if n > budget:
            too_long.append((i, n))
    if too_long:
        worst = max(n for _, n in too_long)
        raise DatasetError(
            f"{source}: {len(too_long)} prompt(s) are longer than the {budget}-token budget (longest: {worst} tokens). "
            f"Raise 'max_prompt_tokens' or shorten them."
        )
    return longest


def load_dataset_split(spec: DatasetSpec, seed: int) -> tuple[list[dict], list[dict]]:
    rows = load_rows(spec)
    share = spec.eval_fraction
    if spec.source == "movies" and share > 0:  # enough held-out films for accuracy to move in steps of ~2%
        share = max(share, MOVIES_MIN_HELD_OUT)
    train, held = split_rows(rows, share, seed, spec.limit)
    if not train:
        raise DatasetError(f"{spec.source}: nothing left to train on after holding out the eval split.")
    return train, held

