"""Run directories on disk: where they live, their status, and reading back what a trainer wrote.

A run directory is the only thing the trainer and the UI share:
    config.json   the RunConfig (written once, atomically)
    status.json   queued/running/finished/failed/stopped + pid, times, error (atomic rewrite)
    metrics.jsonl one JSON line per optimizer step (append-only)
    groups.jsonl  per step: each prompt's G completions, rewards, totals, advantages (append-only)
    evals.jsonl   per probe step: greedy answers to held-out prompts and their scores (append-only)
    train.log     the trainer's log
    checkpoint-N/ resumable checkpoints; `.complete` marks one that finished saving
    adapter/      LoRA adapter;  merged/  base + LoRA merged, ready to chat
No torch or gradio import here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

STATES = ("new", "queued", "running", "finished", "failed", "stopped")  # "new": a config, never started
QUEUED_GRACE_S = 120  # a launch that wrote "queued" but no launcher record by then never started
ACTIVE_STATES = ("queued", "running")
CHECKPOINT_MARKER = ".complete"
LAUNCHER_FILE = "launcher.json"  # pid of the process the app started (torchrun or the trainer itself)


# ---- locations ---------------------------------------------------------------------------------


def data_dir() -> Path:
    """The app's data directory: $GRPO_STUDIO_DATA, else ./data."""
    path = Path(os.environ.get("GRPO_STUDIO_DATA") or "data").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def runs_dir() -> Path:
    path = data_dir() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:40] or "run"


def new_run_dir(label: str = "run") -> Path:
    """A fresh, unique run directory under runs/ named by time and label."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = runs_dir() / f"{stamp}-{_slug(label)}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    path.mkdir(parents=True)
    return path


# ---- safe writes -------------------------------------------------------------------------------


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON so a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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


def _last_per_step(rows: list[dict]) -> list[dict]:
    # After a resume the trainer re-logs steps past the checkpoint; the newest line wins.
    by_step: dict[int, dict] = {}
    for row in rows:
        if isinstance(row.get("step"), int):
            by_step[row["step"]] = row
    return [by_step[k] for k in sorted(by_step)]


def read_metrics(run_dir: str | Path) -> list[dict]:
    return _last_per_step(read_jsonl(Path(run_dir) / "metrics.jsonl"))


def read_groups(run_dir: str | Path) -> list[dict]:
    return _last_per_step(read_jsonl(Path(run_dir) / "groups.jsonl"))


def read_evals(run_dir: str | Path) -> list[dict]:
    """Probe lines (pipeline/probes.py) by step; a probe re-run after a resume replaces the old line."""
    return _last_per_step(read_jsonl(Path(run_dir) / "evals.jsonl"))


# ---- status ------------------------------------------------------------------------------------


def _process_alive(pid: int | None, create_time: float | None) -> bool:
    if not pid:
        return False
    try:
        import psutil

        proc = psutil.Process(int(pid))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        # A recycled pid belongs to a different process: compare start times.
        return create_time is None or abs(proc.create_time() - float(create_time)) < 1.0
    except Exception:  # noqa: BLE001 - no such process, or no permission: treat as gone
        return False


def process_create_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001
        return None


def write_status(run_dir: str | Path, state: str, **fields: Any) -> dict:
    """Update status.json (merging with what is there) atomically."""
    if state not in STATES:
        raise ValueError(f"state must be one of {STATES}")
    path = Path(run_dir) / "status.json"
    current = _read_json(path) or {}
    current.update(fields)
    current["state"] = state
    current["updated_at"] = time.time()
    if state not in ACTIVE_STATES:
        current.setdefault("ended_at", time.time())
    write_json_atomic(path, current)
    return current


def _read_json(path: Path) -> dict | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        return obj if isinstance(obj, dict) else None
    except (OSError, json.JSONDecodeError):
        return None


def launcher(run_dir: str | Path) -> dict | None:
    return _read_json(Path(run_dir) / LAUNCHER_FILE)


def launcher_alive(run_dir: str | Path) -> bool:
    """Whether the process the app launched for this run (trainer or torchrun) still exists."""
    info = launcher(run_dir) or {}
    return _process_alive(info.get("pid"), info.get("create_time"))


def read_json(path: str | Path) -> dict | None:
    """A JSON file's object, or None when it is missing or unreadable."""
    return _read_json(Path(path))


