"""The Movie questions preset end to end on the bundled model: a training step, then base vs tuned on two
held-out questions, with accuracy beside retrieval recall in eval.json and the CLI report."""

import json
import sys

import pytest

from pipeline.run_folder import runs
from pipeline.setup.config import RunConfig
from pipeline.setup.presets import apply_preset

from . import forked
from .helpers import QUICK, run, said

pytestmark = pytest.mark.slow


def test_movie_preset_trains_a_step_and_evaluates(bundled_model_dir):
    run_dir = runs.new_run_dir("movies")
    cfg = apply_preset(RunConfig(), "Movie questions")
    cfg = RunConfig.from_dict({**cfg.to_dict(), **QUICK, "max_steps": 1, "max_completion_length": 8,
                               "merge_at_end": True})
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    done = run(run_dir)
    assert done.returncode == 0, (run_dir / "train.log").read_text()[-2000:]
    assert runs.read_status(run_dir)["state"] == "finished"
    steps = runs.read_metrics(run_dir)
    assert len(steps) == 1 and set(steps[0]["rewards"]) == {"movie_title", "film_citation"}
    held = json.loads((run_dir / "eval_prompts.json").read_text())
    assert len(held) >= 40 and all("retrieved" in r and "candidates" in r for r in held)

    out = forked.run([sys.executable, "-m", "pipeline.evaluate", "--run-dir", str(run_dir), "--limit", "2"],
                     timeout=600)
    assert out.returncode == 0, said(out.stderr)
    result = json.loads((run_dir / "eval.json").read_text())
    for side in ("base", "tuned"):
        task = result[side]["task"]
        assert task["kind"] == "movie" and 0 <= task["accuracy"] <= task["retrieval_recall"] <= 1
    assert "among the retrieved plots" in out.stdout
