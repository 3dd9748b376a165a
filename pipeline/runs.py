"""Run directories on disk: where they live, their status, and reading back what a trainer wrote.

A run directory is the only thing the trainer, the evaluator and the UI share. Which file holds what,
who writes it and when is decided in one place, docs/run-files.md; `STATE_WRITERS` below enforces it
(every state write goes through `write_state`).

Readers (`read_status`, `read_eval_status`) never write: a writer that died without saying so reads
as failed. Each writer may write only its own states (`STATE_WRITERS`); a launch never overwrites
a live process's "running". No torch or gradio import here.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from pipeline.paths import data_dir  # also imported from here by the app and the tabs

STATES = ("new", "queued", "running", "finished", "failed", "stopped")  # "new": a config, never started
DAMAGED = "damaged"  # read only: a run whose config.json or status.json can't be read (never written)
QUEUED_GRACE_S = 120  # a launch that wrote "queued" but no launcher record by then never started
ACTIVE_STATES = ("queued", "running")
CHECKPOINT_MARKER = ".complete"
LAUNCHER_FILE = "launcher.json"  # pid of the process the app started (torchrun or the trainer itself)
STATUS_FILE = "status.json"
LAUNCHES_FILE = "launches.jsonl"
EVAL_STATUS_FILE = "eval_status.json"
EVAL_LAUNCHER_FILE = "eval_launcher.json"
EVAL_STATES = ("queued", "running", "done", "failed", "stopped")
# Who may write which state to which file (the table in docs/run-files.md).
STATE_WRITERS: dict[tuple[str, str], tuple[str, ...]] = {
    (STATUS_FILE, "launcher"): ("queued", "failed"),  # "failed": the trainer could not be started
    (STATUS_FILE, "trainer"): ("running", "finished", "stopped", "failed"),
    (EVAL_STATUS_FILE, "launcher"): ("queued",),
    (EVAL_STATUS_FILE, "evaluator"): ("running", "done", "failed", "stopped"),
}


# ---- locations ---------------------------------------------------------------------------------


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


def write_state(run_dir: str | Path, name: str, writer: str, state: str, fresh: bool = False,
                **fields: Any) -> dict:
    """The one way a state file (status.json, eval_status.json) is written: merged with what is there
    (or `fresh`: replacing it), atomically, by a writer that owns `state` (STATE_WRITERS).

    A launch ("queued") never overwrites a process that says it is running and is still alive."""
    allowed = STATE_WRITERS.get((name, writer))
    if allowed is None or state not in allowed:
        raise ValueError(f"The {writer} does not write state {state!r} to {name}; see the table in docs/run-files.md.")
    path = Path(run_dir) / name
    current = _read_json(path) or {}
    if state == "queued" and current.get("state") == "running" and _process_alive(
            current.get("pid"), current.get("pid_create_time")):
        raise RuntimeError(f"{name}: pid {current.get('pid')} is still running; a new launch must wait for it.")
    if fresh:
        current = {}
    current.update(fields)
    current["state"] = state
    current["updated_at"] = time.time()
    if state not in ACTIVE_STATES and current.get("ended_at") is None:  # a launch reset it to None
        current["ended_at"] = time.time()
    write_json_atomic(path, current)
    return current


def write_status(run_dir: str | Path, state: str, writer: str | None = None, **fields: Any) -> dict:
    """Update status.json (merging with what is there) atomically. `writer` defaults to the state's
    owner: the launcher writes "queued", the trainer every other state."""
    if state not in STATES:
        raise ValueError(f"state must be one of {STATES}")
    writer = writer or ("launcher" if state == "queued" else "trainer")
    return write_state(run_dir, STATUS_FILE, writer, state, **fields)


def _read_json(path: Path) -> dict | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        return obj if isinstance(obj, dict) else None
    except (OSError, ValueError):  # missing, unreadable, not UTF-8, not JSON
        return None


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


def run_problems(run_dir: str | Path, active: bool = False) -> list[str]:
    """What is wrong with a run's files, for the runs list; empty for a healthy run."""
    run_dir = Path(run_dir)
    out = [p for p in (file_problem(run_dir / "config.json"),) if p]
    if (run_dir / "status.json").exists() and (p := file_problem(run_dir / "status.json")):
        out.append(p)
    for name in ("metrics.jsonl", "groups.jsonl", "evals.jsonl"):
        bad = unreadable_lines(run_dir / name, active=active)
        if bad:
            lines = ", ".join(map(str, bad[:3])) + (" ..." if len(bad) > 3 else "")
            out.append(f"{name}: {len(bad)} unreadable line{'s' if len(bad) > 1 else ''} skipped (line {lines}).")
    return out


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
        if (run_dir / "status.json").exists():
            return {"state": DAMAGED, "error": file_problem(run_dir / "status.json")}
        # A folder with a config that no trainer ever started (a template, a copied run): not active.
        exists = (run_dir / "config.json").exists()
        return {"state": "new"} if exists else {"state": "failed", "error": "This run folder has no config.json."}
    if not _writer_alive(status, launcher(run_dir)):
        status = dict(status)
        status["state"] = "failed"
        status["error"] = status.get("error") or (
            "The trainer process exited without reporting (killed, or out of memory). "
            "See the log tail; resume continues from the last complete checkpoint."
        )
        status["crashed"] = True
    return status


