"""The one real training that the integration tests which only read a finished run share."""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from .helpers import make_run, run, said


@dataclass(frozen=True)
class SharedRun:
    path: Path
    created_config: bytes  # config.json as the run was created
    first_state: dict  # checkpoint-1's trainer_state.json as the first trainer process left it


@pytest.fixture(scope="session")
def shared_run(bundled_model_dir) -> SharedRun:
    """One step with a checkpoint, then a resume to step 2 with --steps: a finished two-step run (2 prompts a
    step, so the batch's std and a group's differ) with probes
    at steps 0, 1 and 2, checkpoints 1 and 2, the adapter and the merged model. Readers only: a test that
    changes the run undoes it (each trainer start costs about 10 s)."""
    run_dir = make_run("shared", batch_size=8, max_steps=1, save_steps=1, merge_at_end=True, probe_every=1,
                       probe_prompts=2, max_completion_length=16)
    created = (run_dir / "config.json").read_bytes()
    proc = run(run_dir, timeout=1500)
    assert proc.returncode == 0, said(proc.stderr)
    first_state = json.loads((run_dir / "checkpoint-1" / "trainer_state.json").read_text())
    proc = run(run_dir, "--resume", "--steps", "2", timeout=1500)
    assert proc.returncode == 0, said(proc.stderr)
    return SharedRun(run_dir, created, first_state)
