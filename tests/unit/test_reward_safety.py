"""Custom reward code never runs in the web server process; hung rewards time out with a clear message."""

import os
import sys
import time

import pytest

from pipeline.setup.config import RewardSpec, RunConfig
from pipeline.setup.reward_check import needs_isolation, score_isolated
from pipeline.rewards import GuardedReward, RewardFunctionError, build_rewards, reward_registry
from tests.integration.helpers import stand_in


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


# ---- a user's regex: a time limit, and the other threads keep running -----------------------------------

BACKTRACKS = r"^(a|aa|aaa)*$"  # on many a's and a "!": more paths than any search can walk


def test_a_catastrophic_regex_times_out_without_stalling_other_threads(monkeypatch):
    """keyword_presence with a pattern that backtracks without end: the search gives up at its time limit with
    a message that says what to do, and a thread counting beside it keeps counting while it searches (a
    search that held the GIL would freeze it: every other request of the server would wait)."""
    import threading

    from pipeline.rewards import format_rewards
    from pipeline.rewards.format_rewards import KeywordPresence

    monkeypatch.setattr(format_rewards, "MATCH_TIMEOUT_S", 0.5)
    # The pattern that froze the server before this limit: backtracking the regex package avoids, at once.
    assert KeywordPresence(pattern=r"^(a+)+$")(["a" * 27 + "!"]) == [0.0]

    guard = GuardedReward(KeywordPresence(pattern=BACKTRACKS), policy="fail")
    outcome: dict = {}

    def search():
        try:
            guard(["a" * 40 + "!"])
        except RewardFunctionError as exc:
            outcome["error"] = str(exc)

    count, stop = [0], threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1

    threading.Thread(target=counter, daemon=True).start()
    matcher = threading.Thread(target=search, daemon=True)
    matcher.start()
    moved = 0  # times the counter moved between two looks, both taken while the search was still running
    while matcher.is_alive() and moved < 3:
        before = count[0]
        time.sleep(0.05)
        if matcher.is_alive() and count[0] > before:
            moved += 1
    matcher.join(30)
    stop.set()
    assert moved == 3, "the other threads stood still while the pattern was searched"
    assert not matcher.is_alive(), "the search never gave up"
    assert outcome["error"] == (
        "Reward 'keyword_presence' gave up: its pattern '^(a|aa|aaa)*$' searched completion #0 for over 0.5 s. "
        "A pattern with nested repeats, such as (a|aa)* or (a+)+, can backtrack without end: simplify it.")


def test_the_reward_bench_and_chat_scoring_report_a_regex_that_times_out(monkeypatch):
    import json

    from pipeline.rewards import format_rewards
    from ui import chat
    from ui.reward_bench import score_candidates

    monkeypatch.setattr(format_rewards, "MATCH_TIMEOUT_S", 0.2)
    rows = [[True, "keyword_presence", 1.0, json.dumps({"pattern": BACKTRACKS})]]
    table, summary = score_candidates(rows, "prompt", "a" * 40 + "!\n---\nabc", "", "", True)
    assert table.empty and summary.startswith("❌ Reward 'keyword_presence' gave up"), summary

    spec = RewardSpec("keyword_presence", 1.0, {"pattern": BACKTRACKS})
    monkeypatch.setattr(chat, "rewards_for", lambda choice, partner=None: ([spec], "test rewards"))
    _, score_replies = chat.make_handlers(cache=None)
    text = score_replies([{"role": "assistant", "content": "a" * 40 + "!"}], [], "model", "model", False)
    assert "**A**: could not be scored" in text and "⚠️ Reward 'keyword_presence' gave up" in text, text


# ---- custom reward code gets no secrets ---------------------------------------------------------------

READS_SECRETS = ("import os\n"
                 "def reward(completions, **kwargs):\n"
                 "    names = ('HF_TOKEN', 'AWS_SECRET_ACCESS_KEY', 'OPENAI_API_KEY')\n"
                 "    return [float(sum(name in os.environ for name in names)) for _ in completions]\n")


@pytest.fixture
def secrets_in_the_server(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_server_secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-server-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server-secret")


def test_custom_code_scored_by_the_server_sees_no_tokens(secrets_in_the_server):
    result = score_isolated([RewardSpec("custom_python", 1.0, {"code": READS_SECRETS})], ["x"], allow_custom=True)
    assert result["per_reward"]["custom_python"] == [0.0]  # none of the three is set in the child


def test_a_trainer_with_custom_rewards_starts_without_tokens(secrets_in_the_server, tmp_path, monkeypatch):
    """Custom rewards run inside the trainer, so its launch gets what custom code may see. A run without
    custom code keeps the token (a gated hub model needs it)."""
    import json

    from pipeline import runner
    from pipeline.run_folder import runs

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    # written whole, then renamed: the file's existence means its contents are there
    dump = ("import json, os, sys; d = sys.argv[-1]; f = open(d + '/env.part', 'w'); "
            "json.dump(sorted(os.environ), f); f.close(); os.replace(d + '/env.part', d + '/env.json')")
    stand_in(monkeypatch, "train", lambda run_dir, **kw: [sys.executable, "-c", dump, str(run_dir)])
    custom = runner.start("train", cfg=RunConfig(rewards=[RewardSpec("custom_python", 1.0, {"code": READS_SECRETS})]), label="custom", allow_custom_rewards=True)
    assert _wait_for(lambda: (custom / "env.json").exists() and runner.busy_run() is None)  # one run at a time
    plain = runner.start("train", cfg=RunConfig(), label="plain")
    assert _wait_for(lambda: (plain / "env.json").exists())
    seen = set(json.loads((custom / "env.json").read_text()))
    assert not seen & {"HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY"}, seen
    assert {"PATH", "GRPO_STUDIO_DATA"} <= seen  # what it needs to find Python and the app's data
    assert "HF_TOKEN" in json.loads((plain / "env.json").read_text())
    assert runs.read_status(custom)["state"] in ("queued", "failed")  # the stand-in never reports


def _wait_for(done, seconds=20.0) -> bool:
    deadline = time.time() + seconds
    while not done() and time.time() < deadline:
        time.sleep(0.05)
    return done()
