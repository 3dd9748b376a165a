"""The queue of trainings waiting for the machine (pipeline/run_folder/run_queue.py, started by pipeline/runner.py):
checked as Start checks, started oldest first when the machine is free, kept on disk with the reason when an
entry can't start, and each entry its owner's to remove."""

import json
import time

import pytest

from pipeline import runner
from pipeline.run_folder import owners, run_queue, runs
from pipeline.setup.config import RunConfig
from tests.integration.helpers import fake_trainer, poll, stand_in

ALICE, BOB = owners.Actor("alice"), owners.Actor("bob")


@pytest.fixture
def stand_in_trainer(monkeypatch, tmp_path):
    """Trainers that run `seconds` (5 unless the label says 'quick') and finish, launched as the runner would."""
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    stand_in(monkeypatch, "train", lambda run_dir, **kw: fake_trainer(run_dir, seconds=0.2 if "quick" in
                                                                      run_dir.name else 5))


def state(run_dir):
    return runs.read_status(run_dir).get("state")


def training(label):
    """A stand-in training, running (so that a Stop finds its handler in place)."""
    run_dir = runner.start("train", cfg=RunConfig(), label=label)
    assert poll(lambda: state(run_dir) == "running", 60)
    return run_dir


def test_queued_runs_start_one_after_another_in_order_with_their_own_settings(stand_in_trainer):
    first = training("first")
    a, started = runner.queue_training(RunConfig(learning_rate=1e-4, max_steps=3), label="quick a", actor=ALICE)
    assert started is None  # the machine is busy: it waits
    b, _ = runner.queue_training(RunConfig(learning_rate=1e-3), label="quick b", actor=BOB)
    queue = run_queue.read()
    assert [w.label for w in queue.waiting] == ["quick a", "quick b"] and queue.position(b.id) == 2
    assert runner.start_next() is None  # still busy

    assert runner.stop("train", first, grace_s=15)
    assert poll(lambda: runner.busy_run() is None, 20)
    run_a = runner.start_next()
    assert run_a is not None and run_a.name.endswith("quick-a")
    assert json.loads((run_a / "config.json").read_text())["learning_rate"] == 1e-4
    assert json.loads((run_a / "owner.json").read_text())["user"] == "alice"
    assert [w.label for w in run_queue.read().waiting] == ["quick b"]
    # The page that showed the run before follows the one that started after it, for a few seconds.
    assert run_queue.follow(run_queue.read(), first.name) == run_a.name
    assert runner.start_next() is None  # one at a time
    assert poll(lambda: state(run_a) == "finished" and runner.busy_run() is None, 20)
    run_b = runner.start_next()
    assert run_b is not None and run_b.name.endswith("quick-b")
    assert json.loads((run_b / "config.json").read_text())["learning_rate"] == 1e-3
    assert run_queue.read().waiting == []
    assert poll(lambda: state(run_b) == "finished", 20)


def test_a_queue_on_a_free_machine_starts_at_once(stand_in_trainer):
    entry, started = runner.queue_training(RunConfig(), label="quick now")
    assert started is not None and started.name.endswith("quick-now")
    assert run_queue.read().waiting == []
    assert poll(lambda: state(started) == "finished", 20)


def test_a_queued_run_is_checked_as_start_checks_it(stand_in_trainer):
    with pytest.raises(ValueError, match="multiple of the group size"):
        runner.queue_training(RunConfig(batch_size=3), label="bad")
    from pipeline.setup.config import RewardSpec

    custom = RunConfig(rewards=[RewardSpec("custom_python", 1.0, {"code": "def reward(c): return 0"})])
    with pytest.raises(ValueError, match="custom"):
        runner.queue_training(custom, label="custom")
    assert run_queue.read().waiting == []


