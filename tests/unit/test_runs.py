import json
import os
import re
import subprocess
import sys

import pytest

from pipeline.run_folder import jobstate, run_files, runs


def test_status_is_atomic_and_merged(tmp_path):
    runs.write_status(tmp_path, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()))
    runs.write_status(tmp_path, "running", step=3)
    status = runs.read_status(tmp_path)
    assert status["state"] == "running" and status["step"] == 3
    assert not list(tmp_path.glob(".*.tmp"))


def test_dead_trainer_reads_as_failed(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    runs.write_status(tmp_path, "running", pid=proc.pid, pid_create_time=0.0)
    status = runs.read_status(tmp_path)
    assert status["state"] == "failed" and status["crashed"] and "exited" in status["error"]


def test_torn_and_repeated_metric_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    runs.append_jsonl(path, {"step": 1, "reward": 0.1})
    runs.append_jsonl(path, {"step": 2, "reward": 0.2})
    with open(path, "a") as fh:
        fh.write('{"step": 3, "rew')  # a writer killed mid-line
    runs.append_jsonl(path, {"step": 2, "reward": 0.25})  # re-logged after a resume
    rows = runs.read_metrics(tmp_path)
    assert [(r["step"], r["reward"]) for r in rows] == [(1, 0.1), (2, 0.25)]
    assert all(json.loads(line) for line in path.read_text().splitlines()[:2])


def test_non_finite_values_are_refused_in_metrics(tmp_path):
    with pytest.raises(ValueError):
        runs.append_jsonl(tmp_path / "m.jsonl", {"step": 1, "kl": float("nan")})


def test_only_complete_checkpoints_count(tmp_path):
    for step in (2, 4, 6):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-2" / run_files.CHECKPOINT_MARKER).write_text("x")
    (tmp_path / "checkpoint-4" / run_files.CHECKPOINT_MARKER).write_text("x")
    assert runs.last_complete_checkpoint(tmp_path).name == "checkpoint-4"
    assert len(runs.checkpoints(tmp_path, complete_only=False)) == 3


def test_pruning_keeps_the_newest_complete_checkpoints_and_never_an_unfinished_one(tmp_path):
    for step in (1, 2, 3, 4, 5):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "adapter_model.safetensors").write_text("w")
    for step in (1, 2, 3, 4):  # checkpoint-5 is still being written
        (tmp_path / f"checkpoint-{step}" / run_files.CHECKPOINT_MARKER).write_text("x")
    deleted = runs.prune_checkpoints(tmp_path, keep=2)
    assert [p.name for p in deleted] == ["checkpoint-1", "checkpoint-2"]
    assert [p.name for p in runs.checkpoints(tmp_path)] == ["checkpoint-3", "checkpoint-4"]
    assert (tmp_path / "checkpoint-5").is_dir()
    assert runs.prune_checkpoints(tmp_path, keep=0) == []  # 0 keeps all
    assert len(runs.checkpoints(tmp_path)) == 2


def test_run_listing_and_delete_guard(tmp_path):
    run = runs.new_run_dir("My Run!")
    (run / "config.json").write_text(json.dumps({"model": "m", "rewards": [{"name": "length_target"}],
                                                  "dataset": {"source": "tldr"}, "max_steps": 5}))
    runs.append_jsonl(run / "metrics.jsonl", {"step": 1, "reward": -3.0})
    runs.write_status(run, "finished", started_at=1.0, ended_at=11.0)
    row = next(r for r in runs.list_runs() if r["run"] == run.name)
    assert row["state"] == "finished" and row["final_reward"] == -3.0 and row["duration_s"] == 10.0
    with pytest.raises(ValueError):
        runs.delete_run(tmp_path)
    runs.delete_run(run)
    assert not run.exists()


def test_a_run_folder_that_was_never_started_does_not_block_training(tmp_path):
    from pipeline.setup.config import RunConfig
    from pipeline.runner import active_run

    run_dir = runs.new_run_dir("template-only")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    assert runs.read_status(run_dir)["state"] == "new"
    assert active_run() != run_dir


