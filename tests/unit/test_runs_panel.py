"""The Runs panel, read from run folders: the settings that differ between the runs ticked in the overlay
(config.json plus the launches' overrides), and a run's numbers downloaded as one CSV."""

import dataclasses
import os

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
                                rewards=[*base.rewards, RewardSpec("keyword_presence", 0.5, {"pattern": "Summary"})])
    a, b = _run("base", base), _run("changed", other)
    shown = compare_settings([a, b])
    assert "Settings that differ</b> (3)" in shown
    assert "<td><code>learning_rate</code></td><td>0.0003</td><td>0.001</td>" in shown
    assert "<td><code>seed</code></td><td>42</td><td>2</td>" in shown
    assert "<td><code>reward: keyword_presence</code></td><td>off</td><td>×0.5 · pattern=Summary</td>" in shown
    assert "max_steps" not in shown  # the same in both
    # A reward's parameters written at their defaults (the form writes them all) read as left out (a run queued from
    # a terminal): the same reward, no row.
    bare = dataclasses.replace(base, rewards=[RewardSpec(r.name, r.weight, {}) for r in base.rewards])
    written = dataclasses.replace(base, rewards=[RewardSpec("length_target", 1.0, {"target": 50, "unit": "chars"}),
                                                 *base.rewards[1:]])
    assert "<b>Settings that differ:</b> none." in compare_settings([_run("bare", bare), _run("full", written)])


def test_a_steered_run_shows_what_was_steered_beside_its_settings(own_data):
    from pipeline.run_folder import run_files
    from ui.runs_panel import compare_settings

    a, b = _run("plain", RunConfig()), _run("steered", RunConfig())
    runs.append_jsonl(runs.resolve_run(b) / run_files.STEERING,
                      {"id": "1", "step": 3, "setting": "learning_rate", "old": 3e-4, "new": 1e-4, "time": 1.0})
    shown = compare_settings([a, b])
    assert "Settings that differ</b> (1)" in shown
    assert "<td><code>steered while training</code></td><td>—</td><td>3: lr 0.0003→0.0001</td>" in shown


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


def test_a_runs_metrics_download_as_one_csv_row_per_step(own_data):
    import csv
    import io

    from ui.runs_panel import metrics_download

    name = _run("numbers", RunConfig())
    run_dir = runs.resolve_run(name)
    file, message = metrics_download(name)
    assert file.visible is False and "no steps yet" in message
    for step in (1, 2):
        runs.append_jsonl(run_dir / "metrics.jsonl", {
            "step": step, "reward": 10.0 * step, "kl": 0.01, "rewards": {"length_target": {"mean": -5.0, "std": 1.0}},
            "reward_weights": {"length_target": 1.0}})
    for step, reward in ((0, 7.0), (2, 9.0)):
        runs.append_jsonl(run_dir / "evals.jsonl", {"step": step, "reward": reward, "rewards": {"length_target": -4.0},
                                                    "task": {"summary_score": 0.5}, "samples": [{"completion": "x"}]})
    file, message = metrics_download(name)
    assert file.visible is True and "2 steps, and 2 held-out probes" in message
    with open(file.value["path"] if isinstance(file.value, dict) else file.value, encoding="utf-8") as fh:
        rows = list(csv.DictReader(io.StringIO(fh.read())))
    assert [r["step"] for r in rows] == ["0", "1", "2"]
    assert rows[0]["reward"] == "" and rows[0]["heldout/reward"] == "7.0"  # step 0: the base model's probe alone
    assert rows[2]["reward"] == "20.0" and rows[2]["length_target/mean"] == "-5.0" and rows[2]["heldout/reward"] == "9.0"
    assert rows[1]["weight/length_target"] == "1.0" and rows[1]["heldout/summary_score"] == ""
    assert metrics_download(None)[1] == "Pick a run to download its metrics."


