"""Steering a run mid-training, the pure side (pipeline/setup/steering.py): a change is checked by Start's own rules,
settings that can't change say why, the values in force are config.json plus every applied change in
order, and the request file survives a torn last line. The trainer's side: tests/integration/test_steer.py."""

from __future__ import annotations

import json

import pytest

from pipeline.run_folder import run_files, runs
from pipeline.setup import steering as steer
from pipeline.setup.config import ConfigError, RunConfig
from pipeline.setup.steering import SteerRefused, check_changes


def make_run(tmp_path, **overrides):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    runs.write_json_atomic(run_dir / run_files.CONFIG, RunConfig(**overrides).to_dict())
    return run_dir


def start_says(cfg: RunConfig) -> list[str]:
    return cfg.problems()


def test_a_value_start_refuses_is_refused_with_starts_message():
    cfg = RunConfig()
    for setting, value in (("learning_rate", 2.0), ("temperature", 0), ("beta", -1.0)):
        bad = RunConfig(**{setting: value})
        with pytest.raises(SteerRefused) as refused:
            check_changes(cfg, {setting: value})
        assert str(refused.value) == " ".join(start_says(bad)), setting
    # Every weight at 0 leaves nothing to learn: Start's words again.
    with pytest.raises(SteerRefused, match="Every reward has weight 0"):
        check_changes(cfg, {"weights": {spec.name: 0 for spec in cfg.rewards}})
    with pytest.raises(SteerRefused, match="weight must be a number"):
        check_changes(cfg, {"weights": {"length_target": "lots"}})


def test_fixed_settings_are_refused_with_their_reason():
    cfg = RunConfig()
    with pytest.raises(SteerRefused, match="lora_r can't change while the run trains "
                                           r"\(fixed: the optimizer's LoRA matrices are sized by it\)"):
        check_changes(cfg, {"lora_r": 32})
    with pytest.raises(SteerRefused, match="num_generations can't change"):
        check_changes(cfg, {"num_generations": 8})
    fixed = steer.fixed_settings()
    assert {"model", "dataset", "num_generations", "batch_size", "lora_r"} <= set(fixed)
    assert not set(steer.STEERABLE) & set(fixed)
    assert all(reason.startswith("fixed: ") for reason in fixed.values())
    with pytest.raises(SteerRefused, match="no reward named 'nope'.*length_target"):
        check_changes(cfg, {"weights": {"nope": 1}})
    with pytest.raises(SteerRefused, match="Unknown setting 'speed'"):
        check_changes(cfg, {"speed": 2})


def test_accepted_changes_say_old_and_new_and_a_monitor_can_come_back():
    cfg = RunConfig()
    changes = check_changes(cfg, {"learning_rate": "1e-5", "weights": {"length_target": 0}, "temperature": 1.0})
    assert changes == [{"setting": "learning_rate", "old": 3e-4, "new": 1e-5},
                       {"setting": "weight/length_target", "old": 1.0, "new": 0.0}]  # temperature unchanged
    monitored = steer.apply_changes(cfg, changes)
    assert check_changes(monitored, {"weights": {"length_target": 1.5}}) == [
        {"setting": "weight/length_target", "old": 0.0, "new": 1.5}]


def test_beta_from_zero_is_refused_where_a_batch_spans_steps():
    assert check_changes(RunConfig(beta=0.0), {"beta": 0.04}) == [{"setting": "beta", "old": 0.0, "new": 0.04}]
    with pytest.raises(SteerRefused, match="beta can't be raised from 0 in this run"):
        check_changes(RunConfig(beta=0.0, num_iterations=2), {"beta": 0.04})
    assert check_changes(RunConfig(num_iterations=2), {"beta": 0.0})  # KL off is always possible