def test_a_launch_that_never_started_reads_as_failed_after_a_grace_period():
    import time

    run_dir = runs.new_run_dir("stuck-queued")
    runs.write_status(run_dir, "queued", queued_at=time.time())
    assert runs.read_status(run_dir)["state"] == "queued"  # just launched: give it time
    runs.write_status(run_dir, "queued", queued_at=time.time() - jobstate.QUEUED_GRACE_S - 1)
    status = runs.read_status(run_dir)
    assert status["state"] == "failed" and "exited without reporting" in status["error"]


def _finished_run(label: str):
    from pipeline.setup.config import RunConfig

    run = runs.new_run_dir(label)
    runs.write_json_atomic(run / "config.json", RunConfig(max_steps=2).to_dict())
    runs.append_jsonl(run / "metrics.jsonl", {"step": 1, "reward": -3.0})
    runs.append_jsonl(run / "groups.jsonl", {"step": 1, "groups": []})
    runs.write_status(run, "finished", started_at=1.0, ended_at=11.0)
    return run


def test_damaged_run_files_are_listed_with_the_reason_and_spare_the_other_runs():
    good = _finished_run("good")
    truncated = _finished_run("truncated-config")
    text = (truncated / "config.json").read_text()
    (truncated / "config.json").write_text(text[: len(text) // 2])
    garbage = _finished_run("garbage-status")
    (garbage / "status.json").write_bytes(b"\x00\x9f\xff not json at all")
    binary = _finished_run("binary-groups")
    with open(binary / "groups.jsonl", "ab") as fh:
        fh.write(b"\x00\x01\xfe\xff binary \x00\n")
    runs.append_jsonl(binary / "groups.jsonl", {"step": 2, "groups": []})

    rows = {r["run"]: r for r in runs.list_runs()}
    assert rows[good.name]["state"] == "finished" and rows[good.name]["problems"] is None
    assert rows[truncated.name]["state"] == "damaged"
    assert rows[truncated.name]["problems"].startswith("config.json is damaged: not valid JSON")
    assert rows[garbage.name]["state"] == "damaged"
    assert rows[garbage.name]["problems"] == "status.json is not text (binary data)."
    assert runs.read_status(garbage)["error"] == "status.json is not text (binary data)."
    assert rows[binary.name]["state"] == "finished"  # still usable: the bad line is skipped
    assert rows[binary.name]["problems"] == "groups.jsonl: 1 unreadable line skipped (line 2)."
    assert [g["step"] for g in runs.read_groups(binary)] == [1, 2]


def test_a_torn_last_line_of_a_live_run_is_not_damage(tmp_path):
    path = tmp_path / "metrics.jsonl"
    runs.append_jsonl(path, {"step": 1})
    with open(path, "a") as fh:
        fh.write('{"step": 2, "rew')  # the trainer is writing this line right now
    assert runs.unreadable_lines(path, active=True) == []
    assert runs.unreadable_lines(path) == [2]  # once the run has ended, it is a torn line


def test_a_full_disk_reads_as_disk_full_with_the_checkpoint_to_resume(tmp_path):
    import errno

    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / run_files.CHECKPOINT_MARKER).write_text("1")
    (tmp_path / "checkpoint-4").mkdir()  # the save that failed
    error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert runs.is_disk_full(RuntimeError("saving failed")) is False
    wrapped = RuntimeError("checkpoint save failed")
    wrapped.__cause__ = error
    assert runs.is_disk_full(wrapped)
    message = runs.disk_full_message(tmp_path, wrapped)
    assert message.startswith("Disk full: the run could not write its files (checkpoint save failed).")
    assert message.endswith("then Resume continues from checkpoint-3, the last complete checkpoint.")


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "status.json"
    runs.write_json_atomic(path, {"state": "running"})

    class FailsMidWrite:  # json.dump has written part of the temp file when this raises
        def __str__(self):
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        runs.write_json_atomic(path, {"state": "failed", "error": FailsMidWrite()})
    assert json.loads(path.read_text()) == {"state": "running"}
    assert not list(tmp_path.glob(".*.tmp"))


def test_run_names_resolve_only_to_run_folders():
    run = _finished_run("resolvable")
    assert runs.resolve_run(run.name) == run
    (runs.runs_dir() / "no-config").mkdir(exist_ok=True)
    for bad in (None, "", "no-config", "no-such-run", "../" + run.name, f"x/../../{run.name}", "/etc", "..",
                str(run), run.name + "/adapter"):
        assert runs.resolve_run(bad) is None, bad


BAD_RUN_NAMES = ["bad" + chr(0) + "name", "x" * 300, "../../etc", "/etc/passwd", "a\\b", "tab\tname", 7, ["a"]]


@pytest.mark.parametrize("name", BAD_RUN_NAMES)
def test_every_run_name_entry_point_answers_a_bad_name_with_a_reason(name):
    """A NUL byte or 300 characters once made the first stat() raise (a 500 with no message in the live poll).
    One check, runs.run_name_problem, runs before any name reaches the file system."""
    from pipeline.run_folder import live
    from pipeline.training.generate import ChatModelError, run_for_choice
    from ui import live_view, runs_panel

    problem = runs.run_name_problem(name)
    assert problem and "run name" in problem or "No run picked" in problem, problem
    assert runs.resolve_run(name) is None
    stamps = live.stamps(name, name)
    assert stamps["progress"] == stamps["jobs"].split(";")[0] == f"refused: {problem}"
    assert live.stamps(name, name) == stamps  # the next poll finds nothing moved: nothing is redrawn
    view = live_view.live_view(name, 0, "latest", name)
    assert "data-state='refused'" in view["progress"] and view["log"] == ""
    assert runs_panel.stop_training(name) == "Pick a run to stop."
    assert runs_panel.delete_run(name, True) == ("Pick a run to delete.", False, False)
    if isinstance(name, str):
        with pytest.raises(ChatModelError):
            run_for_choice("run:" + name)


@pytest.mark.parametrize("typed", ["../../outside", "/etc/passwd", "a/../../b", "x" + chr(0) + "y", "C:\\temp",
                                   " ~/.ssh ", "run\nname"])
def test_a_typed_run_name_makes_a_new_folder_directly_under_runs(typed):
    """The name typed beside Start becomes part of a folder name: whatever it holds, the folder is a new one
    directly under runs/, named by its start time and the name's letters and digits."""
    run_dir = runs.new_run_dir(runs.run_label(typed, "fallback"))
    try:
        assert run_dir.parent == runs.runs_dir()
        assert re.fullmatch(r"\d{8}-\d{6}-[a-z0-9]+(-[a-z0-9]+)*", run_dir.name), run_dir.name
    finally:
        run_dir.rmdir()


def test_start_refuses_a_run_name_it_cannot_use_and_makes_no_folder():
    from pipeline.setup.config import RunConfig
    from ui.form import config_to_form
    from ui.train_form import show_command, start_training

    form = config_to_form(RunConfig())
    before = set(runs.runs_dir().iterdir())
    for typed, reason in (("***", "needs at least one letter or digit"), ("..", "needs at least one letter"),
                          ("x" * 41, "at most 40 characters; this one has 41")):
        _, message = start_training(False, 1, typed, **form)
        assert message.startswith("❌ A run name") and reason in message, message
    assert set(runs.runs_dir().iterdir()) == before
    # The command Show command prints names the folder the same way.
    assert "START-TIME-lr-3e-4/config.json" in show_command(False, 1, " LR 3e-4 ", **form)
    assert show_command(False, 1, "***", **form).startswith("# A run name needs")
