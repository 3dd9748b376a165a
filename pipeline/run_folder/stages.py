"""Training in stages: a new run that starts from the model an earlier run ended with.

A recipe often trains in stages (the format first, then correctness; one prompt set, then another). The next
stage is a new run whose model is the earlier run's tuned model, `<data>/runs/<run>/merged`. A run must not lean on
another run's folder, though: resuming the earlier run replaces its merged model, and deleting it removes it. So
when the new run's folder is made, the model is taken into it as `start_model/`: hard links to the same files (no
extra disk while both runs exist; a copy where the file system can't link), with `stage.json` saying which run and
step it came from. The new run's config names that folder, and the earlier run stays free to be resumed or deleted.

A model already inside a run folder as its `start_model/` (a staged run's settings loaded again) is taken the same
way, with the same record. Pure: no torch or gradio import.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

from pipeline.run_folder import run_files
from pipeline.run_folder.jobstate import ACTIVE_STATES, read_status
from pipeline.run_folder.jsonio import read_json, write_json_atomic
from pipeline.run_folder.paths import runs_dir

# Link failures a copy answers: another file system, links not allowed there, or too many links to one file.
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES}


class StageError(ValueError):
    """A next stage can't start from the model named; the message says why and what to do."""


def model_in_run(model: str | None) -> tuple[Path, Path] | None:
    """(run folder, model folder) when `model` is the path of a run's merged model or of a staged run's starting
    model, in this data folder's runs (whether or not it is still there); None for anything else (a hub id, the
    bundled model, another folder)."""
    if not model or not isinstance(model, str):
        return None
    path = Path(model.strip()).expanduser()
    if not path.is_absolute():
        return None
    run_dir = path.parent.resolve()  # the folder's own name is kept: a merged model may be a link (tests make one)
    path = run_dir / path.name
    if path.name not in (run_files.MERGED, run_files.STAGE_BASE) or run_dir.parent != runs_dir():
        return None
    return run_dir, path


def lineage(model: str | None) -> dict | None:
    """A staged run's record of where its starting model came from ({"run", "step", "stage", "from_model"}), read
    from `<model>/stage.json`; None for a model that is not a stage's."""
    found = model_in_run(model)
    if found is None or found[1].name != run_files.STAGE_BASE:
        return None
    record = read_json(found[1] / run_files.STAGE_FILE)
    return record if isinstance(record, dict) and record.get("run") else None


def stage_record(run_dir: Path, model_dir: Path) -> dict:
    """What a next stage records of the model it takes from `model_dir` in `run_dir`: the run and the step its
    model was saved at, which stage the new run is (2 after a plain run), and the model the first stage began
    from. A staged run's own starting model keeps its record."""
    if model_dir.name == run_files.STAGE_BASE:
        return dict(lineage(str(model_dir)) or {"run": run_dir.name})
    config = read_json(run_dir / run_files.CONFIG) or {}
    earlier = lineage(config.get("model"))
    return {"run": run_dir.name, "step": int(read_status(run_dir).get("step") or 0),
            "stage": int((earlier or {}).get("stage") or 1) + 1,
            "from_model": (earlier or {}).get("from_model") or config.get("model")}


def problem(model: str | None, waiting: bool = False) -> str | None:
    """Why a new run can't start from `model` now, in words; None when it can (or `model` is no run's). A run
    `waiting` in the queue may name the model of a run still training: it starts after that run ends."""
    found = model_in_run(model)
    if found is None:
        return None
    run_dir, model_dir = found
    name = run_dir.name
    if not (run_dir / run_files.CONFIG).exists():
        return f"Run '{name}' is no longer on disk: pick another run, or another model."
    if model_dir.name == run_files.MERGED:
        state = read_status(run_dir).get("state")
        if state in ACTIVE_STATES:
            return None if waiting else (f"Run '{name}' is still training: its tuned model is written when it "
                                         "ends. Start the next stage then, or add it to the queue.")
        if run_files.merged_model(run_dir) is None:
            return (f"Run '{name}' has no tuned model to start from (it is {state or 'not started'}): resume it to "
                    "its end, or pick a finished or stopped run.")
    elif not (model_dir / run_files.CONFIG).exists():
        return f"Run '{name}' has no starting model left to take."
    return None


