"""Custom reward code never runs in the web server process; hung rewards time out with a clear message."""

import os
import time

import pytest

from pipeline.config import RewardSpec, RunConfig
from pipeline.reward_check import needs_isolation, score_isolated
from pipeline.rewards import GuardedReward, RewardFunctionError, build_rewards, reward_registry


def side_effect_code(marker) -> str:
    # Module-level code that leaves a trace (the pid that ran it) if it is ever executed.
    return (f"import os\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n"
            "def reward(completions, **kwargs):\n    return [float(len(c)) for c in completions]\n")


def test_validating_custom_code_does_not_run_it(tmp_path):
    marker = tmp_path / "ran"
    spec = RewardSpec("custom_python", 1.0, {"code": side_effect_code(marker)})
    assert reward_registry.problems(spec, allow_custom=True) == []
    cfg = RunConfig(rewards=[spec])
    assert cfg.problems(allow_custom_rewards=True) == []
    assert not marker.exists()


def test_custom_code_with_errors_is_reported_without_running(tmp_path):
    bad = RewardSpec("custom_python", 1.0, {"code": "def reward(c, **k):\n  return [\n"})
    assert "syntax error on line" in reward_registry.problems(bad, allow_custom=True)[0]
    nameless = RewardSpec("custom_python", 1.0, {"code": "x = 1\n"})
    assert "must define a function named 'reward" in reward_registry.problems(nameless, allow_custom=True)[0]
    assert "--allow-custom-rewards" in reward_registry.problems(nameless, allow_custom=False)[0]


def test_isolated_scoring_runs_custom_code_in_another_process(tmp_path):
    marker = tmp_path / "ran"
    specs = [RewardSpec("custom_python", 2.0, {"code": side_effect_code(marker)}), RewardSpec("length_target", 1.0,
                                                                                              {"target": 3})]
    assert needs_isolation(specs) and not needs_isolation(specs[1:])
    completions = [[{"role": "assistant", "content": "abc"}], [{"role": "assistant", "content": "abcdef"}]]
    result = score_isolated(specs, completions, allow_custom=True)
    assert result["per_reward"]["custom_python"] == [3.0, 6.0]
    assert result["total"] == [6.0, 9.0]
    assert int(marker.read_text()) != os.getpid()


def test_the_reward_bench_tab_scores_custom_code_in_another_process(tmp_path):
    """Through the tab's own handler (what "Score the group" calls), not the isolated scorer directly."""
    import json

    from ui.reward_bench import score_candidates

    marker = tmp_path / "ran"
    rows = [[True, "custom_python", 2.0, json.dumps({"code": side_effect_code(marker)})],
            [True, "length_target", 1.0, json.dumps({"target": 3})]]
    table, summary = score_candidates(rows, "prompt", "abc\n---\nabcdef", "", "", True, allow_custom=True)
    assert not summary.startswith("❌"), summary
    assert table is not None and len(table) == 2
    assert marker.exists(), "the custom reward never ran"
    assert int(marker.read_text()) != os.getpid()  # it ran, and not in this (the server's) process


def test_isolated_scoring_refuses_custom_code_without_the_flag(tmp_path):
    specs = [RewardSpec("custom_python", 1.0, {"code": side_effect_code(tmp_path / "ran")})]
    with pytest.raises(RuntimeError, match="--allow-custom-rewards"):
        score_isolated(specs, ["x"], allow_custom=False)
    assert not (tmp_path / "ran").exists()


def test_isolated_scoring_survives_a_hung_custom_reward():
    code = "import time\ndef reward(completions, **kwargs):\n    time.sleep(3600)\n"
    start = time.time()
    with pytest.raises(RuntimeError, match="did not return within 2 s"):
        score_isolated([RewardSpec("custom_python", 1.0, {"code": code})], ["x", "y"], allow_custom=True,
                       timeout_s=2)
    assert time.time() - start < 20


def slow_reward(completions, **kwargs):
    time.sleep(5)
    return [1.0] * len(completions)


def test_hung_reward_fails_with_its_name():
    guard = GuardedReward(slow_reward, policy="fail", timeout_s=0.3)
    start = time.time()
    with pytest.raises(RewardFunctionError, match="'slow_reward' did not return within 0.3 s"):
        guard(["a", "b"])
    assert time.time() - start < 2


def test_hung_reward_is_skipped_with_a_warning():
    guard = GuardedReward(slow_reward, policy="skip", timeout_s=0.3)
    assert guard(["a", "b"]) == [None, None]
    assert "did not return within 0.3 s" in guard.warnings[0] and "skipped" in guard.warnings[0]


def test_timeout_is_a_run_setting():
    funcs, _ = build_rewards(RunConfig().rewards, timeout_s=12)
    assert {f.timeout_s for f in funcs} == {12}
    assert "reward_timeout_s" in RunConfig(reward_timeout_s=0).problems()[0]
