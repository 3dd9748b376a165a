"""What a run takes on disk, and the files exported from it: the Runs panel shows each run's size, and a delete can
take the run's exports with it and say how much space it gave back. Pure Python: no torch, no Gradio."""

from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

# What follows a run's name in the name of a file exported from it (pipeline/export.py): an optional checkpoint
# step, then the merged model (a zip, or the folder a checkpoint is merged into once), the adapter zip, a GGUF
# file of any type, the metrics CSV, the report page (ui/report.py), or a comparison led by the run
# (ui/comparison_report.py).
EXPORT_SUFFIX = re.compile(r"(-step\d+)?(-merged\.zip|-adapter\.zip|-merged|-[A-Za-z0-9_]+\.gguf|-metrics\.csv"
                           r"|-report\.html|-comparison\.html)")


def tree_bytes(path: str | Path, linked: bool = True) -> int:
    """Bytes of the regular files under `path` (or of `path` itself, a file). Links are not followed, so a run
    whose model is a link to another folder counts the link only; a file removed while counting counts 0.
    Not `linked`: a file with another name too (a next stage's hard-linked model) counts 0, so the figure is
    what removing `path` gives back."""
    total, own = tree_sizes(path)
    return total if linked else own


def tree_sizes(path: str | Path) -> tuple[int, int]:
    """tree_bytes both ways in one walk: (all the bytes, the bytes of files with no other name)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0, 0
    if not stat.S_ISDIR(st.st_mode):  # a file, or a link (lstat does not follow it)
        return st.st_size, st.st_size if st.st_nlink < 2 or stat.S_ISLNK(st.st_mode) else 0
    total = own = 0
    try:
        entries = list(os.scandir(path))
    except OSError:
        return 0, 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                sizes = tree_sizes(entry.path)
            else:
                st = entry.stat(follow_symlinks=False)
                sizes = st.st_size, st.st_size if st.st_nlink < 2 or entry.is_symlink() else 0
        except OSError:
            continue
        total, own = total + sizes[0], own + sizes[1]
    return total, own


def size_text(n: int) -> str:
    """A size as a person reads it, in the binary units the rest of the app uses.

    >>> [size_text(n) for n in (0, 900, 5 * 2**10, 86 * 2**20 + 1, int(1.34 * 2**30), 250 * 2**30)]
    ['0 B', '900 B', '5 KiB', '86 MiB', '1.3 GiB', '250 GiB']
    """
    if n >= 100 * 2**30:
        return f"{n / 2**30:.0f} GiB"
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.0f} {unit}"
    return f"{n} B"


def is_export_of(name: str, run_name: str) -> bool:
    """Whether a file or folder in the exports folder was exported from the run `run_name`. A run whose name
    only starts the same ("…-tldr" and "…-tldr-2") is another run: its exports are not this one's.

    >>> run = "20261127-101500-tldr"
    >>> [is_export_of(f"{run}{s}", run) for s in ("-merged.zip", "-step8-Q8_0.gguf", "-step8-merged", "-metrics.csv",
    ...                                                         "-report.html")]
    [True, True, True, True, True]
    >>> [is_export_of(n, run) for n in (f"{run}-2-merged.zip", f".{run}-F16.gguf.tmp", f"{run}.zip", "notes.txt")]
    [False, False, False, False]
    """
    return name.startswith(run_name) and EXPORT_SUFFIX.fullmatch(name[len(run_name):]) is not None


def run_exports(run_name: str, exports_dir: str | Path) -> list[Path]:
    """The files and folders exported from the run `run_name`, by name, in `exports_dir` (none when it is missing)."""
    try:
        names = sorted(os.listdir(exports_dir))
    except OSError:
        return []
    return [Path(exports_dir) / n for n in names if is_export_of(n, run_name)]


# A run folder's name: its start time, then its label (pipeline/run_folder/runs.py new_run_dir).
_RUN_NAME = r"\d{8}-\d{6}-[A-Za-z0-9-]+"


def looks_like_export(name: str) -> bool:
    """Whether a name in the exports folder has the shape of a run's export (a run folder's name, then an export
    suffix). Anything else there (a half-written `.tmp`, a file put there by hand) is never counted or removed.

    >>> [looks_like_export(n) for n in ("20261127-101500-tldr-merged.zip", "20261127-101500-a-b-step3-Q8_0.gguf")]
    [True, True]
    >>> [looks_like_export(n) for n in (".20261127-101500-tldr-F16.gguf.tmp", "notes-merged.zip", "x.txt")]
    [False, False, False]
    """
    return re.fullmatch(_RUN_NAME + EXPORT_SUFFIX.pattern, name) is not None


@dataclass
class ExportsFolder:
    """What the exports folder holds: each export by the run it came from, those whose run is gone, and the rest."""
    by_run: dict[str, list[Path]] = field(default_factory=dict)
    orphans: list[Path] = field(default_factory=list)

    @property
    def orphan_bytes(self) -> int:
        return sum(tree_bytes(p) for p in self.orphans)


def exports_folder(exports_dir: str | Path, run_names: list[str]) -> ExportsFolder:
    """Sort the exports folder: an export of a run on disk goes under that run (the longest name that matches, so
    "…-tldr-2-merged.zip" is "…-tldr-2"'s, not "…-tldr"'s); an export-shaped name no run on disk claims is an orphan:
    its run was deleted and the file kept."""
    found = ExportsFolder()
    try:
        names = sorted(os.listdir(exports_dir))
    except OSError:
        return found
    longest_first = sorted(run_names, key=len, reverse=True)
    for name in names:
        owner = next((run for run in longest_first if is_export_of(name, run)), None)
        if owner is not None:
            found.by_run.setdefault(owner, []).append(Path(exports_dir) / name)
        elif looks_like_export(name):
            found.orphans.append(Path(exports_dir) / name)
    return found


def remove(paths: list[Path]) -> int:
    """Delete files and folders; returns the bytes they held. One that is already gone is skipped."""
    freed = 0
    for path in paths:
        size = tree_bytes(path)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue
        freed += size
    return freed


@dataclass
class Deleted:
    """What deleting a run gave back: the run folder's bytes, and its exports, removed with it or kept."""
    run_bytes: int
    exports_removed: list[Path] = field(default_factory=list)
    removed_bytes: int = 0
    exports_kept: list[Path] = field(default_factory=list)

    @property
    def freed(self) -> int:
        return self.run_bytes + self.removed_bytes

    @property
    def kept_bytes(self) -> int:
        return sum(tree_bytes(p) for p in self.exports_kept)