def _writer_alive(status: dict, launcher_info: dict | None) -> bool:
    """Whether an active state file still has a live writer: "running" names its process, "queued" its
    launcher's (or is young enough that the launcher record may still come). Other states: True."""
    state = status.get("state")
    if state == "running":
        return _process_alive(status.get("pid"), status.get("pid_create_time"))
    if state == "queued" and launcher_info:
        return _process_alive(launcher_info.get("pid"), launcher_info.get("create_time"))
    if state == "queued":
        return time.time() - float(status.get("queued_at") or 0) < QUEUED_GRACE_S
    return True


# ---- evaluation jobs ---------------------------------------------------------------------------


def write_eval_status(run_dir: str | Path, state: str, writer: str = "evaluator", **fields: Any) -> dict:
    """Update eval_status.json (owners: docs/run-files.md). The launcher's "queued" starts a fresh file."""
    return write_state(run_dir, EVAL_STATUS_FILE, writer, state, fresh=state == "queued", **fields)


def read_eval_status(run_dir: str | Path) -> dict | None:
    """eval_status.json (None when the run was never evaluated), corrected for an evaluator that died
    without saying so."""
    run_dir = Path(run_dir)
    status = _read_json(run_dir / EVAL_STATUS_FILE)
    if status is None:
        if (run_dir / EVAL_STATUS_FILE).exists():
            return {"state": "failed", "error": file_problem(run_dir / EVAL_STATUS_FILE)}
        return None
    if not _writer_alive(status, _read_json(run_dir / EVAL_LAUNCHER_FILE)):
        status = {**status, "state": "failed", "crashed": True,
                  "error": status.get("error") or "The evaluation process exited without reporting (killed, or "
                                                  "out of memory). See eval.log; press Evaluate to run it again."}
    return status


def eval_active(run_dir: str | Path) -> bool:
    return (read_eval_status(run_dir) or {}).get("state") in ACTIVE_STATES


def eval_launcher_alive(run_dir: str | Path) -> bool:
    info = _read_json(Path(run_dir) / EVAL_LAUNCHER_FILE) or {}
    return _process_alive(info.get("pid"), info.get("create_time"))


# ---- launches and the effective config ------------------------------------------------------------


def read_launches(run_dir: str | Path) -> list[dict]:
    """launches.jsonl: one line per trainer start (fresh or resume), oldest first."""
    return read_jsonl(Path(run_dir) / LAUNCHES_FILE)


def record_launch(run_dir: str | Path, resume: bool, from_step: int, overrides: dict, argv: list[str]) -> dict:
    """Append this trainer start to the run's history (the trainer's rank 0 calls it)."""
    row = {"time": time.time(), "resume": bool(resume), "from_step": int(from_step), "overrides": dict(overrides),
           "argv": list(argv)}
    append_jsonl(Path(run_dir) / LAUNCHES_FILE, row)
    return row


def apply_overrides(config: dict, launches: list[dict]) -> dict:
    """config.json's settings with each launch's overrides applied in order (a later one wins).

    >>> apply_overrides({"max_steps": 4, "seed": 1}, [{"overrides": {"max_steps": 5}}, {"overrides": {"max_steps": 6}}])
    {'max_steps': 6, 'seed': 1}
    """
    out = dict(config)
    for launch in launches:
        overrides = launch.get("overrides")
        if isinstance(overrides, dict):
            out.update(overrides)
    return out


def effective_config(run_dir: str | Path) -> dict:
    """The settings the run trains with: config.json plus the overrides in launches.jsonl ({} when
    config.json can't be read)."""
    run_dir = Path(run_dir)
    cfg = _read_json(run_dir / "config.json")
    return apply_overrides(cfg, read_launches(run_dir)) if cfg else {}


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


