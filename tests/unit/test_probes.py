"""Probes: the held-out answers written during training (pipeline/training/probes.py), read back (runs.read_evals),
shown in the Train tab (ui/probes_view.py) and checked for a train/held-out split (pipeline/training/health.py)."""

from types import SimpleNamespace

import pytest

from pipeline.run_folder import runs
from pipeline.training import probes
from pipeline.setup.config import RunConfig
from pipeline.training.health import health_warnings
from ui import charts, probes_view, views

ROWS = [{"prompt": [{"role": "user", "content": "Post about <bike> lanes.\n\nTL;DR:"}], "source": "bike lanes"},
        {"prompt": [{"role": "user", "content": "Post about a roof.\n\nTL;DR:"}], "source": "library roof"}]


def probe(step, reward, texts, totals=(1.0, 2.0)):
    per = {"length_target": [t - 1 for t in totals], "token_diversity": [1.0, 1.0]}
    return probes.probe_record(step, ROWS, list(texts), per, list(totals), seconds=1.5) | {"reward": reward}


EVALS = [probe(0, 1.0, ["Bike lanes are new.", "The roof"], (1.0, 2.0)),
         probe(5, 2.0, ["New bike lanes open.", "The roof"], (2.0, 2.0)),
         probe(10, 3.0, ["New bike lanes open downtown.", "Library roof fixed"], (3.0, 3.0))]


# ---- the file ----------------------------------------------------------------------------------


def test_read_evals_skips_a_torn_line_and_keeps_the_newest_line_per_step(tmp_path):
    path = tmp_path / "evals.jsonl"
    runs.append_jsonl(path, {"step": 0, "reward": 1.0, "samples": []})
    runs.append_jsonl(path, {"step": 5, "reward": 2.0, "samples": []})
    with open(path, "a") as fh:
        fh.write('{"step": 10, "rew')  # a trainer killed mid-write
    runs.append_jsonl(path, {"step": 5, "reward": 2.5, "samples": []})  # probed again after a resume
    assert [(e["step"], e["reward"]) for e in runs.read_evals(tmp_path)] == [(0, 1.0), (5, 2.5)]
    assert runs.read_evals(tmp_path / "missing") == []


def test_probe_record_has_the_documented_fields():
    rec = EVALS[0]
    assert set(rec) == {"step", "reward", "rewards", "task", "seconds", "samples"}
    assert rec["rewards"] == {"length_target": pytest.approx(0.5), "token_diversity": 1.0}
    assert rec["task"]["kind"] == "summary" and len(rec["task"]["per_prompt"]) == 2
    sample = rec["samples"][0]
    assert sample == {"prompt": "Post about <bike> lanes.\n\nTL;DR:", "completion": "Bike lanes are new.",
                      "total": 1.0, "rewards": {"length_target": 0.0, "token_diversity": 1.0}}


def test_missing_scores_are_left_out_of_the_means():
    rec = probes.probe_record(1, ROWS, ["a", "b"], {"r": [None, 2.0]}, [None, 2.0], seconds=0)
    assert rec["reward"] == 2.0 and rec["rewards"] == {"r": 2.0} and rec["samples"][0]["total"] is None


# ---- when the callback probes ------------------------------------------------------------------


@pytest.fixture
def probed(monkeypatch, tmp_path):
    """The real callback with the model call replaced by a recorder: which steps would it probe?"""
    steps = []
    monkeypatch.setattr(probes.Prober, "probe", lambda self, model, step: steps.append(step))
    cfg = RunConfig(probe_every=2, probe_prompts=1)
    (callback,) = probes.make_probe_callbacks(tmp_path, cfg, tokenizer=None, eval_rows=ROWS)
    return callback, steps, tmp_path


def _state(step, max_steps=5, main=True):
    return SimpleNamespace(global_step=step, max_steps=max_steps, is_world_process_zero=main)


def test_probes_step_0_every_n_steps_and_the_last_step(probed):
    callback, steps, _ = probed
    callback.on_train_begin(None, _state(0), SimpleNamespace(should_training_stop=False), model=None)
    for step in range(1, 6):
        callback.on_step_end(None, _state(step), SimpleNamespace(should_training_stop=step == 5), model=None)
    assert steps == [0, 2, 4, 5]


def test_a_stop_request_probes_the_step_it_stops_on(probed):
    callback, steps, _ = probed
    callback.on_step_end(None, _state(3), SimpleNamespace(should_training_stop=True), model=None)
    assert steps == [3]


