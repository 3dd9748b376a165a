"""A run's report (ui/report.py), from a run folder written here: every part is in it, it is one page with nothing
to load or run, and what users typed or models wrote is shown as text, never as markup."""

import re

import pytest

from pipeline.run_folder import disk, run_files, runs
from pipeline.setup.config import DatasetSpec, RewardSpec, RunConfig

HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>"


@pytest.fixture
def own_data(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path / "data"))


def written_run(label: str = "reported"):
    """A stopped three-step run: metrics, probes at 0 and 3, a group of step 3, a change steered at step 2, a reward
    with its own code, and text that would be markup if it were not escaped."""
    code = "def reward(completions, **kw):\n    return [0.0] * len(completions)  # OWN-CODE\n"
    cfg = RunConfig(max_steps=3, learning_rate=1e-4, dataset=DatasetSpec(source="upload", path=f"/data/{HOSTILE}"),
                    rewards=[RewardSpec("length_target", 1.0, {"target": 50}), RewardSpec("custom_python", 0.5,
                                                                                             {"code": code})])
    run_dir = runs.new_run_dir(label)
    runs.write_json_atomic(run_dir / run_files.CONFIG, cfg.to_dict())
    runs.write_status(run_dir, "stopped", started_at=1.0, ended_at=95.0)
    for step in (1, 2, 3):
        runs.append_jsonl(run_dir / run_files.METRICS, {
            "step": step, "reward": 10.0 * step, "reward_std": 2.0, "kl": 0.01 * step, "loss": 0.02, "entropy": 2.5,
            "completion_length": 30.0 - step, "frac_reward_zero_std": 0.0, "elapsed": 30.0 * step,
            "rewards": {"length_target": {"mean": -5.0 + step, "std": 1.0}}, "reward_weights": {"length_target": 1.0}})
    for step, reward, answer in ((0, 7.0, "The base answer, long and winding."), (3, 9.5, f"Short now {HOSTILE}")):
        runs.append_jsonl(run_dir / run_files.EVALS, {
            "step": step, "reward": reward, "rewards": {"length_target": reward - 10},
            "samples": [{"prompt": f"Summarize this post {HOSTILE}", "completion": answer, "total": reward,
                         "rewards": {"length_target": reward - 10}}]})
    runs.append_jsonl(run_dir / run_files.GROUPS, {"step": 3, "weights": {"length_target": 1.0}, "groups": [
        {"prompt": "A post to summarize", "completions": [
            {"completion": "kept short", "rewards": {"length_target": -1.0}, "total": -1.0, "advantage": 0.707},
            {"completion": f"rambling {HOSTILE}", "rewards": {"length_target": -9.0}, "total": -9.0,
             "advantage": -0.707}]}]})
    runs.append_jsonl(run_dir / run_files.STEERING, {"id": "1", "step": 2, "setting": "learning_rate", "old": 1e-4,
                                                     "new": 5e-5, "time": 2.0})
    return run_dir


def test_the_report_holds_every_part_of_the_run(own_data):
    from ui.report import report_html

    page = report_html(written_run())
    assert page.startswith("<!DOCTYPE html>") and "reported" in page.split("</title>")[0]
    # Before and after on the held-out prompts: 7 -> 9.5
    assert "<td>7</td><td>9.5</td><td class='gs-up'>▲ +2.5</td>" in page
    # The curves: the train reward (total and one reward), the held-out reward, and one chart per logged metric,
    # each marked at the steered step.
    assert page.count("<svg") == 2 + 6 and page.count("steered at 2: lr 0.0001→5e-5") >= 8
    assert "<h2>Steered while it trained</h2><ul><li>step 2: lr 0.0001→5e-5</li></ul>" in page
    assert "Held-out answers: the base model, then the tuned one" in page and "winding" in page  # the diff's removed
    assert "A group of step 3" in page and "kept short" in page and "+0.71" in page
    assert "<th>learning_rate</th><td>0.0001</td>" in page and "<th>reward: custom_python</th>" in page