# ---- a full disk -------------------------------------------------------------------------------

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
# How libraries that write in C++ or Rust word the same thing (torch.save, safetensors).
DISK_FULL_MARKERS = ("no space left", "file too large", "disk quota", "os error 28", "os error 27",
                     "os error 122", "file write failed")


def is_disk_full(exc: BaseException | None) -> bool:
    """True when an error (or one it was raised from) says the disk, a quota or a file-size limit is full.

    >>> is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    True
    >>> is_disk_full(RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"))
    True
    >>> is_disk_full(ValueError("bad value"))
    False
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        if any(m in str(exc).lower() for m in DISK_FULL_MARKERS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def disk_full_message(run_dir: str | Path, exc: BaseException) -> str:
    """What a user reads when a run stops because the disk filled up, and what to do next."""
    run_dir = Path(run_dir)
    last = last_complete_checkpoint(run_dir)
    try:
        free = shutil.disk_usage(run_dir).free / 2**20
        free_text = f" ({free:,.0f} MB free there now)"
    except OSError:
        free_text = ""
    detail = " ".join(str(exc).split())[:200]
    then = (f"then Resume continues from {last.name}, the last complete checkpoint."
            if last else "then start the run again: no checkpoint was complete.")
    return (f"Disk full: the run could not write its files ({detail}). Free space on the disk that holds "
            f"{run_dir}{free_text}, or save checkpoints less often / keep fewer; {then}")


# ---- listing -----------------------------------------------------------------------------------


def resolve_run(name: str | None) -> Path | None:
    """The folder of the run called `name`, or None when there is no such run. The one place a run name
    from the UI or a model choice becomes a path: only a direct child of runs/ holding a config.json,
    never a user-supplied path (`../x`, `/etc`, `a/b` all give None)."""
    if not name or not isinstance(name, str) or name != Path(name).name or name in (".", ".."):
        return None  # a name, not a path
    path = (runs_dir() / name).resolve()
    if path.parent != runs_dir() or not (path / "config.json").exists():
        return None
    return path


def iter_run_dirs() -> Iterator[Path]:
    for p in sorted(runs_dir().iterdir(), reverse=True):
        if p.is_dir() and (p / "config.json").exists():
            yield p


def run_summary(run_dir: str | Path) -> dict:
    """One row of the runs list."""
    run_dir = Path(run_dir)
    cfg = effective_config(run_dir)
    status = read_status(run_dir)
    problems = run_problems(run_dir, active=status.get("state") in ACTIVE_STATES)
    if problems and (status.get("state") != DAMAGED) and not cfg:
        status = {**status, "state": DAMAGED}  # a run without readable settings can't be resumed or compared
    metrics = read_metrics(run_dir)
    last = metrics[-1] if metrics else {}
    started, ended = status.get("started_at"), status.get("ended_at")
    duration = (ended or time.time()) - started if started else None
    return {
        "run": run_dir.name,
        "path": str(run_dir),
        "state": status.get("state"),
        "model": cfg.get("model"),
        "dataset": (cfg.get("dataset") or {}).get("source") if isinstance(cfg.get("dataset"), dict) else None,
        "rewards": ", ".join(str(r.get("name", "?")) for r in cfg.get("rewards") or [] if isinstance(r, dict)),
        "step": last.get("step", 0),
        "max_steps": cfg.get("max_steps"),
        "final_reward": last.get("reward"),
        "duration_s": round(duration, 1) if duration is not None else None,
        "error": status.get("error"),
        "problems": " ".join(problems) or None,
    }


def list_runs() -> list[dict]:
    """Every run's row; a run whose files can't be read is listed as damaged, never hides the others."""
    rows = []
    for path in iter_run_dirs():
        try:
            rows.append(run_summary(path))
        except Exception as exc:  # noqa: BLE001 - one broken run must not take the list down
            rows.append({"run": path.name, "path": str(path), "state": DAMAGED,
                         "problems": f"Can't be read: {type(exc).__name__}: {exc}"})
    return rows


def delete_run(run_dir: str | Path) -> None:
    """Remove a run directory, refusing anything outside runs/ or a run that is still training."""
    run_dir = Path(run_dir).resolve()
    if run_dir.parent != runs_dir():
        raise ValueError("Only run directories under the data directory's runs/ can be deleted.")
    if read_status(run_dir).get("state") in ACTIVE_STATES:
        raise ValueError("This run is still training: stop it first.")
    if eval_active(run_dir):
        raise ValueError("This run is being evaluated: wait for the evaluation or stop it first.")
    shutil.rmtree(run_dir)
