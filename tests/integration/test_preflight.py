"""Pre-flight checks on the bundled model: each problem is caught before anything starts."""

import pytest

from pipeline.setup.config import DatasetSpec, RewardSpec, RunConfig
from pipeline.training.preflight import preflight

pytestmark = pytest.mark.slow


def by_name(checks):
    return {c.name: c for c in checks}


def test_default_run_passes_every_check(bundled_model_dir):
    checks = by_name(preflight(RunConfig()))
    assert set(checks) == {"settings", "dataset", "model", "budget", "trainer", "rewards"}
    assert all(c.ok for c in checks.values()), checks
    assert "length_target=" in checks["rewards"].message


def test_each_problem_is_named(bundled_model_dir, tmp_path):
    bad_file = tmp_path / "qa.csv"
    bad_file.write_text("question\nhello\n")
    checks = by_name(preflight(RunConfig(batch_size=6, dataset=DatasetSpec(source="file", path=str(bad_file)))))
    assert not checks["settings"].ok and "multiple of the group size" in checks["settings"].message
    assert not checks["dataset"].ok and "no column 'prompt'" in checks["dataset"].message

    # Upload picked, but the file was refused (not UTF-8, say): the form has no path. Each problem is said once,
    # under its own heading (the dataset's, the model's), and the other settings pass.
    checks = preflight(RunConfig(dataset=DatasetSpec(source="file", path=""), rewards=[RewardSpec("length_target")]))
    assert [(c.name, c.ok) for c in checks][:3] == [("settings", True), ("dataset", False), ("model", True)], checks
    assert checks[1].message.startswith("No prompts file yet: upload a CSV, TSV, JSONL or JSON file")
    checks = preflight(RunConfig(model="/etc", dataset=DatasetSpec(source="hub", hub_id=""),
                                 rewards=[RewardSpec("length_target")]))
    assert [(c.name, c.ok) for c in checks][:3] == [("settings", True), ("dataset", False), ("model", False)], checks
    assert checks[1].message == "No hub dataset id yet: type one such as 'mlabonne/smoltldr'."
    assert checks[2].message.startswith("'/etc' is outside the folders this app reads models from.")

    checks = by_name(preflight(RunConfig(model="/nowhere/model")))
    assert not checks["model"].ok and "'/nowhere/model' is outside the folders" in checks["model"].message
    assert checks["settings"].ok  # said once, under the model

    checks = by_name(preflight(RunConfig(max_prompt_tokens=20)))
    assert not checks["budget"].ok and "20-token budget" in checks["budget"].message

    checks = by_name(preflight(RunConfig(max_completion_length=9000)))  # the bundled model's context is 8192
    assert not checks["budget"].ok and "over the model's context of 8192" in checks["budget"].message
    assert "Set max completion tokens to 7941 or less" in checks["budget"].message  # the longest prompt is 251


def test_a_reward_that_raises_on_a_sample_is_caught(bundled_model_dir):
    code = "def reward(completions, **kwargs):\n    return [len(c) / 0 for c in completions]\n"
    checks = by_name(preflight(RunConfig(rewards=[RewardSpec("custom_python", 1.0, {"code": code})]),
                               allow_custom_rewards=True))
    assert not checks["rewards"].ok and "ZeroDivisionError" in checks["rewards"].message


def test_pre_flight_scores_custom_code_in_another_process(bundled_model_dir, tmp_path):
    """Through the Train tab's handler (what "Pre-flight check" calls): the custom reward scores the sample,
    in a process that is not this one (the web server's)."""
    import os

    from ui.form import config_to_form
    from ui.train_form import run_preflight

    marker = tmp_path / "ran"
    code = (f"import os\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n"
            "def reward(completions, **kwargs):\n    return [1.0 for c in completions]\n")
    form = config_to_form(RunConfig(rewards=[RewardSpec("custom_python", 1.0, {"code": code})]), allow_custom=True)
    message = run_preflight(True, progress=lambda *a, **k: None, **form)
    assert "✅ **rewards**: Every reward scored a sample: custom_python=1." in message, message
    assert int(marker.read_text()) != os.getpid()


def test_a_next_stage_is_named_and_a_gone_run_refused(bundled_model_dir, studio_data):
    """A next stage's model, the merged folder of a run: pre-flight names the run and says Start takes the model
    into the new run; a run deleted since is refused under the model's heading, as Start refuses it."""
    import shutil

    from pipeline.run_folder import runs

    run_dir = runs.new_run_dir("preflight-stage")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    runs.write_status(run_dir, "finished", step=3)
    (run_dir / "merged").symlink_to(bundled_model_dir, target_is_directory=True)
    cheap = dict(rewards=[RewardSpec("length_target")], model=str(run_dir / "merged"))
    checks = by_name(preflight(RunConfig(**cheap)))
    assert checks["model"].ok and checks["model"].message.startswith(
        f"The model run '{run_dir.name}' ended with can be loaded; Start takes it into the new run")
    shutil.rmtree(run_dir)
    checks = by_name(preflight(RunConfig(**cheap)))
    assert not checks["model"].ok and f"Run '{run_dir.name}' is no longer on disk" in checks["model"].message