def test_a_resumed_run_does_not_probe_step_0_again(probed):
    callback, steps, run_dir = probed
    runs.append_jsonl(run_dir / probes.PROBE_FILE, {"step": 0, "reward": 1.0})
    callback.on_train_begin(None, _state(0), SimpleNamespace(should_training_stop=False), model=None)
    callback.on_train_begin(None, _state(4), SimpleNamespace(should_training_stop=False), model=None)
    assert steps == []


def test_only_rank_0_probes(probed):
    callback, steps, _ = probed
    callback.on_train_begin(None, _state(0, main=False), SimpleNamespace(should_training_stop=False), model=None)
    callback.on_step_end(None, _state(2, main=False), SimpleNamespace(should_training_stop=False), model=None)
    assert steps == []


def test_the_eta_counts_the_probes_still_to_come_at_the_last_probes_time(monkeypatch, tmp_path):
    from pipeline.training.grpo_trainer import StepClock

    monkeypatch.setattr(probes.Prober, "probe", lambda self, model, step: {"seconds": 12.0})
    clock = StepClock()
    for seconds in (30.0, 20.0, 20.0):
        clock.add_step(seconds)
    (callback,) = probes.make_probe_callbacks(tmp_path, RunConfig(probe_every=5, probe_prompts=1), None, ROWS,
                                              clock=clock)
    assert clock.seconds_left(3, 11) == 8 * 20.0  # no probe timed yet
    callback.on_train_begin(None, _state(0, max_steps=11), SimpleNamespace(should_training_stop=False), model=None)
    assert clock.seconds_left(3, 11) == 8 * 20.0 + 2 * 12.0  # steps 4-11, and the probes at 5 and 11
    assert clock.seconds_left(10, 11) == 20.0 + 12.0 and clock.seconds_left(11, 11) == 0


def test_probes_off_or_nothing_held_out_adds_no_callback(tmp_path):
    assert probes.make_probe_callbacks(tmp_path, RunConfig(probe_every=0), None, ROWS) == []
    assert probes.make_probe_callbacks(tmp_path, RunConfig(probe_prompts=0), None, ROWS) == []
    assert probes.make_probe_callbacks(tmp_path, RunConfig(), None, []) == []


# ---- the Train tab's views ---------------------------------------------------------------------


def test_probe_frame_has_total_and_each_reward():
    frame = probes_view.probe_frame(EVALS)
    assert set(frame["series"]) == {"total (weighted)", "length_target", "token_diversity"}
    assert sorted(set(frame["step"])) == [0, 5, 10] and probes_view.probe_frame([]) is None


def test_word_diff_marks_inserted_and_struck_words():
    out = probes_view.word_diff_html("Bike lanes are new.", "New bike lanes open.")
    assert out == "<del>Bike </del><ins>New bike </ins>lanes <del>are new</del><ins>open</ins>."
    assert probes_view.word_diff_html("same words", "same words") == "same words"
    assert probes_view.word_diff_html("", "<script>") == "<ins>&lt;script&gt;</ins>"
    assert probes_view.word_diff_html("line one\nline two", "line one\nline 2").startswith("line one\nline ")


def test_empty_panel_explains_probes_with_the_run_settings():
    text = probes_view.probes_html([], None, {"probe_every": 5, "probe_prompts": 4}, "running")
    assert "4 held-out prompts" in text and "every 5 steps" in text and "step 0 is the base model" in text
    assert "first probe" in text
    assert "off" in probes_view.probes_html([], None, {"probe_every": 0, "probe_prompts": 4}, "running")
    assert "wrote no probes" in probes_view.probes_html([], None, {"probe_every": 5}, "finished")


def test_panel_shows_the_latest_step_with_changes_scores_and_task_metric():
    out = probes_view.probes_html(EVALS, "latest", {"max_steps": 10}, "finished")
    assert "data-step='10'" in out and "step 10 · end" in out
    assert "Compared with step 5" in out and "open <ins>downtown</ins>." in out
    assert "held-out reward <b>3</b> (+2 vs step 0)" in out
    assert "summary_score" in out and "length_target" in out and "total <b>3</b> (+1 since step 5)" in out
    assert "0: 1 → 5: 2 → <b>10: 3</b>" in out  # the prompt's total at every probe step
    assert "&lt;bike&gt;" in out and "<bike>" not in out


