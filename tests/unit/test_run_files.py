"""Run file names have one owner, pipeline/run_folder/run_files.py: no module of the app spells one as a string of its own,
so renaming a file (or asking where one is written) is one place to look."""

from __future__ import annotations

import ast
from pathlib import Path

from pipeline.run_folder import run_files

ROOT = Path(__file__).resolve().parents[2]
# The same words meaning something other than a run file: a Hugging Face model folder's config.json, the
# bundled model's conversion marker, and the report_to choice that names TensorBoard.
OTHER_MEANINGS = {
    "pipeline/setup/gpu_memory.py": {"config.json"},
    "pipeline/models/gguf_export.py": {"config.json"},
    "pipeline/models/loading.py": {"config.json", ".complete", "tensorboard"},
    "pipeline/setup/config.py": {"tensorboard"},
    "pipeline/train.py": {"tensorboard"},
}


def run_file_names() -> set[str]:
    return {value for name, value in vars(run_files).items() if name.isupper() and isinstance(value, str)}


def literals_naming_run_files() -> list[str]:
    names = run_file_names()
    found = []
    sources = [ROOT / "app.py", *(p for d in ("pipeline", "ui", "retrieval") for p in sorted((ROOT / d).rglob("*.py")))]
    for path in sources:
        rel = path.relative_to(ROOT).as_posix()
        if rel == "pipeline/run_folder/run_files.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names - OTHER_MEANINGS.get(rel, set()):
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    return found


def test_no_module_spells_a_run_file_name_of_its_own():
    assert {"config.json", "status.json", "metrics.jsonl", "merged", "adapter", "groups.jsonl"} <= run_file_names()
    assert literals_naming_run_files() == []