def test_the_runs_table_leads_with_how_far_each_run_got_and_its_held_out_reward_before_and_after(own_data):
    from ui.runs_panel import runs_table

    done = runs.runs_dir() / _run("done", RunConfig(max_steps=4))
    runs.write_status(done, "finished", started_at=100.0, ended_at=347.0)
    for step, reward in ((1, 150.0), (2, 175.25), (3, None), (4, 186.0)):  # step 3 trained again on a batch
        runs.append_jsonl(done / "metrics.jsonl", {"step": step, "reward": reward})
    for step, reward in ((0, 197.09), (4, 258.4)):
        runs.append_jsonl(done / "evals.jsonl", {"step": step, "reward": reward})
    fresh = runs.runs_dir() / _run("fresh", RunConfig(max_steps=11))

    table = runs_table()
    assert list(table.columns[:7]) == ["run", "state", "step", "train reward", "held-out", "time", "disk"]
    rows = {row["run"]: row for row in table.to_dict("records")}
    assert [rows[done.name][c] for c in ("state", "step", "train reward", "held-out", "time")] == [
        "finished", "4 / 4", "186", "197 → 258", "4m07s"]
    assert [rows[fresh.name][c] for c in ("step", "train reward", "held-out", "time")] == ["0 / 11", "", "", ""]
    assert "problems" not in table.columns and "owner" not in table.columns  # shown once some run has them


def test_a_runs_settings_load_back_into_the_form_as_it_started(own_data):
    """Load its settings into the form: the config the run started with (not its steered values, which the message
    points to), no run name, and a plain message for no run or an unreadable config."""
    from pipeline.run_folder import run_files
    from ui.runs_panel import load_run_settings

    name = _run("lr-1e-3", RunConfig(learning_rate=1e-3, max_steps=7, model="org/some-model"))
    values = load_run_settings(name)
    assert values["learning_rate"] == 1e-3 and values["max_steps"] == 7 and values["model_custom"] == "org/some-model"
    assert values["run_name"] == "" and f"Loaded the settings **{name}** started with" in values["message"]
    assert "steered" not in values["message"]
    runs.append_jsonl(runs.resolve_run(name) / run_files.STEERING,
                      {"id": "1", "step": 3, "setting": "learning_rate", "old": 1e-3, "new": 1e-4, "time": 1.0})
    values = load_run_settings(name)
    assert values["learning_rate"] == 1e-3 and "steered while it trained" in values["message"]
    assert set(load_run_settings(None)) == {"message"} and set(load_run_settings("gone")) == {"message"}
    (runs.resolve_run(name) / run_files.CONFIG).write_text("{not json")
    assert set(load_run_settings(name)) == {"message"} and "can't be read" in load_run_settings(name)["message"]


def test_a_next_stage_loads_the_runs_settings_with_the_model_it_ended_with(own_data):
    """Train a next stage from it: the run's settings in the form, its merged model in the model box (what Start
    turns into the new run's own copy), and plain messages for a run still training, one without a merged model,
    and no run."""
    from pipeline.run_folder import run_files
    from ui.form import form_to_config
    from ui.runs_panel import next_stage_settings

    name = _run("arith-format", RunConfig(learning_rate=1e-3, max_steps=7))
    run_dir = runs.resolve_run(name)
    runs.write_status(run_dir, "stopped", step=5)
    assert next_stage_settings(name)["message"].startswith(f"❌ Run '{name}' has no tuned model to start from")
    (run_dir / run_files.MERGED).mkdir()
    (run_dir / run_files.MERGED / run_files.CONFIG).write_text("{}")
    values = next_stage_settings(name)
    assert values["model_custom"] == str(run_dir / run_files.MERGED) and values["run_name"] == ""
    assert values["learning_rate"] == 1e-3 and values["max_steps"] == 7
    assert f"the model **{name}** ended with (step 5)" in values["message"]
    cfg = form_to_config({k: v for k, v in values.items() if k not in ("run_name", "message")})
    assert cfg.model == str(run_dir / run_files.MERGED)
    runs.write_status(run_dir, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()))
    assert "still training" in next_stage_settings(name)["message"]
    assert set(next_stage_settings(None)) == {"message"} and set(next_stage_settings("gone")) == {"message"}


