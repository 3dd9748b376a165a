"""The learnability scan's reading of scores, the option that keeps the prompts with signal, and its view."""

import math
import statistics

import pytest

from pipeline.setup.config import RunConfig
from pipeline.setup.data import DatasetError
from pipeline.training.learnability import ALL_MAX, ALL_ZERO, CONSTANT, SIGNAL, UNSCORED, keep_prompts, scan_report
from ui import views
from ui.form import config_to_form, form_to_config

WEIGHTS = {"incremental_format": 1.0, "numeric_tolerance": 2.0}
MAXIMA = {"incremental_format": 1.0, "numeric_tolerance": 1.0}


def group(fmt, right):
    """One arithmetic-style group: totals and per-reward scores, as the trainer weighs them."""
    totals = [f * WEIGHTS["incremental_format"] + r * WEIGHTS["numeric_tolerance"] for f, r in zip(fmt, right)]
    return totals, {"incremental_format": list(fmt), "numeric_tolerance": list(right)}


def report_of(groups, **kwargs):
    prompts = [f"problem {i}" for i in range(len(groups))]
    return scan_report(prompts, [g[0] for g in groups], [g[1] for g in groups], WEIGHTS, MAXIMA, **kwargs)


def test_tagged_but_wrong_everywhere_reads_as_too_hard_with_the_fixes():
    """The arithmetic preset's picture: the tags are always there, the answer never right: most groups are flat,
    the reason names the correctness reward, and the advice is easier prompts, a larger G, partial credit."""
    flat = group([1, 1, 1, 1], [0, 0, 0, 0])
    learns = group([1, 1, 1, 1], [0, 1, 0, 0])
    report = report_of([flat, flat, flat, learns])
    assert [p.kind for p in report.prompts] == [ALL_ZERO, ALL_ZERO, ALL_ZERO, SIGNAL]
    assert report.prompts[0].flat_rewards == ["numeric_tolerance"]
    assert report.no_signal_share == 0.75 and report.mostly_flat
    assert report.kept == ["problem 3"]
    assert [p.prompt for p in report.no_signal] == ["problem 0", "problem 1", "problem 2"]
    assert report.verdict.startswith("Most prompts carry no learning signal: 3 of 4")
    advice = report.advice[0]
    assert "no completion earned numeric_tolerance" in advice
    assert "easier prompts" in advice and "larger group size G" in advice and "partial credit" in advice
    # Said once: numeric_tolerance is flat exactly where the totals are, so no second line for it; the format,
    # at full marks everywhere, gets its own.
    assert len(report.advice) == 2 and report.advice[1].startswith("Every completion already earned full marks "
                                                                   "from incremental_format on 4 of 4 prompts")