def read_status(run_dir: str | Path) -> dict:
    """status.json, corrected for a trainer that died without saying so (SIGKILL, OOM killer)."""
    run_dir = Path(run_dir)
    status = _read_json(run_dir / "status.json")
    if status is None:
        # A folder with a config that no trainer ever started (a template, a copied run): not active.
        exists = (run_dir / "config.json").exists()
        return {"state": "new"} if exists else {"state": "failed", "error": "This run folder has no config.json."}
    state = status.get("state")
    if state == "running":
        alive = _process_alive(status.get("pid"), status.get("pid_create_time"))
    elif state == "queued" and launcher(run_dir):
        info = launcher(run_dir) or {}
        alive = _process_alive(info.get("pid"), info.get("create_time"))
    elif state == "queued":
        alive = time.time() - float(status.get("queued_at") or 0) < QUEUED_GRACE_S
    else:
        alive = True
    if not alive:
        status = dict(status)
        status["state"] = "failed"
        status["error"] = status.get("error") or (
            "The trainer process exited without reporting (killed, or out of memory). "
            "See the log tail; resume continues from the last complete checkpoint."
        )
        status["crashed"] = True
    return status


def log_tail(run_dir: str | Path, lines: int = 40, name: str = "train.log") -> str:
    path = Path(run_dir) / name
    if not path.exists():
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 64 * 1024))
        text = fh.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


# ---- checkpoints -------------------------------------------------------------------------------


def checkpoints(run_dir: str | Path, complete_only: bool = True) -> list[Path]:
    """checkpoint-N folders sorted by step; by default only those whose save finished."""
    out = []
    for p in Path(run_dir).glob("checkpoint-*"):
        m = re.fullmatch(r"checkpoint-(\d+)", p.name)
        if m and p.is_dir() and (not complete_only or (p / CHECKPOINT_MARKER).exists()):
            out.append((int(m.group(1)), p))
    return [p for _, p in sorted(out)]


def last_complete_checkpoint(run_dir: str | Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def prune_checkpoints(run_dir: str | Path, keep: int) -> list[Path]:
    """Delete complete checkpoints older than the newest `keep` (0 keeps all); returns the deleted ones.

    Unfinished folders are left alone: one is the save in progress, others are resume's to remove.
    Each loses its marker before its files, so a kill mid-delete leaves a folder that reads as incomplete.
    """
    if keep <= 0:
        return []
    old = checkpoints(run_dir)[:-keep]
    for ckpt in old:
        (ckpt / CHECKPOINT_MARKER).unlink(missing_ok=True)
        shutil.rmtree(ckpt, ignore_errors=True)
    return old


def checkpoint_step(path: str | Path) -> int:
    return int(Path(path).name.split("-")[-1])


# ---- listing -----------------------------------------------------------------------------------


def iter_run_dirs() -> Iterator[Path]:
    for p in sorted(runs_dir().iterdir(), reverse=True):
        if p.is_dir() and (p / "config.json").exists():
            yield p


def run_summary(run_dir: str | Path) -> dict:
    """One row of the runs list."""
    run_dir = Path(run_dir)
    cfg = _read_json(run_dir / "config.json") or {}
    status = read_status(run_dir)
    metrics = read_metrics(run_dir)
    last = metrics[-1] if metrics else {}
    started, ended = status.get("started_at"), status.get("ended_at")
    duration = (ended or time.time()) - started if started else None
    return {
        "run": run_dir.name,
        "path": str(run_dir),
        "state": status.get("state"),
        "model": cfg.get("model"),
        "dataset": (cfg.get("dataset") or {}).get("source"),
        "rewards": ", ".join(r.get("name", "?") for r in cfg.get("rewards", [])),
        "step": last.get("step", 0),
        "max_steps": cfg.get("max_steps"),
        "final_reward": last.get("reward"),
        "duration_s": round(duration, 1) if duration is not None else None,
        "error": status.get("error"),
    }


def list_runs() -> list[dict]:
    return [run_summary(p) for p in iter_run_dirs()]


def delete_run(run_dir: str | Path) -> None:
    """Remove a run directory, refusing anything outside runs/ or a run that is still training."""
    run_dir = Path(run_dir).resolve()
    if run_dir.parent != runs_dir():
        raise ValueError("Only run directories under the data directory's runs/ can be deleted.")
    if read_status(run_dir).get("state") in ACTIVE_STATES:
        raise ValueError("This run is still training: stop it first.")
    shutil.rmtree(run_dir)
