"""The evaluation command on a run folder outside the data folder (a headless run, a benchmark's): its own
merged model is read, while the rule for models typed by users stays as it was."""

import json

import pytest

from pipeline import evaluate
from pipeline.run_folder import run_files
from pipeline.setup.config import RunConfig
from pipeline.models.loading import ModelError, resolve_model


def test_a_run_outside_the_data_folder_evaluates_its_own_merged_model(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("GRPO_STUDIO_LOCAL_DIRS", "")  # what the command sets is undone after the test
    run_dir = tmp_path / "elsewhere" / "run"
    (run_dir / "merged").mkdir(parents=True)
    (run_dir / "merged" / "config.json").write_text("{}")
    (run_dir / run_files.CONFIG).write_text(json.dumps(RunConfig().to_dict()))
    with pytest.raises(ModelError, match="outside the folders"):  # what a user may type is unchanged
        resolve_model(str(run_dir / "merged"))

    resolved = []

    def fake_evaluate(run, limit, progress=None):
        resolved.append(resolve_model(str(evaluate.tuned_model_path(run))))
        return {"n": 1, "delta": 0.0, "gap_closed": None}

    monkeypatch.setattr(evaluate, "evaluate", fake_evaluate)
    monkeypatch.setattr(evaluate, "report", lambda result: "report")
    assert evaluate.main(["--run-dir", str(run_dir)]) == 0
    assert resolved == [str((run_dir / "merged").resolve())]