def test_an_entry_that_can_no_longer_start_keeps_its_settings_and_says_why(stand_in_trainer):
    """Custom reward code queued while the app allowed it, and the app restarted without --allow-custom-rewards:
    that entry stays in the line with the reason, and the next one starts."""
    from pipeline.setup.config import RewardSpec

    first = training("first")
    code = "def reward(completions, **kw):\n    return [0.0 for _ in completions]\n"
    custom, _ = runner.queue_training(RunConfig(rewards=[RewardSpec("custom_python", 1.0, {"code": code})]),
                                      label="quick custom", allow_custom_rewards=True)
    runner.queue_training(RunConfig(), label="quick ok")
    runner.stop("train", first, grace_s=15)
    assert poll(lambda: runner.busy_run() is None, 20)
    started = runner.start_next(allow_custom_rewards=False)
    assert started is not None and started.name.endswith("quick-ok")  # the next entry is tried
    left = run_queue.read().waiting
    assert [w.id for w in left] == [custom.id] and "custom" in left[0].error.lower()
    assert left[0].config["rewards"][0]["params"]["code"] == code  # nothing lost
    assert run_queue.has_waiting() is False  # an entry that failed waits for its owner, never blocks the line
    runner.unqueue(custom.id)
    assert run_queue.read().waiting == []


def test_only_the_owner_or_an_operator_removes_an_entry(stand_in_trainer):
    training("first")
    entry, _ = runner.queue_training(RunConfig(), label="quick mine", actor=ALICE)
    with pytest.raises(runner.RunnerError, match="queued by alice"):
        runner.unqueue(entry.id, BOB)
    assert [w.id for w in run_queue.read().waiting] == [entry.id]
    runner.unqueue(entry.id, owners.Actor("carol", operator=True))
    with pytest.raises(runner.RunnerError, match="no longer in the queue"):
        runner.unqueue(entry.id, ALICE)


def test_the_queue_has_a_limit_and_a_damaged_file_is_never_written_over(stand_in_trainer, monkeypatch):
    training("first")
    monkeypatch.setattr(run_queue, "MAX_WAITING", 2)
    for label in ("quick 1", "quick 2"):
        runner.queue_training(RunConfig(), label=label)
    with pytest.raises(runner.RunnerError, match="already holds 2 runs, and takes at most 2"):
        runner.queue_training(RunConfig(), label="quick 3")
    run_queue.queue_file().write_text("{not json")
    with pytest.raises(runner.RunnerError, match="can't be read"):
        runner.queue_training(RunConfig(), label="quick 4")
    assert run_queue.queue_file().read_text() == "{not json"
    assert run_queue.read().waiting == [] and runner.start_next() is None


def test_the_apps_keeper_starts_the_next_run_when_the_machine_frees(stand_in_trainer):
    import threading

    first = training("first")
    runner.queue_training(RunConfig(), label="quick kept")
    seen, stop = [], threading.Event()
    keeper = threading.Thread(target=runner.watch_queue, kwargs=dict(on_start=seen.append, every_s=0.2, stop=stop))
    keeper.start()
    try:
        time.sleep(1)
        assert seen == []  # the first run still trains
        runner.stop("train", first, grace_s=15)
        assert poll(lambda: seen, 20) and seen[0].name.endswith("quick-kept")
    finally:
        stop.set()
        keeper.join(5)
    assert poll(lambda: state(seen[0]) == "finished", 20)


def test_a_line_in_the_file_that_is_not_an_entry_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_queue.queue_file().write_text(json.dumps({"waiting": [{"label": "x"}, 3, {"label": "y", "config": {}}]}))
    assert [w.label for w in run_queue.read().waiting] == ["y"]
    assert run_queue.read().ready().label == "y"