def test_the_report_holds_the_runs_evaluation_and_says_when_it_is_out_of_date(own_data):
    """Evaluate base vs tuned, as the Runs panel words it: the table, the gain prompt by prompt and its interval;
    a reward name that looks like markup stays text; a training that ended after it is said."""
    import os
    import time

    from ui.report import report_html

    run_dir = written_run()
    assert "Evaluation: base vs tuned" not in report_html(run_dir)  # none yet: no empty section
    side = lambda totals: {"reward_mean": sum(totals) / 6, "rewards": {HOSTILE: 1.0}, "totals": totals}
    runs.write_json_atomic(run_dir / run_files.EVAL_RESULT, {
        "n": 6, "base": side([1, 2, 3, 4, 5, 6]), "tuned": side([2, 3, 4, 5, 6, 6]), "delta": 0.83, "gap_closed": 0.4})
    os.utime(run_dir / run_files.EVAL_RESULT, (time.time() + 60, time.time() + 60))  # after the run ended
    page = report_html(run_dir)
    assert "<h2>Evaluation: base vs tuned</h2>" in page and "<th>tuned</th>" in page and "<td>mean total</td>" in page
    assert "Prompt by prompt: tuned scored higher on <strong>5</strong>" in page and "above zero" in page
    assert "&lt;script&gt;" in page and "<script" not in page.lower()
    assert "trained since this evaluation" not in page
    runs.write_status(run_dir, "finished", started_at=1.0, ended_at=time.time() + 120)  # resumed after it
    assert "The run has trained since this evaluation" in report_html(run_dir)


def test_the_report_is_one_page_with_nothing_to_load_or_run_and_no_markup_from_the_run(own_data):
    from ui.report import report_html

    page = report_html(written_run())
    assert "<script" not in page.lower() and "onerror=" not in page.replace("onerror=alert(1)&gt;", "")
    assert "&lt;script&gt;" in page  # shown as text: the prompt, the answer, the completion, the dataset path
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:|//)", page) and "http" not in page
    assert "OWN-CODE" not in page  # a reward's own code stays in the run folder


def test_download_writes_the_report_as_an_export_of_the_run(own_data):
    from ui.runs_panel import report_download

    run_dir = written_run()
    file, message = report_download(run_dir.name)
    path = file.value["path"] if isinstance(file.value, dict) else file.value
    assert file.visible is True and path.endswith(f"{run_dir.name}-report.html") and "one page" in message
    assert disk.run_exports(run_dir.name, runs.exports_dir())[0].name == f"{run_dir.name}-report.html"
    assert report_download(None)[1] == "Pick a run to download its report."
    empty = runs.new_run_dir("no-steps")
    runs.write_json_atomic(empty / run_files.CONFIG, RunConfig().to_dict())
    file, message = report_download(empty.name)
    assert file.visible is False and "no steps yet" in message


def test_a_run_whose_settings_cannot_be_read_says_so_instead_of_showing_defaults(own_data):
    from ui.report import report_html

    run_dir = written_run()
    (run_dir / run_files.CONFIG).write_text("{torn", encoding="utf-8")
    page = report_html(run_dir)
    assert "config.json could not be read" in page and "<th>learning_rate</th>" not in page
    assert "<td>7</td><td>9.5</td>" in page  # what could be read is shown


def test_the_command_line_writes_the_same_page_and_refuses_a_folder_that_is_no_run(own_data, tmp_path, capsys):
    from ui.report import main

    run_dir = written_run()
    out = tmp_path / "mine.html"
    assert main(["--run-dir", str(run_dir), "--out", str(out)]) == 0
    assert "<td>7</td><td>9.5</td>" in out.read_text(encoding="utf-8")
    assert main(["--run-dir", str(run_dir)]) == 0 and (runs.exports_dir() / f"{run_dir.name}-report.html").exists()
    assert main(["--run-dir", str(tmp_path / "nothing")]) == 2
    assert "is not a run folder" in capsys.readouterr().out