def test_panel_scrubs_to_an_earlier_step():
    base = probes_view.probes_html(EVALS, "0", {"max_steps": 10}, "running")
    assert "data-step='0'" in base and "step 0 · base" in base and "<ins>" not in base
    middle = probes_view.probes_html(EVALS, "5", {"max_steps": 10}, "running")
    assert "Compared with step 0" in middle and "unchanged since step 0" in middle
    assert "data-step='10'" in probes_view.probes_html(EVALS, "99", {}, "running")  # unknown step: the newest


def test_step_choices_follow_the_probes():
    choices = probes_view.probe_choices(EVALS, max_steps=10, state="finished")
    assert choices == [("latest", "latest"), ("0 · base", "0"), ("5", "5"), ("10 · end", "10")]


# ---- health: train reward up, held-out reward down ---------------------------------------------


def train_rows(rewards):
    return [{"step": i, "reward": r, "reward_std": 1.0, "frac_reward_zero_std": 0.0, "kl": 0.01, "entropy": 2.0}
            for i, r in enumerate(rewards, 1)]


def held(*rewards):
    return [{"step": 5 * i, "reward": r} for i, r in enumerate(rewards)]


def test_held_out_falling_while_train_rises_warns_with_a_fix():
    rows = train_rows([1.0 + 0.2 * i for i in range(10)])
    warnings = health_warnings(rows, held(5.0, 4.5, 3.0))
    assert [w.key for w in warnings] == ["held_out_falls"]
    w = warnings[0]
    assert "reward hacking" in w.detail and "from 5 to 3" in w.detail and "learning rate" in w.fix
    assert "Completions over time" in w.fix
    assert "Held-out reward falls" in views.health_html(rows, held(5.0, 4.5, 3.0))


def test_no_held_out_warning_when_both_fall_both_rise_or_too_few_probes():
    rising = train_rows([1.0 + 0.2 * i for i in range(10)])
    falling = train_rows([3.0 - 0.2 * i for i in range(10)])
    assert health_warnings(falling, held(5.0, 4.5, 3.0)) == []  # both fall: a bad run, not a split
    assert health_warnings(rising, held(3.0, 4.0, 5.0)) == []  # both rise: learning
    assert health_warnings(rising, held(5.0, 3.0)) == []  # two probes are not a trend
    assert health_warnings(rising, held(5.0, 3.0, 4.0)) == []  # not a steady fall
    assert health_warnings(rising, held(5.0, 5.0, 5.0)) == []  # flat
    assert health_warnings(rising) == []  # no probes at all


def test_train_tab_reads_a_runs_probes_and_draws_them_when_their_stamp_moves():
    from pipeline.run_folder import live
    from ui.live_view import live_view, picked_probes

    run_dir = runs.new_run_dir("probe-view")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=10).to_dict())
    runs.write_status(run_dir, "stopped")
    assert "step 0 is the base model" in live_view(run_dir.name, parts="probes")["probes"]
    stamp = live.stamps(run_dir.name, None)["probes"]
    for e in EVALS:
        runs.append_jsonl(run_dir / probes.PROBE_FILE, e)
    assert live.stamps(run_dir.name, None)["probes"] != stamp  # the page redraws the probes
    view = live_view(run_dir.name, parts="probes")
    assert set(view) == {"probe_plot", "probes", "probe_pick", "plot_colors"}
    assert "data-step='10'" in view["probes"] and ("0 · base", "0") in view["probe_pick"].constructor_args["choices"]
    series = view["probe_plot"].constructor_args["value"]["series"]
    assert set(series) == {"total (weighted)", "length_target", "token_diversity"}
    assert "data-step='5'" in picked_probes(run_dir.name, "5")  # a step picked by hand
    nothing = live_view("../etc", parts="probes")["probe_plot"].constructor_args  # only existing run folders are read
    assert nothing.get("value") is None and nothing["visible"] is True


def test_a_run_with_probes_off_hides_the_held_out_chart_and_says_why():
    from ui.live_view import live_view

    run_dir = runs.new_run_dir("probes-off")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=10, probe_every=0).to_dict())
    runs.write_status(run_dir, "running")
    view = live_view(run_dir.name, parts="probes")
    assert view["probe_plot"].constructor_args["visible"] is False
    assert view["probe_pick"].constructor_args["visible"] is False  # no probe step to pick either
    assert "Probes are off for this run" in view["probes"]
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=10).to_dict())
    assert live_view(run_dir.name, parts="probes")["probe_plot"].constructor_args["visible"] is True


