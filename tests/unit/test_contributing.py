"""CONTRIBUTING.md stays true about the tree: every file and folder its layout block names exists, and every
`path: name` it points a reader at is still in that file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "CONTRIBUTING.md"
NAME = re.compile(r"^[\w.-]+/?$")  # a file or folder name as the layout's first column spells it
FILE_IN_TEXT = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:py|jsonl|css|md|sh|txt))\b")
FOLDER_IN_TEXT = re.compile(r"(?<![\w/.-])((?:[\w-]+/)+)(?=[\s,;)]|$)")
# `ui/charts.py: CHARTS`, `app.py: tab_builders()`, `pipeline/setup/config.py:RunConfig`
POINTER = re.compile(r"`((?:[\w-]+/)*[\w-]+\.py): ?([A-Za-z_]\w*)")
# `jobstate.write_state`, `jobs.declare(Job(...))`: a module of ours and a name in it
MODULE_NAME = re.compile(r"`([a-z_]+)\.([A-Za-z_]\w*)")
# `tests/unit/test_job_kinds.py`, `pipeline/rewards/`, `bench/rag_relevance.py`
BACKTICKED_PATH = re.compile(r"`((?:[\w-]+/)+(?:[\w-]+\.\w+)?)[`:]")
PACKAGES = ("pipeline", "pipeline/run_folder", "pipeline/models", "pipeline/rewards", "pipeline/setup", "pipeline/training",
            "ui", "retrieval")
EXTENSIONS = {"json", "jsonl", "py", "md", "txt", "css"}  # `config.json` names a file, not config's json


def made_by_running() -> set[str]:
    """Folders .gitignore lists (test screenshots, benchmark output): they appear once something runs."""
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip().endswith("/")}


def layout_block(text: str) -> list[str]:
    """The lines of the first code block after the Layout heading."""
    after = text.split("## Layout", 1)[1]
    return after.split("```", 2)[1].strip("\n").splitlines()


def layout_paths(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(path as written, the folders it may be relative to) for every name in the layout block.

    A line that starts at column 0 names a top-level entry and opens its folder; an indented line starts with
    names inside that folder (one, or several side by side), and its description may name more files, inside
    the entry it describes, its folder, or the root.

    >>> layout_paths(["pipeline/    no Gradio", "  rewards/   by kind, registry.py", "  a.py b.py",
    ...               "             see bench/results/"])  # doctest: +NORMALIZE_WHITESPACE
    [('pipeline/', ['']), ('pipeline/rewards/', ['']), ('registry.py', ['pipeline/rewards/', 'pipeline/', '']),
     ('pipeline/a.py', ['']), ('pipeline/b.py', ['']), ('bench/results/', ['pipeline/', ''])]
    """
    found: list[tuple[str, list[str]]] = []
    folder = entry = ""
    for line in lines:
        words = line.split()
        if not words:
            continue
        indent = len(line) - len(line.lstrip())
        names: list[str] = []
        if indent == 0:
            names, folder, entry = [words[0]], "", ""
        elif indent == 2:
            names = _leading(words)
            entry = ""
        for name in names:
            found.append((folder + name, [""]))
            if name.endswith("/"):
                entry = folder + name if indent else ""
        if indent == 0 and words[0].endswith("/"):
            folder = words[0]
        description = " ".join(words[len(names):])
        bases = list(dict.fromkeys([b for b in (entry, folder) if b] + [""]))
        for match in [*FILE_IN_TEXT.findall(description), *FOLDER_IN_TEXT.findall(description)]:
            found.append((match, bases))
    return found


def _leading(words: list[str]) -> list[str]:
    """The names a layout line starts with: file or folder names, up to the first word of its description."""
    names = []
    for word in words:
        if not NAME.match(word) or not ("." in word or word.endswith("/")):
            break
        names.append(word)
    return names


def missing_layout_paths() -> list[str]:
    missing = []
    for path, bases in layout_paths(layout_block(GUIDE.read_text(encoding="utf-8"))):
        if not any((ROOT / base / path).exists() for base in bases):
            missing.append(f"{path} (looked in: {', '.join(b or './' for b in bases)})")
    return missing


def pointers(text: str) -> list[tuple[str, str | None]]:
    """(file, name in it or None) for every code span that points at our tree: `path.py: name`,
    `module.name` for a module of ours, and a bare `folder/` or `folder/file` path."""
    found: list[tuple[str, str | None]] = [(path, name) for path, name in POINTER.findall(text)]
    for module, name in MODULE_NAME.findall(text):
        if name in EXTENSIONS:
            continue
        for package in PACKAGES:
            if (ROOT / package / f"{module}.py").is_file():
                found.append((f"{package}/{module}.py", name))
                break
    found += [(path, None) for path in BACKTICKED_PATH.findall(text) if path not in made_by_running()]
    return found


def stale_pointers() -> list[str]:
    """Pointers whose file is gone, or whose file no longer mentions the name."""
    stale = []
    for path, name in pointers(GUIDE.read_text(encoding="utf-8")):
        source = ROOT / path
        if not source.exists():
            stale.append(f"{path}: no such file or folder")
        elif name and not re.search(rf"\b{re.escape(name)}\b", source.read_text(encoding="utf-8")):
            stale.append(f"{path}: no {name}")
    return stale


def test_the_layout_block_names_only_what_exists():
    assert len(layout_paths(layout_block(GUIDE.read_text(encoding="utf-8")))) > 40  # the parser found the block
    assert missing_layout_paths() == []


def test_every_file_and_name_it_points_at_exists():
    assert len(pointers(GUIDE.read_text(encoding="utf-8"))) > 15  # the patterns still match the guide's style
    assert stale_pointers() == []
