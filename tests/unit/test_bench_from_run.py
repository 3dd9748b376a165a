"""Loading a run's logged group into the Reward test bench: the run's rewards and weights, the group's prompt (its
last user turn) and completions, and a reason in words for a run, step or prompt that isn't there."""

import pytest

from pipeline.run_folder import runs
from pipeline.setup.config import RewardSpec, RunConfig


@pytest.fixture
def run_with_groups(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_dir = runs.new_run_dir("groups")
    cfg = RunConfig(rewards=[RewardSpec("token_diversity", 2.0, {"scale": 10.0})])
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    for step in (1, 2):
        runs.append_jsonl(run_dir / "groups.jsonl", {"step": step, "scale_rewards": "batch", "groups": [
            {"prompt": f"[user] Post {step}\n\nTL;DR:", "completions": [
                {"completion": f"answer {step}.{i}", "total": 10.0 * i, "advantage": i - 0.5} for i in range(2)]}]})
    return run_dir


def test_the_latest_group_loads_with_the_runs_rewards(run_with_groups):
    from ui.reward_bench import load_group, runs_with_groups

    assert runs_with_groups() == [run_with_groups.name]
    rows, prompt, candidates, answer, message, loaded, scale = load_group(run_with_groups.name, 0, 1)
    ticked = {row[1]: (row[2], row[3]) for row in rows if row[0]}
    assert ticked == {"token_diversity": (2.0, '{"scale": 10.0}')}
    assert (prompt, candidates, answer) == ("Post 2\n\nTL;DR:", "answer 2.0\n---\nanswer 2.1", "")
    assert message.startswith(f"Loaded **{run_with_groups.name}**, step 2, prompt 1: 2 completions")
    assert "they scored 0, 10 (advantages -0.50, +0.50, scaled by the batch's std, as the bench now is)" in message
    # Not one of the run's prompts (made up here): the rewards compare with the Prompt box, and the bench says so.
    assert "can't be read here" in message
    assert loaded == {"prompt": prompt, "columns": {}, "others": [], "candidates": candidates,
                      "texts": ["answer 2.0", "answer 2.1"], "advantages": [-0.5, 0.5]}
    assert scale == "batch"  # the bench divides as the run did


def test_a_logged_prompt_finds_its_row_so_the_rewards_see_what_they_saw_in_the_run(tmp_path, monkeypatch):
    """An arithmetic group brings its reference answer; a TL;DR group its post, which post_similarity compares
    with while the Prompt box holds the loaded prompt (the instruction line after the post is not compared)."""
    from pipeline.setup.data import arithmetic_rows, tldr_rows
    from pipeline.setup.config import DatasetSpec
    from ui.reward_bench import load_group, score_candidates

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    for source, row in (("arithmetic", arithmetic_rows("")[3]), ("tldr", tldr_rows("")[5])):
        run_dir = runs.new_run_dir(source)
        cfg = RunConfig(dataset=DatasetSpec(source=source), rewards=[RewardSpec("length_target", 1.0, {})])
        runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
        user = row["prompt"][-1]["content"]
        runs.append_jsonl(run_dir / "groups.jsonl", {"step": 1, "groups": [{"prompt": f"[user] {user}", "completions": [
            {"completion": "one", "total": 1.0, "advantage": 1.0}, {"completion": "two", "total": 0.0,
                                                                   "advantage": -1.0}]}]})
        _, prompt, _, answer, message, loaded, _ = load_group(run_dir.name, 0, 1)
        assert prompt == user and "can't be read here" not in message
        if source == "arithmetic":
            assert answer == str(row["answer"]) != ""
        else:
            assert loaded["columns"]["source"] == row["source"] != user

    # Scoring hands the row's post to the rewards while the Prompt box holds the loaded prompt; edited, the box.
    import ui.reward_bench as bench

    seen = []
    monkeypatch.setattr(bench, "score", lambda funcs, weights, completions, **kw: seen.append(kw["source"][0]) or {
        "per_reward": {}, "total": [1.0, 0.0]})
    table = [[True, "length_target", 1.0, ""]]
    for box in (prompt, prompt + " (edited)"):
        score_candidates(table, box, "one\n---\ntwo", "", "", True, loaded=loaded)
    assert seen == [row["source"], prompt + " (edited)"]


@pytest.mark.parametrize("name, step, number, reason", [
    ("no-such-run", 0, 1, "Pick a run to load a group from."),
    ("../x", 0, 1, "Pick a run to load a group from."),
    (None, 1, 2, "Step 1 has 1 prompt: pick a number from 1 to 1."),
    (None, 9, 1, "Step 9 has no groups logged; this run has steps 1-2."),
])
def test_a_run_step_or_prompt_that_isnt_there_is_named_and_the_bench_is_left_as_it_is(run_with_groups, name, step,
                                                                                      number, reason):
    import gradio as gr

    from ui.reward_bench import load_group

    *fields, message, loaded, scale = load_group(name or run_with_groups.name, step, number)
    assert message == f"❌ {reason}"
    assert all(isinstance(f, type(gr.skip())) for f in [*fields, loaded, scale])


def test_an_empty_completion_is_scored_empty_as_in_the_run_until_the_group_is_edited(tmp_path, monkeypatch):
    """The box shows "(empty)" for a completion the model ended at once; scoring the loaded group scores it as the
    run did, as no text (length 0), and an edited box is scored as typed."""
    from ui.reward_bench import load_group, score_candidates

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_dir = runs.new_run_dir("empty")
    cfg = RunConfig(rewards=[RewardSpec("length_target", 1.0, {"target": 0, "unit": "chars"})])
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    runs.append_jsonl(run_dir / "groups.jsonl", {"step": 1, "scale_rewards": "group", "groups": [
        {"prompt": "[user] Say nothing", "completions": [{"completion": "", "total": 0.0, "advantage": 0.7},
                                                        {"completion": "  Hi ", "total": -5.0, "advantage": -0.7}]}]})
    rewards, prompt, candidates, answer, _, loaded, scale = load_group(run_dir.name, 1, 1)
    assert candidates == "(empty)\n---\nHi"
    table, _ = score_candidates(rewards, prompt, candidates, answer, "", scale, loaded=loaded)
    assert table["total"].tolist() == [0.0, -5.0]  # as logged
    edited, _ = score_candidates(rewards, prompt, candidates.replace("Hi", "Hey"), answer, "", scale, loaded=loaded)
    assert edited["total"].tolist() == [-7.0, -3.0]  # "(empty)" and "Hey" as typed


def test_divided_by_the_batchs_std_a_loaded_group_gets_the_advantages_of_its_whole_step(tmp_path, monkeypatch):
    """Three arithmetic groups, each with its own problem and reference answer: the bench rescores the other two
    against their own answers, and the loaded group's advantages are those of the whole batch's formula."""
    from pipeline.rewards.advantages import batch_advantages
    from pipeline.setup.config import DatasetSpec
    from pipeline.setup.data import arithmetic_rows
    from ui.reward_bench import load_group, score_candidates

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_dir = runs.new_run_dir("batch")
    cfg = RunConfig(dataset=DatasetSpec(source="arithmetic"), rewards=[RewardSpec("exact_answer", 2.0, {})])
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    rows = arithmetic_rows("")[:3]
    right = [[True, True, False], [True, False, False], [False, False, False]]  # per group: which answers are right
    groups = [{"prompt": f"[user] {row['prompt'][-1]['content']}", "completions": [
        {"completion": str(row["answer"] if ok else int(row["answer"]) + 1)} for ok in oks]}
        for row, oks in zip(rows, right)]
    runs.append_jsonl(run_dir / "groups.jsonl", {"step": 1, "scale_rewards": "batch", "groups": groups})
    totals = [2.0 * ok for oks in right for ok in oks]
    expected = batch_advantages(totals, 3, scale="batch")

    rewards, prompt, candidates, answer, _, loaded, scale = load_group(run_dir.name, 1, 2)
    assert (scale, answer, len(loaded["others"])) == ("batch", str(rows[1]["answer"]), 2)
    table, summary = score_candidates(rewards, prompt, candidates, answer, "", scale, loaded=loaded)
    assert table["total"].tolist() == totals[3:6]
    assert table["advantage"].tolist() == pytest.approx(expected[3:6], abs=1e-4)
    assert "of all 9 totals of the step's 3 groups" in summary
