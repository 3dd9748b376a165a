"""The report of a real finished run (the shared two-step run on the bundled model): its numbers and answers are
the run's own, as the Train tab shows them."""

import html

import pytest

from pipeline.run_folder import runs

pytestmark = pytest.mark.slow


def test_the_report_of_a_finished_run_shows_its_own_numbers_and_answers(shared_run):
    from ui.probes_view import fmt_score
    from ui.report import report_html

    run_dir = shared_run.path
    page = report_html(run_dir)
    evals, rows, groups = runs.read_evals(run_dir), runs.read_metrics(run_dir), runs.read_groups(run_dir)
    assert [e["step"] for e in evals] == [0, 1, 2] and [r["step"] for r in rows] == [1, 2]
    # Before (step 0) and after (step 2) on the held-out prompts, as the run header shows them.
    assert f"<td>{fmt_score(evals[0]['reward'])}</td><td>{fmt_score(evals[-1]['reward'])}</td>" in page
    assert "the tuned one at step 2" in page and "FINISHED" in page.upper()
    # The train reward chart has a line per series: the total and each reward the run trained with.
    train_chart = page.split("<figcaption>")[1]
    assert train_chart.count("<polyline") == 1 + len(rows[-1]["rewards"])
    # Every last held-out answer, and every completion of the last step's group, as text.
    for sample in evals[-1]["samples"]:
        assert html.escape(sample["completion"].split()[-1]) in page
    for item in groups[-1]["groups"][0]["completions"]:
        assert html.escape(item["completion"]) in page
    assert f"A group of step {groups[-1]['step']}" in page
