"""What a user may name as a model, an embedder or a hub dataset, and whose Hub token fetches it.

A typed value is a hub id (`owner/name` or `name`) or the full path of a folder under the data folder
(runs, their merged models and checkpoints) or under a folder the operator allowed with `--allow-local-dir`;
nothing else on the server is read. `check_source` is the one rule, used where a config is checked and again
where a model or dataset is opened. When the app is shared, downloads of ids a user typed go without the
server's own Hub token unless the operator lends it (`--lend-hub-token`).

The app passes its flags to the processes it starts (trainer, evaluator) through the environment, as it does
the data folder. Pure: no torch, gradio or huggingface_hub import.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from pipeline.run_folder.paths import data_dir

LOCAL_DIRS_ENV = "GRPO_STUDIO_LOCAL_DIRS"  # folders the operator allowed, os.pathsep-separated
WITHHOLD_TOKEN_ENV = "GRPO_STUDIO_WITHHOLD_HUB_TOKEN"  # "1": downloads go without the server's Hub token
# The Hub's own shape: letters, digits, '-', '_' and '.', starting with a letter or digit; one '/' at most.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?", re.ASCII)
BUNDLED_PREFIX = "bundled/"  # models that ship with the app; never looked up on the Hub or on disk by name


class SourceRefused(ValueError):
    """A typed model or dataset the app won't read; the message says what is accepted."""


@dataclass(frozen=True)
class Source:
    """A checked value: kind "hub" (value: the id), "local" (value: the resolved folder) or "bundled"."""

    kind: str
    value: str


def allowed_dirs() -> list[Path]:
    """The folders local models and datasets may come from: the data folder, then the operator's."""
    extra = [Path(p).expanduser().resolve() for p in os.environ.get(LOCAL_DIRS_ENV, "").split(os.pathsep) if p]
    return [data_dir(), *extra]


def allow_local_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Set the operator's folders (replacing any set before) for this process and those it starts. Each must
    be an existing folder; returns them resolved. Raises SourceRefused naming one that is not."""
    resolved = []
    for path in paths:
        folder = Path(path).expanduser().resolve()
        if not folder.is_dir():
            raise SourceRefused(f"--allow-local-dir {path}: there is no such folder.")
        resolved.append(folder)
    if resolved:
        os.environ[LOCAL_DIRS_ENV] = os.pathsep.join(map(str, resolved))
    else:
        os.environ.pop(LOCAL_DIRS_ENV, None)
    return resolved


def withhold_hub_token(withhold: bool) -> None:
    """Whether downloads of typed ids go without the server's Hub token, here and in the processes it starts."""
    if withhold:
        os.environ[WITHHOLD_TOKEN_ENV] = "1"
    else:
        os.environ.pop(WITHHOLD_TOKEN_ENV, None)


def hub_token() -> bool | None:
    """The `token=` argument for downloads of typed ids: False sends no token, None lets the Hub libraries use
    the server's own (HF_TOKEN or `hf auth login`)."""
    return False if os.environ.get(WITHHOLD_TOKEN_ENV) == "1" else None


def hub_cache_dir(kind: str = "hub") -> str | None:
    """Where downloads of typed ids are cached: None (the Hugging Face cache) while the server's token may be
    used; a cache of the app's own when it is withheld. The Hub libraries answer a refused request (a private
    repo, no token) from their cache when they find the repo there, and the server's cache may hold private
    repos: a separate cache only ever holds what was fetched without the token. kind "datasets-local" is the
    cache for dataset folders, kept apart from hub ids of the same name (the datasets library finds cached
    data by name when the Hub refuses)."""
    if kind == "hub" and hub_token() is None:
        return None
    path = data_dir() / "cache" / ("hub-anonymous" if kind == "hub" else kind)
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def accepted(what: str) -> str:
    """What a `what` field takes, in words."""
    folders = " or ".join(str(p) for p in allowed_dirs())
    return (f"A {what} is a hub id such as 'owner/name' (letters, digits, '-', '_' and '.'; one '/' at most), or "
            f"the full path of a folder under {folders}.")


def check_source(value: str, what: str = "model") -> Source:
    """The one rule for a typed model, embedder or dataset. Returns what it is; raises SourceRefused saying
    what is accepted. A local folder comes back resolved (symlinks followed), so the folder that passed the
    check is the one opened.

    >>> check_source("Qwen/Qwen2.5-0.5B-Instruct"), check_source("gpt2").kind, check_source("bundled/x").kind
    (Source(kind='hub', value='Qwen/Qwen2.5-0.5B-Instruct'), 'hub', 'bundled')
    """
    text = str(value or "").strip()
    if not text:
        raise SourceRefused(f"No {what} given. " + accepted(what))
    # As the message quotes it: printable, and short (a 300-character value is cut).
    shown = "".join(c if c.isprintable() else "?" for c in (text if len(text) <= 120 else text[:117] + "..."))
    if "://" in text or text.lower().startswith(("hf:", "http:", "https:", "file:")):
        raise SourceRefused(f"'{shown}' is an address, not a {what}. " + accepted(what))
    if text.startswith(("/", "~", ".")):
        return Source("local", str(_allowed_folder(text, shown, what)))
    if text.startswith(BUNDLED_PREFIX) and HUB_ID.fullmatch(text):
        return Source("bundled", text)
    if not HUB_ID.fullmatch(text) or ".." in text:
        raise SourceRefused(f"'{shown}' is not a hub id nor a folder this app reads. " + accepted(what))
    return Source("hub", text)


def _allowed_folder(text: str, shown: str, what: str) -> Path:
    try:
        path = Path(text).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):  # a NUL byte, a symlink loop, an unknown ~user
        raise SourceRefused(f"'{shown}' is not a folder this app reads. " + accepted(what)) from None
    if any(path == root or root in path.parents for root in allowed_dirs()):
        return path
    raise SourceRefused(f"'{shown}' is outside the folders this app reads {what}s from. " + accepted(what)
                        + " The operator can allow another folder with --allow-local-dir.")
