"""A next stage (pipeline/run_folder/stages.py): a new run from the model an earlier run ended with keeps that model
as its own, so the earlier run can be resumed or deleted without changing or losing the later one's start."""

import os
import shutil

import pytest

from pipeline import runner
from pipeline.run_folder import run_files, runs, stages
from pipeline.setup.config import BUNDLED_MODEL_ID, RunConfig

WEIGHTS = b"tuned weights of the first stage" * 32768  # 1 MiB


@pytest.fixture
def own_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    launched = []
    monkeypatch.setattr(runner, "_launch", lambda run_dir, cmd, nproc=1, **kw: launched.append(run_dir))
    return launched


def finished_run(label: str = "smollm2-tldr", model: str = BUNDLED_MODEL_ID, step: int = 11):
    """A run as a trainer leaves it at its end: its config, a finished status and its merged model."""
    run_dir = runs.new_run_dir(label)
    runs.write_json_atomic(run_dir / run_files.CONFIG, RunConfig(model=model).to_dict())
    runs.write_status(run_dir, "finished", step=step)
    merged = run_dir / run_files.MERGED
    merged.mkdir()
    (merged / "model.safetensors").write_bytes(WEIGHTS)
    (merged / run_files.CONFIG).write_text('{"model_type": "llama"}')
    return run_dir


def rewrite_merged(run_dir, content: bytes) -> None:
    """What a resume of the run does at its end (pipeline/train.py merge_adapter): a new merged folder written
    beside the old one, the old one removed, the new one moved into its place."""
    tmp = run_dir / ".merged.tmp"
    tmp.mkdir()
    (tmp / "model.safetensors").write_bytes(content)
    (tmp / run_files.CONFIG).write_text('{"model_type": "llama"}')
    shutil.rmtree(run_dir / run_files.MERGED)
    os.replace(tmp, run_dir / run_files.MERGED)


def test_a_next_stage_keeps_its_starting_model_when_the_earlier_run_is_resumed_or_deleted(own_runs):
    first = finished_run()
    stage = runner.start("train", cfg=RunConfig(model=str(first / run_files.MERGED)),
                         label=runner.default_label(RunConfig(model=str(first / run_files.MERGED))))
    assert own_runs == [stage]
    assert stage.name.endswith("-smollm2-tldr-stage2")
    base = stage / run_files.STAGE_BASE
    assert RunConfig.load(stage / run_files.CONFIG).model == str(base)
    assert runs.read_json(base / run_files.STAGE_FILE) == {
        "run": first.name, "step": 11, "stage": 2, "from_model": BUNDLED_MODEL_ID}
    # Linked, not copied: the same file, no second copy on disk.
    assert os.stat(base / "model.safetensors").st_ino == os.stat(first / "merged" / "model.safetensors").st_ino
    assert runs.run_summary(stage)["model"] == f"↳ {first.name}, step 11"
    assert stages.started_from(str(base)) == f"{first.name} at step 11"

    # The first run trained further: its merged model is replaced, the stage's start is not.
    rewrite_merged(first, b"weights after a resume")
    assert (base / "model.safetensors").read_bytes() == WEIGHTS
    # Deleted: the stage's start stays whole, and the delete gives back only what was the first run's alone.
    deleted = runs.delete_run(first)
    assert not first.exists() and (base / "model.safetensors").read_bytes() == WEIGHTS
    assert deleted.run_bytes < 2**16  # its new merged model and small files

    # Deleting a stage that shares its start with another gives back nothing of the shared file.
    again = runner.start("train", cfg=RunConfig(model=str(base)), label="again")
    assert runs.read_json(again / run_files.STAGE_BASE / run_files.STAGE_FILE)["run"] == first.name
    assert runs.delete_run(again).run_bytes < 2**16
    assert (base / "model.safetensors").read_bytes() == WEIGHTS


def test_show_command_says_a_headless_stage_reads_the_earlier_runs_model_in_place(own_runs):
    from ui.form import config_to_form
    from ui.train_form import show_command

    first = finished_run()
    text = show_command(False, 1, **config_to_form(RunConfig(model=str(first / run_files.MERGED))))
    assert f"# a next stage of {first.name}: run headless, it reads that run's model in place" in text
    assert f"pipeline.queue add --after {first.name} --config" in text
    assert "a next stage" not in show_command(False, 1, **config_to_form(RunConfig()))


def test_stages_count_on_and_name_their_first_model(own_runs):
    first = finished_run()
    second = runner.start("train", cfg=RunConfig(model=str(first / run_files.MERGED)), label="second")
    runs.write_status(second, "finished", step=4)
    (second / run_files.MERGED).mkdir()
    (second / run_files.MERGED / run_files.CONFIG).write_text("{}")
    cfg = RunConfig(model=str(second / run_files.MERGED))
    assert runner.default_label(cfg) == "second-stage3"
    third = runner.start("train", cfg=cfg, label=runner.default_label(cfg))
    assert runs.read_json(third / run_files.STAGE_BASE / run_files.STAGE_FILE) == {
        "run": second.name, "step": 4, "stage": 3, "from_model": BUNDLED_MODEL_ID}
    assert runner.default_label(RunConfig()) == "smollm2-tldr"  # a plain run is named as before