def test_full_marks_read_as_too_easy_and_a_constant_middle_as_a_reward_that_does_not_discriminate():
    easy = group([1, 1, 1], [1, 1, 1])
    middle = group([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
    report = report_of([easy, easy, middle])
    assert [p.kind for p in report.prompts] == [ALL_MAX, ALL_MAX, CONSTANT]
    assert "too easy" in report.advice[0] and "harder prompts" in report.advice[0]
    assert "don't tell the completions apart" in report.advice[1]
    assert report.kept == []


def test_the_spread_per_prompt_is_the_sample_std_min_and_max_of_its_totals():
    totals = [[0.1, 0.7, 0.4, 0.4], [2.0, 2.0, 2.0, 2.0]]
    report = scan_report(["a", "b"], totals)
    first, second = report.prompts
    assert math.isclose(first.std, statistics.stdev(totals[0]))  # Bessel's correction, as TRL
    assert (first.low, first.high) == (0.1, 0.7) and math.isclose(first.mean, 0.4)
    assert second.std == 0.0 and not second.signal and second.kind == CONSTANT
    assert report.group_size == 4 and report.verdict.startswith("Most prompts")  # 1 of 2: half counts as most


def test_equal_within_the_tolerance_is_no_signal_and_just_outside_it_is():
    assert scan_report(["a"], [[0.5, 0.5 + 1e-12]]).prompts[0].kind == CONSTANT
    assert scan_report(["a"], [[0.5, 0.5 + 1e-6]]).prompts[0].kind == SIGNAL


def test_monitors_count_for_nothing_and_missing_scores_are_left_out():
    """A monitor (weight 0) that varies does not make a flat group learn; a failed (None) score is left out,
    and a group with fewer than two scores can't be judged."""
    weights = {"correct": 1.0, "length": 0.0}
    report = scan_report(["a", "b", "c", "d"], [[0.0, 0.0], [None, 1.0, 0.0], [None, None, 1.0], [1.0, 1.0]],
                         [{"correct": [0, 0], "length": [3, 9]}, {}, {}, {"correct": [1, 1], "length": [0, 7]}],
                         weights, {"correct": 1.0, "length": None})
    assert [p.kind for p in report.prompts] == [ALL_ZERO, SIGNAL, UNSCORED, ALL_MAX]
    assert report.prompts[0].flat_rewards == ["correct"]
    assert report.prompts[1].scored == [1.0, 0.0]
    assert any("could not score" in a for a in report.advice)


def test_a_reward_flat_on_most_prompts_is_named_even_when_the_totals_differ():
    """Format varies, so every total differs, but no completion is right: the scan says the run would learn
    the format and not the answers."""
    report = report_of([group([1, 0.5, 1, 0], [0, 0, 0, 0])] * 3 + [group([1, 1, 0, 1], [0, 1, 0, 0])])
    assert report.no_signal == [] and report.flat_by_reward["numeric_tolerance"] == (3, 3, 0)
    assert report.flat_by_reward["incremental_format"] == (0, 0, 0)
    assert report.advice == [
        "No completion earned numeric_tolerance on 3 of 4 prompts: whatever signal those prompts carry comes from "
        "the other rewards, so the run learns them, not numeric_tolerance. If numeric_tolerance is the one that "
        "matters, try easier prompts, a larger G, or partial credit for it."]
    # Full marks for the format on most prompts: said as such, not as a task out of reach.
    report = report_of([group([1, 1, 1, 1], [0, 1, 1, 0])] * 3 + [group([1, 0, 1, 1], [0, 1, 0, 0])])
    assert report.flat_by_reward["incremental_format"] == (3, 0, 3)
    assert report.advice == ["Every completion already earned full marks from incremental_format on 3 of 4 prompts: "
                             "there is little left for it to teach."]


def test_keep_prompts_keeps_exactly_the_kept_rows_in_training_order_and_refuses_strangers():
    rows = [{"prompt": [{"role": "system", "content": "Solve."}, {"role": "user", "content": q}], "answer": a}
            for q, a in (("1+1", "2"), ("2+2", "4"), ("3+3", "6"))]
    assert [r["answer"] for r in keep_prompts(rows, ["3+3", "1+1"])] == ["2", "6"]
    with pytest.raises(DatasetError, match="run the scan again"):
        keep_prompts(rows, ["1+1", "9+9"])


def test_keeping_needs_a_scan_and_enough_prompts_for_one_round():
    assert RunConfig().problems() == []  # off by default: the default run is unchanged
    assert RunConfig().to_dict()["keep_signal_prompts"] is False and RunConfig().signal_prompts == []
    problems = RunConfig(keep_signal_prompts=True).problems()
    assert any("needs a learnability scan first" in p for p in problems)
    # The default batch takes 16 / 4 = 4 prompts a round: 3 kept prompts would train on nothing.
    problems = RunConfig(keep_signal_prompts=True, signal_prompts=["a", "b", "c"]).problems()
    assert any("kept 3 prompt(s) with signal, fewer than the 4 prompts" in p for p in problems)
    assert RunConfig(keep_signal_prompts=True, signal_prompts=["a", "b", "c", "d"]).problems() == []
    assert RunConfig(keep_signal_prompts=True, signal_prompts=["a", ""]).problems()[0].startswith("signal_prompts")


def test_the_form_records_the_scanned_prompts_only_when_the_run_keeps_them():
    values = config_to_form(RunConfig())
    values["signal_prompts"] = ["a", "b", "c", "d"]
    assert form_to_config(values).signal_prompts == []  # scanned, not kept: config.json as without a scan
    values["keep_signal_prompts"] = True
    cfg = form_to_config(values)
    assert cfg.keep_signal_prompts and cfg.signal_prompts == ["a", "b", "c", "d"]
    assert RunConfig.from_json(cfg.to_json()) == cfg  # what config.json holds reads back the same
    assert form_to_config(config_to_form(cfg)) == form_to_config(values)


def test_scan_view_shows_the_share_the_chart_the_advice_and_the_flat_prompts():
    flat = group([1, 1, 1, 1], [0, 0, 0, 0])
    report = report_of([flat, group([1, 1, 1, 1], [0, 1, 0, 0]), flat])
    page = views.scan_html(report)
    assert "data-no-signal='2' data-prompts='3'" in page and "2 of 3</b> prompts (67%)" in page
    assert page.count("<g class='gs-scan-row'") == 3 and page.count("data-signal='false'") == 2
    assert page.count("<circle") == 12  # one dot per completion
    assert "partial credit" in page and "none earned numeric_tolerance" in page
    assert "The 2 prompt(s) with no signal" in page and "Train only on prompts with signal" in page
    assert "<script" not in views.scan_html(scan_report(["<script>x</script>"], [[0, 0]]))
    assert "data-state='no-scan'" in views.scan_empty_html()