def test_a_sweep_queues_the_forms_run_once_per_value_or_nothing(stand_in_trainer, monkeypatch):
    from ui import train_form

    training("first")
    monkeypatch.setattr("pipeline.models.loading.hub_fetch_problem", lambda *a: None)
    form = train_form.config_to_form(RunConfig(max_steps=3))
    _, message = train_form.queue_sweep(False, 1, "quick", "learning_rate", "1e-4, 3e-4 1e-3", "", "", None,
                                        **form)
    assert message.startswith("Queued 3 runs: **quick-lr-1e-4**, **quick-lr-3e-4**, **quick-lr-1e-3**"), message
    waiting = run_queue.read().waiting
    assert [(w.config["learning_rate"], w.config["max_steps"]) for w in waiting] == [(1e-4, 3), (3e-4, 3), (1e-3, 3)]
    # One value that can't run: nothing of the sweep is queued, and the message names the value.
    _, message = train_form.queue_sweep(False, 1, "", "num_generations", "4, 3", "", "", None, **form)
    assert message.startswith("❌") and "G 3" in message and len(run_queue.read().waiting) == 3
    for bad, said in (("1e-4", "two or more"), ("1e-4, x", "'x' is not a number"), ("1, 1", "typed twice")):
        _, message = train_form.queue_sweep(False, 1, "", "learning_rate", bad, "", "", None, **form)
        assert said in message, message
    _, message = train_form.queue_sweep(False, 1, "", "model", "1, 2", "", "", None, **form)
    assert "pick one of" in message and len(run_queue.read().waiting) == 3
    # A second setting makes a grid: every pair of values, each run checked with both set.
    _, message = train_form.queue_sweep(False, 1, "g", "learning_rate", "1e-4, 1e-3", "beta", "0, 0.04", None, **form)
    assert message.startswith("Queued 4 runs: **g-lr-1e-4-beta-0**, **g-lr-1e-4-beta-0-04**"), message
    assert [(w.config["learning_rate"], w.config["beta"]) for w in run_queue.read().waiting[3:]] == [
        (1e-4, 0.0), (1e-4, 0.04), (1e-3, 0.0), (1e-3, 0.04)]
    from ui.queue_view import queue_html

    shown = queue_html(run_queue.read())  # the line shows what the runs differ in: here beta, beside lr
    assert "lr 0.0001, G=4, beta 0.04," in shown and "lr 0.001, G=4, beta 0.0," in shown
    _, message = train_form.queue_sweep(False, 1, "", "beta", "0, 0.04", "beta", "0, 1", None, **form)
    assert "two different settings" in message and len(run_queue.read().waiting) == 7


def test_a_queued_runs_settings_load_back_into_the_form(stand_in_trainer):
    from ui import queue_view

    training("first")
    entry, _ = runner.queue_training(RunConfig(learning_rate=1e-4, max_steps=3, model="org/some-model"),
                                     label="quick loaded")
    values = queue_view.load_queued(entry.id)
    assert values["learning_rate"] == 1e-4 and values["max_steps"] == 3 and values["run_name"] == "quick loaded"
    assert values["model_custom"] == "org/some-model" and "Loaded **quick loaded**" in values["message"]
    assert [w.id for w in run_queue.read().waiting] == [entry.id]  # loading leaves it queued
    assert set(queue_view.load_queued("gone")) == {"message"} and set(queue_view.load_queued(None)) == {"message"}