def test_ticked_runs_compare_on_one_page_with_one_colour_per_run_and_nothing_from_them_as_markup(own_data, tmp_path):
    """Download the comparison: an export of the first ticked run, holding each run's row, the settings they differ
    in, every curve with a line per run in the same colour on every chart, their answers to each held-out prompt;
    one page with nothing to load or run. The command line writes it for two --run-dir; one run or runs without a
    step get a plain message."""
    from ui.charts import SERIES_COLORS
    from ui.report import main
    from ui.runs_panel import comparison_download

    first, second = written_run("first"), written_run("second")
    config = runs.read_json(second / run_files.CONFIG)
    runs.write_json_atomic(second / run_files.CONFIG, {**config, "learning_rate": 1e-3})
    runs.write_json_atomic(first / run_files.EVAL_RESULT, {
        "n": 16, "base": {"reward_mean": 7.0, "rewards": {}}, "tuned": {"reward_mean": 9.5, "rewards": {}},
        "delta": 2.5, "gap_closed": 0.25, "paired": {"mean": 2.5, "low": 1.0, "high": 4.0, "level": 0.9}})
    file, message = comparison_download([first.name, second.name])
    path = file.value["path"] if isinstance(file.value, dict) else file.value
    assert file.visible is True and path.endswith(f"{first.name}-comparison.html") and "2 runs on one page" in message
    assert [p.name for p in disk.run_exports(first.name, runs.exports_dir())] == [f"{first.name}-comparison.html"]
    page = open(path, encoding="utf-8").read()
    assert "2 runs compared" in page and page.count(f"<td class='gs-answers-run'>{second.name}</td>") == 2
    assert "<td>7 → 9.5 on 16 prompts, gap closed 25%, gain 90% interval +1 to +4</td>" in page  # its evaluation
    assert "<b>Settings that differ</b> (1)" in page and "<td>0.0001</td><td>0.001</td>" in page
    # Curves: train and held-out reward, KL, length, entropy and the reward's mean; each run in one colour on all.
    assert page.count("<figure>") == 6
    for name, color in ((first.name, SERIES_COLORS[0]), (second.name, SERIES_COLORS[1])):
        lines = re.findall(r"<polyline points='[^']*' fill='none' stroke='([^']+)' stroke-width='2'><title>"
                           + re.escape(name), page)
        assert lines == [color] * 6, (name, lines)
    assert "Prompt 1: Summarize this post &lt;script&gt;" in page and "Base model</b>, step 0" in page
    assert "<script" not in page.lower() and "http" not in page and "OWN-CODE" not in page
    assert "Evaluation answers side by side" not in page  # one run evaluated, no answers kept: none to set beside
    # Both evaluated, with their answers: every prompt the evaluations answered, side by side, after the probes'.
    for run_dir, tuned in ((first, "Kept short."), (second, "Shorter still.")):
        result = runs.read_json(run_dir / run_files.EVAL_RESULT) or {
            "n": 1, "base": {"reward_mean": 1.0, "rewards": {}}, "tuned": {"reward_mean": 2.0, "rewards": {}},
            "delta": 1.0}
        runs.write_json_atomic(run_dir / run_files.EVAL_RESULT, {**result, "samples": [
            {"prompt": "An evaluated post", "base": "A long base answer.", "tuned": tuned, "base_total": 1.0,
             "tuned_total": 2.0}]})
    path = comparison_download([first.name, second.name])[0].value
    page = open(path["path"] if isinstance(path, dict) else path, encoding="utf-8").read()
    evaluated = page.split("<h2>Evaluation answers side by side</h2>", 1)[1]
    assert "Prompt 1: An evaluated post" in evaluated and "Kept short" in evaluated and "Shorter still" in evaluated

    out = tmp_path / "both.html"
    assert main(["--run-dir", str(first), "--run-dir", str(second), "--out", str(out)]) == 0
    assert "2 runs compared" in out.read_text(encoding="utf-8")
    assert comparison_download([first.name])[1] == "Tick two or more runs to compare them in one file."
    empty = [runs.new_run_dir("empty") for _ in range(2)]
    for run_dir in empty:
        runs.write_json_atomic(run_dir / run_files.CONFIG, RunConfig().to_dict())
    file, message = comparison_download([p.name for p in empty])
    assert file.visible is False and "None of the ticked runs has a step yet" in message
