"""The Runs panel's settings comparison: what differs between the runs ticked in the overlay, read from their
run folders (config.json plus the launches' overrides)."""

import dataclasses

import pytest

from pipeline.run_folder import runs
from pipeline.setup.config import RewardSpec, RunConfig


@pytest.fixture
def own_data(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path / "data"))


def _run(label: str, cfg: RunConfig) -> str:
    run_dir = runs.new_run_dir(label)
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    return run_dir.name


def test_the_settings_that_differ_are_listed_one_row_each(own_data):
    from ui.runs_panel import compare_settings

    base = RunConfig()
    other = dataclasses.replace(base, learning_rate=1e-3, seed=2,
                                rewards=[*base.rewards, RewardSpec("keyword_presence", 0.5, {"pattern": "TL;DR"})])
    a, b = _run("base", base), _run("changed", other)
    shown = compare_settings([a, b])
    assert "Settings that differ</b> (3)" in shown
    assert "<td><code>learning_rate</code></td><td>0.0003</td><td>0.001</td>" in shown
    assert "<td><code>seed</code></td><td>42</td><td>2</td>" in shown
    assert "<td><code>reward: keyword_presence</code></td><td>off</td><td>×0.5 · pattern=TL;DR</td>" in shown
    assert "max_steps" not in shown  # the same in both


def test_same_settings_say_so_and_one_run_says_what_to_do(own_data):
    from ui.compare_view import COMPARE_EMPTY
    from ui.runs_panel import compare_settings

    a, b = _run("one", RunConfig()), _run("two", RunConfig())
    assert "none. These runs started with the same settings" in compare_settings([a, b])
    assert compare_settings([a]) == COMPARE_EMPTY and compare_settings([]) == COMPARE_EMPTY


def test_custom_reward_code_is_not_shown(own_data):
    from ui.runs_panel import compare_settings

    code = "def reward(completions, **kw):\n    return [0.0] * len(completions)  # SECRET-ISH\n"
    a = _run("plain", RunConfig())
    b = _run("coded", RunConfig(rewards=[RewardSpec("custom_python", 1.0, {"code": code})]))
    shown = compare_settings([a, b])
    assert "SECRET-ISH" not in shown and "(own code)" in shown