def test_values_in_force_are_the_config_plus_each_applied_change_in_order(tmp_path):
    run_dir = make_run(tmp_path)
    record = run_dir / run_files.STEERING
    for row in ({"id": "a", "step": 3, "setting": "learning_rate", "old": 3e-4, "new": 1e-4},
                {"id": "b", "step": 4, "refused": "Temperature must be above 0."},
                {"id": "c", "step": 5, "setting": "learning_rate", "old": 1e-4, "new": 5e-5},
                {"id": "c", "step": 5, "setting": "weight/token_diversity", "old": 1.0, "new": 0.0}):
        runs.append_jsonl(record, row)
    force = steer.settings_in_force(run_dir)
    assert force["learning_rate"] == 5e-5
    assert force["temperature"] == 1.0  # the refused request changed nothing
    assert force["weights"] == {"length_target": 1.0, "token_diversity": 0.0, "post_similarity": 2.0}
    assert force["fixed"]["lora_r"].startswith("fixed: ")
    assert [c["step"] for c in steer.applied_changes(run_dir)] == [3, 5, 5]
    # A resume's --steps override is in force too.
    runs.record_launch(run_dir, True, 5, {"max_steps": 20}, [])
    assert steer.config_in_force(run_dir).max_steps == 20


def test_a_config_of_defaults_alone_can_be_steered_and_an_unreadable_one_says_so(tmp_path):
    """A headless run may start from a config.json of `{}` (every setting at its default)."""
    run_dir = tmp_path / "defaults"
    run_dir.mkdir()
    (run_dir / run_files.CONFIG).write_text("{}", encoding="utf-8")
    assert steer.config_in_force(run_dir) == RunConfig()
    steer.request(run_dir, {"learning_rate": 1e-4})
    (run_dir / run_files.CONFIG).write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="has no readable config.json"):
        steer.config_in_force(run_dir)


def test_requests_survive_a_torn_last_line_and_are_pending_until_answered(tmp_path):
    run_dir = make_run(tmp_path)
    first = steer.request(run_dir, {"temperature": 0.7})
    path = run_dir / run_files.STEER_REQUESTS
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"id": "half", "changes": {"beta"')  # a writer killed mid-line
    assert [r["id"] for r in steer.pending_requests(run_dir)] == [first["id"]]
    # The next request starts on a line of its own; a request written by hand without an id gets one.
    second = steer.request(run_dir, {"weights": {"length_target": 0}})
    runs.append_jsonl(path, {"changes": {"beta": 0.0}})
    pending = steer.pending_requests(run_dir)
    assert [r["id"] for r in pending] == [first["id"], second["id"], "line-3"]
    assert pending[1]["changes"] == {"weight/length_target": 0}
    runs.append_jsonl(run_dir / run_files.STEERING, {"id": first["id"], "step": 2, "setting": "temperature",
                                                     "old": 1.0, "new": 0.7})
    assert [r["id"] for r in steer.pending_requests(run_dir)] == [second["id"], "line-3"]


def test_a_request_is_checked_after_the_ones_still_waiting(tmp_path):
    run_dir = make_run(tmp_path)
    steer.request(run_dir, {"weights": {"length_target": 0, "token_diversity": 0}})
    with pytest.raises(SteerRefused, match="Every reward has weight 0"):
        steer.request(run_dir, {"weights": {"post_similarity": 0}})
    assert len(steer.read_requests(run_dir)) == 1  # the refused one was not written
    with pytest.raises(SteerRefused, match="Nothing to change"):
        steer.request(run_dir, {"temperature": 1.0, "weights": {"length_target": 0}})
    with pytest.raises(SteerRefused, match="at least one setting"):
        steer.request(run_dir, {"weights": {}})


def test_cli_requests_shows_and_refuses(tmp_path, capsys):
    run_dir = make_run(tmp_path)
    assert steer.main(["--run-dir", str(run_dir), "--set", "learning_rate=1e-5", "--weight", "length_target=0"]) == 0
    line = json.loads((run_dir / run_files.STEER_REQUESTS).read_text().splitlines()[0])
    assert line["changes"] == {"learning_rate": 1e-5, "weight/length_target": 0.0}
    assert steer.main(["--run-dir", str(run_dir), "--set", "temperature=0"]) == 2
    assert "Refused: Temperature must be above 0" in capsys.readouterr().err
    assert steer.main(["--run-dir", str(run_dir), "--set", "lora_r=8"]) == 2
    assert "fixed: the optimizer's LoRA matrices are sized by it" in capsys.readouterr().err
    assert steer.main(["--run-dir", str(run_dir), "--show"]) == 0
    out = capsys.readouterr().out
    assert "waiting:" in out and "In force: learning_rate=0.0003" in out