def test_each_reward_the_ticked_runs_scored_is_a_curve_of_the_overlay(own_data):
    from pipeline.run_folder import run_files
    from ui.runs_panel import compare_runs, overlay_choices

    a = _run("a", RunConfig())
    b = _run("b", RunConfig(rewards=[RewardSpec("strict_format", 1.0), RewardSpec("length_target", 0.0)]))
    runs.append_jsonl(runs.resolve_run(b) / run_files.METRICS,
                      {"step": 1, "reward": 1.0, "rewards": {"strict_format": {"mean": 0.5}, "length_target": {}}})
    radio = overlay_choices([a, b], "Reward: strict_format")
    rewards = [c for c, _ in radio.choices if c.startswith("Reward: ")]
    assert rewards == ["Reward: length_target", "Reward: token_diversity", "Reward: post_similarity",
                       "Reward: strict_format"] and radio.value == "Reward: strict_format"
    assert overlay_choices([a], "Reward: strict_format").value == "Train reward"  # a has no such reward
    plot, _ = compare_runs([a, b], "Reward: strict_format")
    assert plot.value["data"] == [[1, 0.5, b]], plot.value


def _probe(run: str, step: int, answers: dict[str, tuple[str, float]], per_prompt=None) -> None:
    """One probe line of the run's evals.jsonl: {prompt: (answer, total)}."""
    from pipeline.run_folder import run_files

    samples = [{"prompt": p, "completion": text, "total": total, "rewards": {"length_target": total - 100}}
               for p, (text, total) in answers.items()]
    row = {"step": step, "reward": sum(t for _, t in answers.values()) / len(answers), "samples": samples}
    if per_prompt is not None:
        row["task"] = {"kind": "summary", "summary_score": 0.5, "per_prompt": per_prompt}
    runs.append_jsonl(runs.resolve_run(run) / run_files.EVALS, row)


def test_held_out_answers_of_the_ticked_runs_read_side_by_side(own_data):
    """Held-out answers side by side: the prompts the ticked runs answered (the shared ones first), the base answer
    once, each run's last probe best first with its new words marked, a summary over the shared prompts, and plain
    words for too few runs, no probes, and a run that never answered the prompt picked."""
    import re

    from ui.answers_view import ANSWERS_EMPTY, NO_PROBES, prompt_key
    from ui.runs_panel import compare_answers, picked_answers

    low, high, other = _run("lr-1e-4", RunConfig()), _run("lr-1e-3", RunConfig()), _run("seed-2", RunConfig(seed=2))
    base = {"Post A. TL;DR:": ("The council voted to add bike lanes on Main Street next year.", 150.0),
            "Post B. TL;DR:": ("A long answer about rain.", 120.0)}
    for run in (low, high):
        _probe(run, 0, base, per_prompt=[0.5, 0.4])
    _probe(low, 6, {"Post A. TL;DR:": ("The council voted to add bike lanes.", 190.0),
                    "Post B. TL;DR:": ("A long answer about rain.", 120.0)}, per_prompt=[0.7, 0.4])
    _probe(high, 6, {"Post A. TL;DR:": ("Bike lanes on Main Street.", 240.0),
                     "Post B. TL;DR:": ("Rain all week.", 110.0)}, per_prompt=[0.8, 0.6])

    picker, text = compare_answers([low, high])
    assert [label for label, _ in picker.choices] == ["1. Post A. TL;DR:", "2. Post B. TL;DR:"]
    assert picker.value == prompt_key("Post A. TL;DR:") and picker.visible
    assert text.count("The council voted to add bike lanes on Main Street next year.") == 1  # the base answer, once
    cards = re.findall(r"data-run='([^']+)'", text)
    assert cards == [high, low]  # best total on this prompt first
    assert f"<b>1. {high}</b>, step 6" in text and "total <b>240</b> (+90 vs its base)" in text
    assert "summary_score 0.8" in text and "<ins>" in text and "<del>" in text
    # The summary over both prompts: means at step 0 and at the last probe, and on how many each run scored highest.
    summary = re.findall(r"<tr><td class='gs-answers-run'>(.*?)</td><td>6</td><td>135</td><td><b>(.*?)</b></td>"
                         r"<td>(\d) of 2</td></tr>", text)
    assert summary == [(high, "175", "1"), (low, "155", "1")], summary

    text = picked_answers([low, high], prompt_key("Post B. TL;DR:"))
    assert re.findall(r"data-run='([^']+)'", text) == [low, high]
    assert "(the same as its base answer)" in text  # low's answer to B did not change

    # A run whose prompts differ: its prompt is offered too, marked with how many runs answered it; the others say
    # they have no answer to it.
    _probe(other, 0, {"Post C. TL;DR:": ("Something else.", 90.0)})
    picker, text = compare_answers([low, high, other], prompt_key("Post B. TL;DR:"))
    assert picker.value == prompt_key("Post B. TL;DR:")  # kept while the ticked runs still answer it
    assert picker.choices[-1][0] == "3. Post C. TL;DR: (1 of 3 runs)"
    assert "answered no held-out prompt in common" in text and f"Not among the held-out prompts of {other}" in text
    text = picked_answers([low, other], prompt_key("Post C. TL;DR:"))
    assert "no probe since step 0" in text and f"Not among the held-out prompts of {low}" in text

    assert compare_answers([low])[1] == ANSWERS_EMPTY and not compare_answers([low])[0].visible
    assert compare_answers([_run("none", RunConfig()), _run("none", RunConfig())])[1] == NO_PROBES