def test_a_stage_from_a_run_without_a_tuned_model_is_refused_in_words_and_leaves_nothing(own_runs):
    failed = runs.new_run_dir("failed")
    runs.write_json_atomic(failed / run_files.CONFIG, RunConfig().to_dict())
    runs.write_status(failed, "failed", step=3)
    before = sorted(p.name for p in runs.runs_dir().iterdir())
    cfg = RunConfig(model=str(failed / run_files.MERGED))
    with pytest.raises(runner.RunnerError, match="has no tuned model to start from .it is failed."):
        runner.start("train", cfg=cfg, label="x")
    with pytest.raises(runner.RunnerError, match="has no tuned model"):
        runner.queue_training(cfg, label="x")
    shutil.rmtree(failed)  # a stage of a run deleted since (queued before the delete) is refused when it starts
    with pytest.raises(runner.RunnerError, match="is no longer on disk"):
        runner.start("train", cfg=cfg, label="x")
    before.remove(failed.name)
    assert sorted(p.name for p in runs.runs_dir().iterdir()) == before and own_runs == []


def test_a_run_still_training_can_be_queued_after_but_not_started_from(own_runs):
    first = finished_run()
    runs.write_status(first, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()))
    model = str(first / run_files.MERGED)
    assert "still training: its tuned model is written when it ends" in stages.problem(model)
    assert stages.problem(model, waiting=True) is None


def test_only_models_inside_this_data_folders_runs_are_taken(own_runs, tmp_path):
    first = finished_run()
    assert stages.model_in_run(str(first / run_files.MERGED)) == (first, first / run_files.MERGED)
    outside = tmp_path.parent / "elsewhere" / "r" / "merged"
    for model in (BUNDLED_MODEL_ID, "Qwen/Qwen2.5-0.5B-Instruct", "", None, str(outside),
                  f"{first}/merged/../../../etc", str(first / "checkpoint-2"), "runs/x/merged"):
        assert stages.model_in_run(model) is None, model
        assert stages.take_model(model, first) == model if model else True
    assert stages.model_label(str(first / run_files.MERGED)) == str(first / run_files.MERGED)  # no record: as is


def test_two_stages_of_one_run_compare_by_where_they_started(own_runs):
    """Under the overlay, a stage's model reads as the run and step it came from: two stages of one run differ in
    what they changed only, and a stage beside its run shows where it started."""
    from ui.runs_panel import compare_settings

    first = finished_run()
    model = str(first / run_files.MERGED)
    a = runner.start("train", cfg=RunConfig(model=model), label="a")
    b = runner.start("train", cfg=RunConfig(model=model, learning_rate=1e-3), label="b")
    shown = compare_settings([a.name, b.name])
    assert "Settings that differ</b> (1)" in shown and "<code>learning_rate</code>" in shown
    shown = compare_settings([first.name, a.name])
    assert f"<td>{BUNDLED_MODEL_ID}</td><td>↳ {first.name}, step 11</td>" in shown
    # The runs list says what the three share: the one model, linked.
    from ui.runs_panel import runs_table

    table = runs_table().set_index("run")
    assert all(table.loc[run.name, "disk"].endswith("(1 MiB shared)") for run in (first, a, b))
    assert table.loc[a.name, "model"] == f"↳ {first.name}, step 11"


def test_a_stage_drawn_with_the_run_it_came_from_goes_on_from_its_last_step(own_runs):
    """The overlay: ticked with the run it came from, a next stage's curves start where that run's ended (its steps
    count on from the step it took the model at, through every stage ticked); ticked without it, from step 0."""
    from ui.runs_panel import compare_runs

    first = finished_run(step=11)
    second = runner.start("train", cfg=RunConfig(model=str(first / run_files.MERGED)), label="second")
    runs.write_status(second, "finished", step=3)
    (second / run_files.MERGED).mkdir()
    (second / run_files.MERGED / run_files.CONFIG).write_text("{}")
    third = runner.start("train", cfg=RunConfig(model=str(second / run_files.MERGED)), label="third")
    for run_dir, steps in ((first, 11), (second, 3), (third, 2)):
        for step in range(1, steps + 1):
            runs.append_jsonl(run_dir / run_files.METRICS, {"step": step, "reward": float(step)})
    paths = {p.name: p for p in (first, second, third)}
    assert stages.step_offsets(paths) == {second.name: 11, third.name: 14}
    assert stages.step_offsets({second.name: second, third.name: third}) == {third.name: 3}
    assert stages.step_offsets({first.name: first, third.name: third}) == {}  # the stage between is not drawn
    plot, _ = compare_runs(list(paths), "Train reward")
    drawn = plot.value["data"]
    steps = {name: sorted(row[0] for row in drawn if row[2] == name) for name in paths}
    assert steps == {first.name: list(range(1, 12)), second.name: [12, 13, 14], third.name: [15, 16]}
