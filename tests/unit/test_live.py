"""The live view's signature: it changes when a file the Train tab is drawn from changes, and only then
(the page redraws on a change, so a signature that moved every second would redraw every second)."""

import os
import time

from pipeline import jobstate, live, runs
from pipeline.config import RunConfig


def make_running_run(name: str):
    run_dir = runs.new_run_dir(name)
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    # This test process stands in for the trainer: alive, so the run reads as running.
    runs.write_status(run_dir, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()))
    return run_dir


def test_the_signature_holds_still_until_a_file_the_view_reads_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_dir = make_running_run("live")
    other = make_running_run("other")
    sig = live.watch_signature(run_dir.name, None)
    assert live.watch_signature(run_dir.name, None) == sig  # nothing happened: nothing to redraw
    for name, line in [("metrics.jsonl", '{"step": 1}'), ("groups.jsonl", '{"step": 1}'),
                       ("evals.jsonl", '{"step": 0}')]:
        with open(run_dir / name, "a") as fh:
            fh.write(line + "\n")
        new = live.watch_signature(run_dir.name, None)
        assert new != sig, name
        sig = new
    runs.write_eval_status(other, "running", done=1, total=4)  # the Runs panel shows evaluations of any run
    assert live.watch_signature(run_dir.name, None) != sig
    sig = live.watch_signature(run_dir.name, None)
    assert live.watch_signature(run_dir.name, other.name) != sig  # another run picked in the Runs panel
    assert live.watch_signature(other.name, None) != sig  # another run shown


def test_a_chatty_log_redraws_the_view_at_most_every_few_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_dir = make_running_run("chatty")
    log = run_dir / "train.log"
    now = time.time()
    start = (int(now) // live.LOG_EVERY_S) * live.LOG_EVERY_S  # the start of a bucket
    log.write_text("a\n")
    os.utime(log, (start + 0.5, start + 0.5))
    sig = live.watch_signature(run_dir.name, None)
    log.write_text("a\nb\n")
    os.utime(log, (start + 1.5, start + 1.5))  # grown, in the same few seconds
    assert live.watch_signature(run_dir.name, None) == sig
    os.utime(log, (start + live.LOG_EVERY_S + 0.5,) * 2)  # a later bucket: the tail is redrawn
    assert live.watch_signature(run_dir.name, None) != sig


def test_a_trainer_that_dies_without_a_word_changes_the_signature(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_dir = make_running_run("dies")
    sig = live.watch_signature(run_dir.name, None)
    monkeypatch.setattr(jobstate, "_process_alive", lambda pid, *start: False)  # SIGKILL: status.json says running
    assert live.watch_signature(run_dir.name, None) != sig


def test_a_deleted_run_changes_the_signature(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    run_dir = make_running_run("deleted")
    sig = live.watch_signature(run_dir.name, None)
    runs.write_status(run_dir, "stopped")
    runs.delete_run(run_dir)
    assert live.watch_signature(run_dir.name, None) != sig