def test_the_queue_from_a_terminal_adds_lists_removes_and_keeps_the_line(stand_in_trainer, capsys):
    """`python -m pipeline.queue`: a run and a sweep of a run on disk join the same line as the Train tab's, each
    checked first (bad input queues nothing), one is removed by name, and `keep --until-empty` starts the rest one
    after another, then exits."""
    from pipeline import queue as cli

    first = training("first")
    assert cli.main(["add", "--name", "quick cli", "--set", "learning_rate=3e-4", "--set", "max_steps=3"]) == 0
    assert "Queued quick-cli" in capsys.readouterr().out
    assert cli.main(["add", "--like", first.name, "--name", "quick s", "--sweep", "max_steps=2,4"]) == 0
    waiting = run_queue.read().waiting
    assert [(w.label, w.config["max_steps"], w.config["learning_rate"]) for w in waiting] == [
        ("quick-cli", 3, 3e-4), ("quick-s-steps-2", 2, RunConfig().learning_rate),
        ("quick-s-steps-4", 4, RunConfig().learning_rate)]
    for bad, said in ((["--set", "max_steps=two"], "whole number"), (["--set", "nope=1"], "Unknown setting 'nope'"),
                      (["--sweep", "num_generations=4,3"], "G 3"), (["--like", "gone"], "No run 'gone'")):
        assert cli.main(["add", *bad]) == 2
        assert said in capsys.readouterr().err
    assert len(run_queue.read().waiting) == 3
    assert cli.main([]) == 0
    listing = capsys.readouterr().out
    assert f"Training now: {first.name}" in listing and "2. quick-s-steps-2" in listing and waiting[0].id in listing
    assert cli.main(["remove", "quick-s-steps-4"]) == 0 and cli.main(["remove", "quick-s-steps-4"]) == 2
    assert [w.label for w in run_queue.read().waiting] == ["quick-cli", "quick-s-steps-2"]

    runner.stop("train", first, grace_s=15)
    cli.keep(allow_custom_rewards=False, until_empty=True, every_s=0.2)
    started = capsys.readouterr().out
    assert started.count("Started ") == 2 and "The queue is empty and nothing trains." in started
    made = [run_queue.read().started[-2]["run"], run_queue.read().started[-1]["run"]]
    assert [runs.read_json(runs.runs_dir() / name / "config.json")["max_steps"] for name in made] == [3, 2]
    assert all(state(runs.runs_dir() / name) == "finished" for name in made)


def test_two_sweeps_from_a_terminal_make_a_grid_and_a_grid_too_big_queues_nothing(stand_in_trainer, capsys):
    from pipeline import queue as cli

    training("first")
    assert cli.main(["add", "--name", "g", "--sweep", "learning_rate=1e-4,1e-3", "--sweep", "beta=0,0.04"]) == 0
    assert [(w.label, w.config["learning_rate"], w.config["beta"]) for w in run_queue.read().waiting] == [
        ("g-lr-1e-4-beta-0", 1e-4, 0.0), ("g-lr-1e-4-beta-0-04", 1e-4, 0.04),
        ("g-lr-1e-3-beta-0", 1e-3, 0.0), ("g-lr-1e-3-beta-0-04", 1e-3, 0.04)]
    assert cli.main(["add", "--sweep", "learning_rate=1e-4,2e-4,3e-4,4e-4,5e-4", "--sweep", "seed=1,2,3,4,5"]) == 2
    assert "makes 25 runs" in capsys.readouterr().err and len(run_queue.read().waiting) == 4


def test_a_next_stage_queued_from_a_terminal_waits_for_its_run_and_takes_the_model_it_ended_with(stand_in_trainer,
                                                                                                 capsys):
    """`add --after RUN`: RUN's settings with the model RUN ends with; queued while RUN trains, it starts once RUN has
    ended and takes that model as its own. A run that ended without one is refused at once."""
    import shutil

    from pipeline import queue as cli
    from pipeline.run_folder import run_files

    first = training("first")
    assert cli.main(["add", "--after", first.name, "--set", "learning_rate=1e-3"]) == 0
    (waiting,) = run_queue.read().waiting
    assert waiting.label == "first-stage2" and waiting.config["model"] == str(first / run_files.MERGED)
    assert waiting.config["learning_rate"] == 1e-3
    runner.stop("train", first, grace_s=15)
    (first / run_files.MERGED).mkdir()  # what a real trainer leaves at a stop (the stand-in writes no model)
    (first / run_files.MERGED / run_files.CONFIG).write_text("{}")
    cli.keep(allow_custom_rewards=False, until_empty=True, every_s=0.2)
    stage = runs.runs_dir() / run_queue.read().started[-1]["run"]
    assert stage.name.endswith("-first-stage2") and state(stage) == "finished"
    assert runs.read_json(stage / run_files.CONFIG)["model"] == str(stage / run_files.STAGE_BASE)
    assert runs.read_json(stage / run_files.STAGE_BASE / run_files.STAGE_FILE)["run"] == first.name
    shutil.rmtree(first / run_files.MERGED)
    capsys.readouterr()
    assert cli.main(["add", "--after", first.name]) == 2
    assert f"Run '{first.name}' has no tuned model to start from" in capsys.readouterr().err