def test_answers_side_by_side_from_each_runs_evaluation_and_a_run_not_evaluated_is_named(own_data):
    """Answers from: Evaluation puts the ticked runs' last Evaluate base vs tuned answers side by side (every
    held-out prompt they were asked), the tuned answer at the run's last step; a run not evaluated yet is named
    with what to press, and the rest are still compared."""
    import re
    import time

    from pipeline.run_folder import run_files
    from ui.answers_view import EVALUATION
    from ui.runs_panel import compare_answers

    names = [_run(label, RunConfig()) for label in ("lr-1e-4", "lr-1e-3", "not-evaluated")]
    for name, tuned in zip(names[:2], ("Bike lanes on Main Street.", "Main Street gets bike lanes next year.")):
        run_dir = runs.resolve_run(name)
        runs.append_jsonl(run_dir / run_files.METRICS, {"step": 11, "reward": 1.0})
        samples = [{"prompt": f"Post {i}. TL;DR:", "base": "A long base answer.", "tuned": tuned if i == 1 else "Same.",
                    "base_total": 100.0, "tuned_total": 150.0 + len(tuned) * (i == 1)} for i in range(1, 7)]
        runs.write_json_atomic(run_dir / run_files.EVAL_RESULT, {"n": 6, "samples": samples, "base": {}, "tuned": {}})
    picker, text = compare_answers(names, None, EVALUATION)
    assert len(picker.choices) == 6  # every prompt the evaluations answered, not a probe's few
    assert re.findall(r"data-run='([^']+)'", text) == [names[1], names[0]]  # the higher total first
    assert f"<b>1. {names[1]}</b>, step 11" in text and "evaluated step" in text and "from its last evaluation" in text
    assert f"Not evaluated yet, so not compared here: {names[2]}" in text
    assert "Evaluate base vs tuned" in text and "Trained further after its last evaluation" not in text
    runs.write_status(runs.resolve_run(names[0]), "finished", ended_at=time.time() + 60)  # a resume ended after it
    assert f"so its answers here are the model's before that: {names[0]}." in compare_answers(names, None,
                                                                                              EVALUATION)[1]
    text = compare_answers([names[0], names[2]], None, EVALUATION)[1]
    assert "Evaluate at least two of the ticked runs" in text and f"not compared here: {names[2]}" in text
    # The probes as before: none here, so the view says so.
    assert "None of the ticked runs has answered a held-out prompt yet" in compare_answers(names)[1]
