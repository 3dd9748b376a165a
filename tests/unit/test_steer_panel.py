"""The Train tab's "Steer this run" panel, its pure side (ui/steer_view.py) and its markers (ui/charts.py): which
fields it shows, filled with the values in force; Apply sends only what changed, in Start's words when refused,
and never for another user's run; a run's applied changes become labelled markers on the charts and a list in
the header and the Runs table."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from pipeline.run_folder import owners, run_files, runs
from pipeline.setup import steering
from pipeline.setup.config import RewardSpec, RunConfig
from ui import charts, steer_view


@pytest.fixture(autouse=True)
def own_data(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))


def make_run(state: str = "running", owner: str | None = None, **overrides):
    run_dir = runs.new_run_dir("steer")
    runs.write_json_atomic(run_dir / run_files.CONFIG, RunConfig(**overrides).to_dict())
    owners.record_owner(run_dir, owner)
    if state == "running":  # this test process stands in for the trainer
        runs.write_status(run_dir, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()))
    else:
        runs.write_status(run_dir, state)
    return run_dir


def append(path, row: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def record(run_dir, step: int, setting: str, old, new, rid: str = "r1") -> None:
    append(run_dir / run_files.STEERING, {"id": rid, "step": step, "setting": setting, "old": old, "new": new,
                                          "time": 0.0})


def test_the_fields_are_the_steerable_settings_filled_with_the_values_in_force():
    run_dir = make_run(rewards=[RewardSpec("length_target"), RewardSpec("token_diversity", weight=0.5)],
                       temperature=0.9, learning_rate=3e-4, beta=0.0)
    record(run_dir, 3, "temperature", 0.9, 0.7)
    record(run_dir, 3, "weight/token_diversity", 0.5, 0.0)
    view = steer_view.panel(run_dir.name)
    assert view["enabled"]
    assert (view["temperature"], view["learning_rate"], view["beta"]) == (0.7, 3e-4, 0.0)  # the change applied
    assert view["weights"] == [("length_target", 1.0), ("token_diversity", 0.0)]
    assert view["shown"] == {"temperature": 0.7, "learning_rate": 3e-4, "beta": 0.0,
                             "weights": {"length_target": 1.0, "token_diversity": 0.0}}
    assert set(s for s, _ in steer_view.NUMBERS) == set(steering.STEERABLE)
    # A request still waiting is what the run trains with from its next step: the fields show it.
    steering.request(run_dir, {"learning_rate": 1e-4})
    assert steer_view.panel(run_dir.name)["learning_rate"] == 1e-4
    assert "Waiting: lr → 0.0001" in steer_view.panel(run_dir.name)["answers"]
    assert '"learning_rate": 0.0003' in steer_view.panel(run_dir.name)["command"]  # in force: not applied yet
    # The settings that can't change are listed with this run's value and why.
    fixed = view["fixed"]
    assert "| `num_generations` | `4` | the sampler and the advantages are laid out for G completions" in fixed
    assert "`temperature`" not in fixed and "`learning_rate`" not in fixed
    # The command view: the steer command for this run and the settings in force.
    assert "-m pipeline.steer --run-dir" in view["command"] and '"temperature": 0.7' in view["command"]


def test_the_panel_takes_changes_while_training_and_for_a_resume_even_of_a_finished_run():
    assert steer_view.panel(make_run("running").name)["note"].startswith("Changes apply when the next step starts")
    stopped = steer_view.panel(make_run("stopped").name)
    assert stopped["enabled"] and "a change applies when it is resumed" in stopped["note"]
    assert steer_view.panel(make_run("failed").name)["enabled"]
    finished = make_run("finished")
    view = steer_view.panel(finished.name)  # a finished run trains further when resumed to a later step
    assert view["enabled"] and "a change applies if you train it further" in view["note"]
    assert not steer_view.panel(None)["enabled"] and not steer_view.panel("no-such-run")["enabled"]
    typed = {**view["shown"], "learning_rate": 1e-4}
    assert steer_view.steer(finished.name, view["shown"], typed).endswith(
        "Applies if the run is resumed to a later step, from its first new step.")


def test_apply_sends_only_the_fields_that_changed():
    run_dir = make_run()
    shown = steer_view.panel(run_dir.name)["shown"]
    typed = {**shown, "weights": {**shown["weights"], "length_target": 0}}
    message = steer_view.steer(run_dir.name, shown, typed)
    assert message.startswith("✓ Requested w(length_target) 1→0. Applies at the first step to start"), message
    append(run_dir / run_files.METRICS, {"step": 2, "reward": 1.0})  # step 2 logged: step 3 is training
    typed = {**shown, "learning_rate": 1e-4}
    assert steer_view.steer(run_dir.name, shown, typed).endswith("Applies at step 4, the next to start (step 3 is "
                                                                 "training now).")
    assert [r["changes"] for r in steering.read_requests(run_dir)] == [{"weight/length_target": 0},
                                                                        {"learning_rate": 1e-4}]
    # Typed back to what the panel was filled with: nothing is sent.
    assert steer_view.steer(run_dir.name, shown, shown) == "Nothing to apply: change a field first."
    assert len(steering.read_requests(run_dir)) == 2
    assert steer_view.changed_only({"learning_rate": 3e-4}, {"learning_rate": 0.1 * 3e-3}) == {}  # a float round trip
    # A stopped run: the change waits for the resume, and says so.
    stopped = make_run("stopped")
    shown = steer_view.panel(stopped.name)["shown"]
    assert "Applies when the run is resumed, from its first step" in steer_view.steer(stopped.name, shown,
                                                                            {**shown, "temperature": 0.7})


def test_a_value_start_refuses_is_refused_with_starts_words_and_an_empty_field_says_so():
    run_dir = make_run()
    shown = steer_view.panel(run_dir.name)["shown"]
    message = steer_view.steer(run_dir.name, shown, {**shown, "temperature": 0})
    assert message == "❌ " + " ".join(RunConfig(temperature=0).problems())
    all_off = {**shown, "weights": {name: 0 for name in shown["weights"]}}
    assert "Every reward has weight 0" in steer_view.steer(run_dir.name, shown, all_off)
    assert steer_view.steer(run_dir.name, shown, {**shown, "beta": None}) == \
        "❌ Give beta (KL weight) a value (the field is empty)."
    assert steering.read_requests(run_dir) == []


def test_another_users_run_is_refused_as_stop_refuses_it():
    run_dir = make_run(owner="alice")
    shown = steer_view.panel(run_dir.name)["shown"]
    typed = {**shown, "temperature": 0.7}
    message = steer_view.steer(run_dir.name, shown, typed, owners.Actor("bob"))
    assert message == "❌ " + owners.refusal_message(run_dir.name, "alice", "steer it")
    assert steering.read_requests(run_dir) == []
    assert steer_view.steer(run_dir.name, shown, typed, owners.Actor("carol", operator=True)).startswith("✓")
    assert steer_view.steer(run_dir.name, shown, {**typed, "temperature": 0.6}, owners.Actor("alice")).startswith("✓")


def test_the_answers_say_applied_at_which_step_or_refused_with_why():
    run_dir = make_run()
    record(run_dir, 4, "learning_rate", 3e-4, 1e-4, rid="a")
    append(run_dir / run_files.STEERING, {"id": "b", "step": 6, "refused": "Temperature must be above 0.", "time": 0})
    answers = steer_view.panel(run_dir.name)["answers"]
    assert answers.index("❌ Refused at step 6: Temperature must be above 0.") < answers.index(
        "✓ Applied at step 4: lr 0.0003→0.0001")


def test_applied_changes_become_labelled_markers_spanning_each_chart():
    run_dir = make_run()
    record(run_dir, 3, "weight/length_target", 1.0, 0.0)
    record(run_dir, 3, "learning_rate", 5e-5, 1e-4)
    record(run_dir, 6, "temperature", 0.9, 0.7, rid="r2")
    (run_dir / run_files.STEERING).open("a").write('{"id": "torn", "st')  # a torn last line is skipped
    markers = charts.change_markers(steering.applied_changes(run_dir))
    assert markers == [(3, "steered at 3: w(length_target) 1→0, lr 5e-5→0.0001"), (6, "steered at 6: temp 0.9→0.7")]
    rows = [{"step": s, "reward": float(s), "rewards": {"length_target": {"mean": -s}}} for s in range(1, 8)]
    frame = charts.with_markers(charts.reward_frame(rows), markers)
    rule = frame[frame.series == markers[0][1]]
    assert list(rule.step) == [3, 3] and list(rule.value) == [-7.0, 7.0]  # from the chart's lowest to its highest
    share = charts.with_markers(pd.DataFrame([(1, 0.0, "share")], columns=charts.COLUMNS), markers, [0, 1])
    assert list(share[share.series == markers[1][1]].value) == [0, 1]  # a chart with fixed ends: across them
    assert charts.with_markers(None, markers) is None  # no data yet: nothing to mark
    # The header and the Runs table list them.
    assert "step 6: temp 0.9→0.7" in steer_view.changes_html(steering.applied_changes(run_dir))
    assert steer_view.changes_html([]) == ""
    from ui.runs_panel import runs_table

    table = runs_table()
    assert table.loc[table.run == run_dir.name, "steered"].item() == (
        "3: w(length_target) 1→0; 3: lr 5e-5→0.0001; 6: temp 0.9→0.7")


def test_the_live_view_draws_the_markers_and_the_header_from_steering_jsonl():
    from ui import live_view

    run_dir = make_run()
    append(run_dir / run_files.METRICS, {"step": 1, "reward": 1.0, "completion_length": 12.0,
                                         "rewards": {"length_target": {"mean": 1.0}}})
    record(run_dir, 2, "weight/length_target", 1.0, 0.0)
    out = live_view.live_view(run_dir.name, parts="progress charts")
    assert "w(length_target) 1→0" in out["progress"]
    for name in ("reward_plot", "plot_completion_length"):
        frame = out[name].constructor_args["value"]
        assert "steered at 2: w(length_target) 1→0" in set(frame.series), name


def test_a_series_that_appears_mid_run_changes_the_plots_colour_map():
    """The plot rebuilds its legend only when its colour map changes: a marker (or a monitor's new label) must."""
    before = pd.DataFrame([(1, 1.0, "total (weighted)"), (1, 0.5, "length_target")], columns=charts.COLUMNS)
    after = charts.with_markers(before, [(2, "steered at 2: w(length_target) 1→0")])
    assert charts.series_colors(before) == {"total (weighted)": "#4c78a8", "length_target": "#f58518"}
    assert charts.series_colors(after) == {**charts.series_colors(before),
                                           "steered at 2: w(length_target) 1→0": charts.MARKER_COLORS[0]}
    from ui import live_view

    assert live_view.plot_colors({"reward_plot": charts.series_colors(after)})["reward_plot"].constructor_args == {
        "color_map": charts.series_colors(after)}