def take_model(model: str, run_dir: Path) -> str:
    """The model the new run at `run_dir` trains from: `model` itself, or, when that is a model inside a run
    folder, the new run's own `start_model/` made here from it (see the module's docstring). Raises StageError
    when it can't be taken."""
    found = model_in_run(model)
    if found is None:
        return model
    why = problem(model)
    if why:
        raise StageError(why)
    source_run, source = found
    record = stage_record(source_run, source)
    base = Path(run_dir) / run_files.STAGE_BASE
    partial = base.with_name(f".{base.name}.tmp")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        link_tree(source, partial)
        (partial / run_files.STAGE_FILE).unlink(missing_ok=True)  # a staged run's record: written afresh below
        write_json_atomic(partial / run_files.STAGE_FILE, record)
        os.replace(partial, base)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return str(base)


def link_tree(source: Path, target: Path) -> None:
    """Every regular file under `source` under `target` too, hard-linked (copied where linking fails). Links
    inside `source` are left out: a model folder has none, and one could point anywhere."""
    for root, _, files in os.walk(source):
        into = target / Path(root).relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            src = Path(root) / name
            if src.is_symlink():
                continue
            try:
                os.link(src, into / name)
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                shutil.copy2(src, into / name)


def model_label(model: str | None) -> str | None:
    """How the runs list names a run's model: a staged run's as the run and step it came from.

    >>> model_label("bundled/SmolLM2-135M-Instruct")
    'bundled/SmolLM2-135M-Instruct'
    """
    record = lineage(model)
    if record is None:
        return model
    step = f", step {record['step']}" if record.get("step") is not None else ""
    return f"↳ {record['run']}{step}"


def started_from(model: str | None) -> str | None:
    """A next stage's starting model in words ("<run> at step 11"); None for a model that is not a stage's."""
    record = lineage(model)
    if record is None:
        return None
    return f"{record['run']} at step {record['step']}" if record.get("step") is not None else str(record["run"])


def next_label(model: str | None) -> str | None:
    """The run name a next stage gets when none is typed: the earlier run's, without its start time, numbered
    (`smollm2-tldr-stage2`, then `-stage3`); None for a model that is no run's.

    >>> next_label("bundled/SmolLM2-135M-Instruct") is None
    True
    """
    found = model_in_run(model)
    if found is None:
        return None
    stem = re.sub(r"^\d{8}-\d{6}-", "", found[0].name)
    stem = re.sub(r"-stage\d+(-\d+)?$", "", stem) or "run"
    return f"{stem}-stage{int(stage_record(*found).get('stage') or 2)}"


def step_offsets(paths: dict[str, Path]) -> dict[str, int]:
    """For each run in `paths` that is a next stage of another run in `paths` (directly, or through stages also in
    it), how many steps its curves move right to go on from that run's: the step its model came from, plus that
    run's own move. Runs drawn without the run they came from keep their own steps (none is in the answer)."""
    came_from = {}
    for name, path in paths.items():
        record = lineage((read_json(Path(path) / run_files.CONFIG) or {}).get("model"))
        if record and record.get("run") in paths and record["run"] != name:
            came_from[name] = (record["run"], int(record.get("step") or 0))

    def offset(name: str, seen: frozenset = frozenset()) -> int:
        if name not in came_from or name in seen:
            return 0
        earlier, step = came_from[name]
        return step + offset(earlier, seen | {name})

    return {name: offset(name) for name in came_from}


def shifted(rows_by_run: dict[str, list[dict]], offsets: dict[str, int]) -> dict[str, list[dict]]:
    """Each run's rows (metrics or probes) with their steps moved by its offset from step_offsets, for a chart.

    >>> shifted({"a": [{"step": 0}, {"step": 2}], "b": [{"step": 1}]}, {"a": 11})
    {'a': [{'step': 11}, {'step': 13}], 'b': [{'step': 1}]}
    """
    return {name: [{**row, "step": int(row.get("step") or 0) + offsets[name]} for row in rows] if offsets.get(name)
            else rows for name, rows in rows_by_run.items()}

