"""The live view's one change detector: pipeline/run_folder/live.py gives a stamp per part of the view, the page redraws
the parts whose stamp moved, and the Refresh handler draws those parts and nothing else. A stamp that moved
every second would redraw every second; a stamp that missed a change would leave the view stale."""

import json
import os
import time

import pandas as pd
import pytest

from pipeline.run_folder import jobstate, live, run_files, runs
from pipeline.setup.config import RunConfig


@pytest.fixture(autouse=True)
def own_data(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))


def make_running_run(name: str):
    run_dir = runs.new_run_dir(name)
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=10).to_dict())
    # This test process stands in for the trainer: alive, so the run reads as running.
    runs.write_status(run_dir, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()))
    return run_dir


def append(path, row: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def settled() -> float:
    """A moment after every file written so far: the log's stamp is exact by then."""
    return time.time() + live.LOG_EVERY_S + 1


def test_the_stamps_hold_still_until_a_file_a_part_reads_changes():
    run_dir = make_running_run("live")
    other = make_running_run("other")
    now = settled()
    before = live.stamps(run_dir.name, None, now)
    assert set(before) == set(live.PARTS)
    assert live.stamps(run_dir.name, None, now) == before  # nothing happened: nothing to redraw

    def moved(change) -> set[str]:
        nonlocal before
        change()
        after = live.stamps(run_dir.name, other.name, settled())
        parts = {part for part in live.PARTS if after[part] != before[part]}
        before = after
        return parts

    moved(lambda: None)  # the Runs panel now shows `other`: from here on both runs are picked
    assert moved(lambda: None) == set()
    step, group, probe = {"step": 1, "reward": 1.0}, {"step": 1, "groups": []}, {"step": 0, "reward": 0.5}
    assert moved(lambda: append(run_dir / "metrics.jsonl", step)) == {"progress", "charts", "runs"}
    assert moved(lambda: append(run_dir / "groups.jsonl", group)) == {"progress", "groups"}
    # a probe: its panel, the held-out chart and trend, and the runs table's held-out column
    assert moved(lambda: append(run_dir / "evals.jsonl", probe)) == {"progress", "charts", "probes", "runs"}
    assert moved(lambda: (run_dir / "train.log").write_text("step 1\n")) == {"log"}
    # A change asked for moves the steer panel alone; the trainer's answer also marks the charts and the header.
    assert moved(lambda: append(run_dir / "steer_requests.jsonl", {"id": "a", "changes": {"beta": 0.1}})) == {"steering"}
    assert moved(lambda: append(run_dir / "steering.jsonl", {"id": "a", "step": 2, "setting": "beta", "old": 0.0,
                                                             "new": 0.1})) == {"progress", "charts", "probes",
                                                                               "steering", "runs"}
    assert moved(lambda: jobstate.write_state(other, run_files.EVAL_STATUS, "evaluator", "running", done=1, total=4)) == {"jobs"}
    assert moved(lambda: jobstate.write_state(other, run_files.PUSH_STATUS, "pusher", "failed",
                                              error="offline")) == {"jobs", "push"}
    # The Runs panel's run changed state: the table, and its jobs box (which says when it trained since its
    # evaluation).
    assert moved(lambda: runs.write_status(other, "stopped")) == {"runs", "jobs"}
    # a new run folder is listed, and can be picked (the queue's part offers it)
    assert moved(lambda: make_running_run("third")) == {"runs", "jobs", "push", "queue"}
    # A training queued or taken out of the queue moves the queue's part alone.
    from pipeline.run_folder import run_queue
    # (its start time too, which from then on each step of the training moves)
    assert moved(lambda: run_queue.add(run_queue.Waiting("later", {"max_steps": 2}))) == {"queue", "queue_times"}
    assert moved(lambda: append(run_dir / "metrics.jsonl", step)) == {"progress", "charts", "runs", "queue_times"}
    # What Chat and RAG offer: a checkpoint whose save finished, then a merged model; a half-saved one is not yet.
    (other / "checkpoint-2").mkdir()
    assert moved(lambda: None) == set()
    assert moved(lambda: (other / "checkpoint-2" / run_files.CHECKPOINT_MARKER).write_text("")) == {"models"}
    assert moved(lambda: ((other / "merged").mkdir(), (other / "merged" / "config.json").write_text("{}"))) == {
        "models"}


def test_a_chatty_log_moves_its_stamp_at_most_every_few_seconds_and_settles_on_its_last_lines():
    run_dir = make_running_run("chatty")
    log = run_dir / "train.log"
    start = (int(time.time()) // live.LOG_EVERY_S) * live.LOG_EVERY_S  # the start of a window
    log.write_text("a\n")
    os.utime(log, (start + 0.5, start + 0.5))
    stamp = live.stamps(run_dir.name, None, start + 1)["log"]
    log.write_text("a\nb\n")
    os.utime(log, (start + 1.5, start + 1.5))  # grown, in the same few seconds
    assert live.stamps(run_dir.name, None, start + 2)["log"] == stamp
    os.utime(log, (start + live.LOG_EVERY_S + 0.5,) * 2)  # a later window: the tail is redrawn
    later = live.stamps(run_dir.name, None, start + live.LOG_EVERY_S + 1)["log"]
    assert later != stamp
    # Quiet for a few seconds: the stamp becomes exact, so the last lines written show.
    assert live.stamps(run_dir.name, None, start + 3 * live.LOG_EVERY_S)["log"] != later


def test_a_trainer_that_dies_without_a_word_moves_the_parts_that_show_its_state(monkeypatch):
    run_dir = make_running_run("dies")
    now = settled()
    before = live.stamps(run_dir.name, None, now)
    monkeypatch.setattr(jobstate, "_process_alive", lambda pid, *start: False)  # SIGKILL: status.json says running
    after = live.stamps(run_dir.name, None, now)
    assert {part for part in live.PARTS if after[part] != before[part]} == {"progress", "probes", "steering", "runs"}


def test_a_deleted_run_moves_every_part_it_was_drawn_in():
    run_dir = make_running_run("deleted")
    before = live.stamps(run_dir.name, run_dir.name)
    runs.write_status(run_dir, "stopped")
    runs.delete_run(run_dir)
    after = live.stamps(run_dir.name, run_dir.name)
    assert {part for part in live.PARTS if after[part] != before[part]} >= {*live.SHOWN_PARTS, "jobs", "runs"}
    assert after["progress"] == f"{run_dir.name}: gone"


# ---- the Refresh handler draws exactly the parts that moved -------------------------------------------------


def comparable(value):
    """An update as plain data, so two draws of the same output can be compared."""
    if isinstance(value, pd.DataFrame):
        # The runs table's duration of a running run grows every second; the table is redrawn with each step.
        return value.drop(columns=["time"], errors="ignore").to_json()
    if hasattr(value, "constructor_args"):  # gr.LinePlot(...), gr.Radio(...), gr.Slider(...)
        return {k: comparable(v) for k, v in value.constructor_args.items()}
    return value


def draw_everything(shown, action) -> dict:
    from ui import live_view

    drawn = live_view.live_view(shown, 0, "latest", action, parts=live_view.ALL_PARTS)
    return {name: comparable(v) for name, v in drawn.items()}


@pytest.mark.parametrize("shown", ["drawn", None, "gone-run", "bad" + chr(0) + "name"])
def test_the_refresh_draws_the_outputs_of_the_parts_it_is_given_and_no_other(shown):
    from ui import live_view

    # Every Train part has its outputs here; push is the Chat tab's, steering the steer panel's (ui/steer_panel.py).
    assert set(live_view.PART_OUTPUTS) == set(live.PARTS) - {"push", "steering", "models"}
    run_dir = make_running_run("drawn")
    append(run_dir / "metrics.jsonl", {"step": 1, "reward": 1.0})
    append(run_dir / "groups.jsonl", {"step": 1, "groups": []})
    for part, outputs in live_view.PART_OUTPUTS.items():
        # The token record is drawn only while the group inspector shows tokens.
        mode = "Log-prob" if part == "tokens" else "Text"
        assert set(live_view.live_view(shown, 0, "latest", run_dir.name, mode, part)) == set(outputs), part
    assert live_view.live_view(shown, 0, "latest", run_dir.name, "Text", "tokens") == {}
    assert live_view.live_view(shown, 0, "latest", run_dir.name, parts="") == {}  # nothing moved: nothing is sent
    everything = live_view.live_view(shown, 0, "latest", run_dir.name, parts=live_view.ALL_PARTS)
    assert set(everything) == {name for names in live_view.PART_OUTPUTS.values() for name in names}


def test_a_new_token_line_redraws_the_groups_with_their_tokens_only_while_the_inspector_shows_tokens():
    from pipeline.run_folder import token_log
    from ui import live_view

    run_dir = make_running_run("tokens")
    append(run_dir / "groups.jsonl", {"step": 1, "weights": {}, "groups": [
        {"prompt": "p", "completions": [{"completion": " a", "rewards": {}, "total": 1.0, "advantage": 0.0}]}]})
    token_log.append_step(run_dir, 1, [[token_log.completion_entry([" a"], [-1.5], [0.5])]])
    assert live_view.live_view(run_dir.name, 0, "latest", None, "Text", "tokens") == {}
    drawn = live_view.live_view(run_dir.name, 0, "latest", None, "Log-prob", "tokens")
    assert set(drawn) == {"groups"} and "log-prob -1.5000" in drawn["groups"]


def test_every_output_that_changes_is_in_a_part_whose_stamp_moved():
    """Draw the whole view before and after each change to the run files: an output that came out different
    belongs to a part whose stamp moved (else the page would keep showing the old one), and the handler, told
    the moved parts, sends those parts' outputs and no other."""
    from ui import live_view

    shown, action = make_running_run("shown"), make_running_run("picked")
    changes = {
        "a step": lambda: append(shown / "metrics.jsonl", {"step": 1, "reward": 1.0, "kl": 0.1, "rewards": {}}),
        "its groups": lambda: append(shown / "groups.jsonl", {"step": 1, "weights": {}, "groups": [
            {"prompt": "p", "completions": [{"completion": "a", "rewards": {}, "total": 1.0, "advantage": 0.7}]}]}),
        "a probe": lambda: append(shown / "evals.jsonl", {"step": 0, "reward": 0.5, "samples": []}),
        "its tokens": lambda: append(shown / "tokens.jsonl", {"step": 1, "groups": [[None]]}),
        "log lines": lambda: (shown / "train.log").write_text("step 1\nstep 2\n"),
        "a longer run": lambda: runs.record_launch(shown, True, 1, {"max_steps": 20}, []),
        "a steered change": lambda: append(shown / "steering.jsonl", {"id": "x", "step": 1, "time": 0.0,
                                                                      "setting": "temperature", "old": 0.9, "new": 0.7}),
        "an evaluation": lambda: jobstate.write_state(action, run_files.EVAL_STATUS, "evaluator", "running",
                                                      done=1, total=4, phase="base"),
        "its result": lambda: (runs.write_json_atomic(action / "eval.json", {"n": 1, "base": {}, "tuned": {},
                                                                              "delta": 0.0, "samples": []}),
                               jobstate.write_state(action, run_files.EVAL_STATUS, "evaluator", "done", done=4, total=4)),
        "a push": lambda: jobstate.write_state(action, run_files.PUSH_STATUS, "pusher", "failed", error="offline"),
        "a stop": lambda: runs.write_status(shown, "stopped"),
        "another run": lambda: make_running_run("another"),
        "a deletion": lambda: runs.delete_run(shown),
    }
    for what, change in changes.items():
        stamps, view = live.stamps(shown.name, action.name, settled()), draw_everything(shown.name, action.name)
        change()
        new_stamps, new_view = live.stamps(shown.name, action.name, settled()), draw_everything(shown.name, action.name)
        moved = {part for part in live_view.PART_OUTPUTS if new_stamps[part] != stamps[part]}
        assert moved, what
        changed = {name for name in new_view if new_view[name] != view[name]}
        stale = changed - {name for part in moved for name in live_view.PART_OUTPUTS[part]}
        assert not stale, f"{what}: {sorted(stale)} changed, but no stamp of theirs moved (moved: {sorted(moved)})"
        redrawn = live_view.live_view(shown.name, 0, "latest", action.name, parts=" ".join(moved))
        drawn = moved - {"tokens"}  # the view shows text: the token record is not drawn (a shaded mode: above)
        assert set(redrawn) == {name for part in drawn for name in live_view.PART_OUTPUTS[part]}, what


def test_the_queue_says_when_each_waiting_run_starts_and_a_step_of_the_training_moves_it():
    from pipeline.run_folder import run_queue
    from ui import live_view

    run_dir = make_running_run("training")  # 10 steps, the default settings
    now = time.time()
    runs.write_status(run_dir, "running", started_at=now - 300)
    for label, config in (("lr 1e-3", RunConfig(max_steps=10, learning_rate=1e-3)), ("short", RunConfig(max_steps=5)),
                          ("G=8", RunConfig(max_steps=10, num_generations=8)), ("after", RunConfig(max_steps=10))):
        run_queue.add(run_queue.Waiting(label, config.to_dict()))
    shown = live_view.live_view("training", 0, "latest", None, parts="queue_times")["queue_view"]
    assert "starts about" not in shown  # no step timed yet: no time to give
    append(run_dir / "metrics.jsonl", {"step": 5, "time": now, "elapsed": 290.0, "eta_seconds": 600.0})
    shown = live_view.live_view("training", 0, "latest", None, parts="queue_times")["queue_view"]
    # The training ends in 600 s, 900 s after it started. The next, at its pace, takes as long; 5 steps, half that;
    # G=8 trains at another pace, so the run after it has no time.
    starts = [part.split("</b>")[0] for part in shown.split("starts about ")[1:]]
    assert starts == [time.strftime("%H:%M", time.localtime(now + t)) for t in (600, 1500, 1950)], shown


def test_a_page_moves_on_to_the_run_the_queue_started_once():
    """A page that showed a run when the queue started the next one moves to that one, with its header, once:
    someone who then picks the ended run again stays on it when the queue changes again. Another page still moves
    on; a call without a page (a script) moves every time."""
    from pipeline.run_folder import run_queue
    from ui import live_view

    ended, started = make_running_run("ended"), make_running_run("started")
    runs.write_status(ended, "finished")
    queue = run_queue.read()
    queue.started.append({"run": started.name, "after": ended.name, "at": time.time(), "label": "next"})
    run_queue.write(queue)

    class Page:  # what Gradio hands an event: the page's session
        def __init__(self, session):
            self.session_hash = session

    def moved_to(request, draw=live_view.run_header):
        picker = draw(ended.name, parts="progress queue", request=request)["run_select"]
        return getattr(picker, "value", None)

    first = live_view.run_header(ended.name, parts="progress queue", request=Page("one"))
    assert first["run_select"].value == started.name
    assert f"data-run='{started.name}'" in first["progress"]  # its header in the same redraw
    assert moved_to(Page("one")) is None  # picked again: it stays
    assert moved_to(Page("one"), live_view.live_view) is None  # in front too
    assert moved_to(Page("two"), live_view.live_view) == started.name
    assert moved_to(None) == started.name and moved_to(None) == started.name
