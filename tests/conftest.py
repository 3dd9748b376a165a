"""Shared fixtures: every test session gets its own data directory, so runs and the converted
bundled model never touch the developer's ./data."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session", autouse=True)
def studio_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("studio-data")
    old = os.environ.get("GRPO_STUDIO_DATA")
    os.environ["GRPO_STUDIO_DATA"] = str(path)
    yield path
    if old is None:
        os.environ.pop("GRPO_STUDIO_DATA", None)
    else:
        os.environ["GRPO_STUDIO_DATA"] = old


@pytest.fixture(scope="session")
def bundled_model_dir(studio_data):
    """The bundled SmolLM2 converted once per session (about 30 s on CPU)."""
    from pipeline.models.loading import ensure_bundled_model

    return ensure_bundled_model()
