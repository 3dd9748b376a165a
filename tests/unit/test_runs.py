import json
import os
import subprocess
import sys

import pytest

from pipeline import runs


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
    (tmp_path / "checkpoint-2" / runs.CHECKPOINT_MARKER).write_text("x")
    (tmp_path / "checkpoint-4" / runs.CHECKPOINT_MARKER).write_text("x")
    assert runs.last_complete_checkpoint(tmp_path).name == "checkpoint-4"
    assert len(runs.checkpoints(tmp_path, complete_only=False)) == 3


def test_pruning_keeps_the_newest_complete_checkpoints_and_never_an_unfinished_one(tmp_path):
    for step in (1, 2, 3, 4, 5):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "adapter_model.safetensors").write_text("w")
    for step in (1, 2, 3, 4):  # checkpoint-5 is still being written
        (tmp_path / f"checkpoint-{step}" / runs.CHECKPOINT_MARKER).write_text("x")
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
    from pipeline.config import RunConfig
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
    runs.write_status(run_dir, "queued", queued_at=time.time() - runs.QUEUED_GRACE_S - 1)
    status = runs.read_status(run_dir)
    assert status["state"] == "failed" and "exited without reporting" in status["error"]
