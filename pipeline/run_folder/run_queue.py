"""Runs waiting their turn: a training can be queued while another trains, and starts when the machine is free
(pipeline/runner.py starts them, oldest first). The line is one file, runs/.queue.json, so it survives a page
reload and an app restart; each entry keeps the run's whole settings, its name, who queued it and how it is
launched. Every change to the file is made under the runs folder's start lock (the caller holds it). An entry that
could not start stays in the line with the reason, until its owner removes it: its settings are never lost.
No torch or gradio import.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.run_folder import owners, run_files
from pipeline.run_folder.jsonio import read_json, write_json_atomic
from pipeline.run_folder.runs import runs_dir

# What every queued run's summary shows already (Waiting.summary).
SUMMARISED = ("max_steps", "learning_rate", "num_generations", "rewards")
MAX_WAITING = 20  # one user's sweep of a few settings fits; a script that queues without end is told no
# How long after a queued run starts a page showing the run before it moves to the new one (ui: the live view). A page
# behind other browser tabs for minutes may poll only once a minute: the window covers one such poll and a late one.
FOLLOW_S = 90.0


class QueueError(ValueError):
    """The line can't take or give up an entry; the message says why."""


@dataclass
class Waiting:
    """One queued training: everything `runner.start("train", ...)` needs, kept until it starts."""

    label: str
    config: dict
    owner: str | None = None
    nproc: int = 1
    allow_custom_rewards: bool = False
    queued_at: float = field(default_factory=time.time)
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    error: str | None = None  # why it could not start, when it could not: it waits for its owner to remove it

    @classmethod
    def from_dict(cls, data: dict) -> "Waiting":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def summary(self, also: list[str] = ()) -> str:
        """Its settings in a few words: what a user tells two queued runs apart by; `also` names more settings to
        show (those that differ between the queued runs: Queue.varying).

        >>> Waiting("a", {"max_steps": 8, "learning_rate": 1e-4, "num_generations": 4, "beta": 0.04,
        ...               "rewards": [{"name": "length_target", "weight": 1.0}]}).summary(["beta"])
        '8 steps, lr 0.0001, G=4, beta 0.04, length_target×1.0'
        """
        shown = [f"{self.config.get('max_steps')} steps", f"lr {self.config.get('learning_rate')}",
                 f"G={self.config.get('num_generations')}", *(f"{key} {self.config.get(key)}" for key in also)]
        rewards = [r for r in self.config.get("rewards") or [] if isinstance(r, dict)]
        shown += [f"{r.get('name')}×{r.get('weight')}" for r in rewards]
        return ", ".join(shown)


@dataclass
class Queue:
    """The file's contents: the line in order, and the latest runs it started ({"run", "after", "at"})."""

    waiting: list[Waiting] = field(default_factory=list)
    started: list[dict] = field(default_factory=list)

    def ready(self) -> Waiting | None:
        """The first entry that can be started (entries that failed to start wait for their owner)."""
        return next((w for w in self.waiting if w.error is None), None)

    def varying(self) -> list[str]:
        """The settings, beyond those every summary shows, whose values differ between the waiting runs (what a
        sweep of beta or the seed varies), in the config's order.

        >>> Queue([Waiting("a", {"beta": 0.0, "seed": 1}), Waiting("b", {"beta": 0.04, "seed": 1})]).varying()
        ['beta']
        """
        keys = [key for key in (self.waiting[0].config if self.waiting else {}) if key not in SUMMARISED]
        return [key for key in keys if isinstance(self.waiting[0].config[key], (int, float, str))
                and len({repr(w.config.get(key)) for w in self.waiting}) > 1]

    def position(self, entry_id: str) -> int:
        """1 for the next to start, counting only entries that can start; 0 when it is not in the line."""
        ready = [w.id for w in self.waiting if w.error is None]
        return ready.index(entry_id) + 1 if entry_id in ready else 0


def queue_file() -> Path:
    return runs_dir() / run_files.QUEUE


def read(strict: bool = False) -> Queue:
    """The line as it is on disk (empty when there is none). A file that can't be read reads as empty, or, when
    `strict` (before a change is written over it), raises QueueError: the entries in it are not lost."""
    path = queue_file()
    data = read_json(path)
    if not isinstance(data, dict):
        if strict and path.exists():
            raise QueueError(f"The queue file {path} can't be read: move it away to start a new queue.")
        return Queue()
    waiting = [Waiting.from_dict(w) for w in data.get("waiting") or [] if isinstance(w, dict) and "config" in w]
    started = [s for s in data.get("started") or [] if isinstance(s, dict)]
    return Queue(waiting, started)


def write(queue: Queue) -> None:
    write_json_atomic(queue_file(), {"waiting": [asdict(w) for w in queue.waiting], "started": queue.started[-5:]})


def has_waiting() -> bool:
    """Whether anything may be ready to start (the app's keeper asks every few seconds): no read without a file."""
    try:
        return queue_file().stat().st_size > 0 and read().ready() is not None
    except OSError:
        return False


def add(*entries: Waiting) -> int:
    """Put `entries` at the end of the line, all or none (the caller holds the start lock); returns the first's
    position."""
    queue = read(strict=True)
    if len(queue.waiting) + len(entries) > MAX_WAITING:
        room = max(MAX_WAITING - len(queue.waiting), 0)
        raise QueueError(f"The queue already holds {len(queue.waiting)} runs, and takes at most {MAX_WAITING}: "
                         f"room for {room} more. Wait for some to start, or remove some.")
    queue.waiting.extend(entries)
    write(queue)
    return queue.position(entries[0].id)


def remove(entry_id: str, actor: owners.Actor | None = None) -> Waiting:
    """Take an entry out of the line: its owner's, or an operator's, to take (the caller holds the start lock)."""
    queue = read(strict=True)
    entry = next((w for w in queue.waiting if w.id == entry_id), None)
    if entry is None:
        raise QueueError("That run is no longer in the queue: it has started, or was removed.")
    if not owners.may_act(entry.owner, actor):
        raise QueueError(f"'{entry.label}' was queued by {entry.owner}: only they, or an operator, may remove it.")
    queue.waiting = [w for w in queue.waiting if w.id != entry_id]
    write(queue)
    return entry


def started(queue: Queue, entry: Waiting, run: str, after: str | None, now: float | None = None) -> None:
    """Record that `entry` started as `run` (`after`: the run that last held the machine) and drop it."""
    queue.waiting = [w for w in queue.waiting if w.id != entry.id]
    queue.started.append({"run": run, "after": after, "at": time.time() if now is None else now, "label": entry.label})
    write(queue)


def failed(queue: Queue, entry: Waiting, reason: str) -> None:
    """Keep `entry` in the line, marked with why it could not start."""
    for w in queue.waiting:
        if w.id == entry.id:
            w.error = reason
    write(queue)


def follow(queue: Queue, shown: str | None, now: float | None = None) -> str | None:
    """The run a page showing `shown` should move to: the one the queue started just now after `shown` ended.

    >>> q = Queue(started=[{"run": "b", "after": "a", "at": 100.0}])
    >>> follow(q, "a", now=105.0), follow(q, "a", now=165.0), follow(q, "a", now=300.0), follow(q, "c", now=105.0)
    ('b', 'b', None, None)
    """
    now = time.time() if now is None else now
    for record in reversed(queue.started):
        if record.get("after") == shown and shown and now - float(record.get("at") or 0) <= FOLLOW_S:
            return record.get("run")
    return None