def test_panel_shows_format_compliance_for_answers_with_a_reference():
    rows = [{"prompt": [{"role": "user", "content": "Calculate 2 + 2"}], "answer": "4"},
            {"prompt": [{"role": "user", "content": "Calculate 3 × 3"}], "answer": "9"}]
    per = {"numeric_tolerance": [0.0, 0.0]}
    evals = [probes.probe_record(0, rows, ["4", "nine"], per, [0.0, 0.0], seconds=1.0) | {"reward": 0.0},
             probes.probe_record(5, rows, ["<think>2+2</think><answer>4</answer>", "<answer>6</answer>"], per,
                                 [1.0, 0.0], seconds=1.0) | {"reward": 0.5}]
    assert "format compliance <b>0%</b>" in probes_view.probes_html(evals, "0", {}, "running")
    assert "format compliance <b>100%</b> (+100 points vs step 0)" in probes_view.probes_html(evals, "latest", {}, "running")
    # accuracy is a share of the prompts too: percent, and its change in points
    evals[0]["task"]["accuracy"] = 0.0
    assert "accuracy <b>50%</b> (+50 points vs step 0)" in probes_view.probes_html(evals, "latest", {}, "running")
    assert "format compliance" not in probes_view.probes_html(EVALS, "latest", {}, "running")  # TL;DR: no answers


def test_monitors_are_marked_in_the_reward_chart_and_the_group_inspector():
    rows = [{"step": 1, "reward": 1.0, "reward_weights": {"correct": 1.0, "strict": 0.0},
             "rewards": {"correct": {"mean": 1.0}, "strict": {"mean": 0.5}}}]
    assert set(charts.reward_frame(rows)["series"]) == {"total (weighted)", "correct", "strict (monitor, weight 0)"}
    record = {"step": 1, "weights": {"correct": 1.0, "strict": 0.0}, "groups": [{"prompt": "p", "completions": [
        {"completion": "a", "rewards": {"correct": 1.0, "strict": 0.0}, "total": 1.0, "advantage": 0.7},
        {"completion": "b", "rewards": {"correct": 0.0, "strict": 1.0}, "total": 0.0, "advantage": -0.7}]}]}
    assert "<th>strict (monitor, weight 0)</th>" in views.groups_html(record)


def test_zero_std_share_is_charted():
    rows = [{"step": 1, "frac_reward_zero_std": 0.5}, {"step": 2, "frac_reward_zero_std": 0.0}]
    assert charts.metric_frame(rows, "frac_reward_zero_std")["value"].tolist() == [0.5, 0.0]
    assert "loss" in charts.CHARTS and "near 0" in charts.LOSS_NOTE and "Train reward" in charts.LOSS_NOTE


def test_every_chart_has_a_y_axis_title():
    from ui import charts

    assert set(charts.CHARTS) | {"reward", "probe", "compare"} <= set(charts.CHART_Y_TITLES)
    assert "value" not in charts.CHART_Y_TITLES.values()


def test_a_prompt_that_asks_after_its_films_is_named_by_its_question_in_every_view():
    import html
    import json
    from pathlib import Path

    from pipeline.training.learnability import scan_report
    from ui import answers_view

    rows = [json.loads(line) for line in (Path(__file__).parents[2] / "assets/prompts/movies.jsonl")
            .read_text(encoding="utf-8").splitlines()[:2]]
    texts = [row["prompt"][-1]["content"] for row in rows]
    assert all(text.startswith("Films:") for text in texts)  # the first words would name both alike
    question = html.escape(" ".join(rows[0]["question"].split()))
    evals = [probes.probe_record(0, rows, ["[1] A", "[2] B"], {"movie_title": [0.0, 1.0]}, [0.0, 1.0], seconds=1.0)]
    assert f"Prompt 1: {question}</summary>" in probes_view.probes_html(evals, "latest", {}, "running")
    record = {"step": 1, "groups": [{"prompt": texts[0], "completions": [
        {"completion": "a", "rewards": {"movie_title": 1.0}, "total": 1.0, "advantage": 0.7},
        {"completion": "b", "rewards": {"movie_title": 0.0}, "total": 0.0, "advantage": -0.7}]}]}
    assert f"Prompt 1: {question}</summary>" in views.groups_html(record)
    labels = [label for label, _ in answers_view.prompt_choices({"run": evals})]
    assert labels[0].startswith(f"1. {rows[0]['question'][:60]}") and not any("Films:" in label for label in labels)
    scan = views.scan_html(scan_report(texts, [[0.0, 1.0], [0.0, 0.0]]))
    table = scan.split("<table")[1].split("</table>")[0]  # the list of flat prompts under it shows them whole
    assert f"<td class='gs-text'>{question}</td>" in table and "Films:" not in table
