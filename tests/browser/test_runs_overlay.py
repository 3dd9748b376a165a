"""The Runs panel's overlay: ticked runs drawn on one chart, for the curve picked (train reward, held-out reward,
KL, ...), and their answers to a held-out prompt side by side; and a picked run's settings loaded back into the
Train form."""

import pytest
from playwright.sync_api import expect

from pipeline.run_folder import runs
from pipeline.setup.config import RunConfig

from .conftest import ARTIFACTS, open_settings

pytestmark = [pytest.mark.browser]


BASE_ANSWER = "Drivers will face delays this summer while crews resurface Highway 22 until late August."


@pytest.fixture
def two_runs(studio_data):
    """Two finished runs with train metrics and held-out probes (step 0 is the base model's), trained at different
    learning rates."""
    made = []
    for label, gain, lr in (("overlay-a", 1.0, 3e-4), ("overlay-b", 3.0, 1e-3)):
        run_dir = runs.new_run_dir(label)
        runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=4, learning_rate=lr).to_dict())
        for step in range(1, 5):
            runs.append_jsonl(run_dir / "metrics.jsonl", {"step": step, "reward": gain * step, "kl": 0.01 * step,
                                                           "rewards": {"length_target": {"mean": -10 * gain * step}}})
        for step in (0, 2, 4):  # one held-out prompt, whose answer shortens in run b
            answer = "Crews resurface Highway 22 until late August." if gain > 1 and step else BASE_ANSWER
            runs.append_jsonl(run_dir / "evals.jsonl", {"step": step, "reward": 10 + gain * step, "samples": [
                {"prompt": "Road work on Highway 22. TL;DR:", "completion": answer, "total": 10 + gain * step}]})
        runs.write_status(run_dir, "finished", started_at=1.0, ended_at=2.0, step=4)
        made.append(run_dir)
    yield made
    import shutil

    for run_dir in made:  # a finished run left behind would be a later test's default model
        shutil.rmtree(run_dir)


def test_ticked_runs_overlay_the_curve_picked_and_a_runs_settings_load_into_the_form(page, app_url, two_runs):
    page.goto(app_url)
    overlay = page.locator("#compare-plot")
    # One run, drawn; then a second joins the chart already drawn (its line and legend entry too).
    for run_dir in two_runs:
        page.locator("#compare").get_by_label(run_dir.name).check()
        expect(overlay).to_contain_text(run_dir.name, timeout=30_000)
    expect(overlay).to_contain_text("Train reward by run")
    expect(overlay).to_contain_text(two_runs[0].name)
    # Beside the curves, what was changed between the runs: their learning rates, and nothing else.
    settings = page.locator("#compare-settings")
    expect(settings).to_contain_text("Settings that differ (1)", timeout=10_000)
    expect(settings.locator("tr", has_text="learning_rate")).to_contain_text("0.0003")
    expect(settings.locator("tr", has_text="learning_rate")).to_contain_text("0.001")
    page.locator("#compare-curve").get_by_text("Held-out reward", exact=True).click()
    expect(overlay).to_contain_text("Held-out reward by run", timeout=30_000)
    expect(overlay).to_contain_text("held-out total reward")  # the y axis says what is drawn
    # ...and the data is the probes': run b's held-out total reaches 10 + 3 x 4 = 22 (its train reward 12), so the
    # y axis is relabelled up to 20 and more.
    expect(overlay.locator('g[aria-label^="Y-axis"]')).to_contain_text("20", timeout=10_000)
    overlay.screenshot(path=str(ARTIFACTS / "runs-overlay-held-out.png"))
    # One reward function's curve, offered for each reward the ticked runs scored: run b's length_target mean
    # falls to -10 x 3 x 4 = -120.
    page.locator("#compare-curve").get_by_text("Reward: length_target", exact=True).click()
    expect(overlay).to_contain_text("Reward: length_target by run", timeout=30_000)
    expect(overlay.locator('g[aria-label^="Y-axis"]')).to_contain_text("−100", timeout=10_000)

    # Their answers to the same held-out prompt, side by side: the base answer once, then run b (the higher total)
    # first, with the words it dropped struck.
    answers = page.locator("#answers")
    expect(answers.locator(".gs-answer").first).to_contain_text(f"1. {two_runs[1].name}", timeout=10_000)
    expect(answers.locator(".gs-answer-base")).to_contain_text(BASE_ANSWER)
    expect(answers.locator(".gs-answer").first.locator("del").first).to_be_visible()
    expect(answers.locator(".gs-answer").nth(1)).to_contain_text("the same as its base answer")
    expect(page.locator("#answer-pick input")).to_have_value("1. Road work on Highway 22. TL;DR:")
    answers.screenshot(path=str(ARTIFACTS / "runs-answers.png"))
    # A ticked run that trains on writes more probes: Refresh list draws the ticked runs again (run a, now higher,
    # comes first with its new answer) and keeps the prompt picked.
    runs.append_jsonl(two_runs[0] / "evals.jsonl", {"step": 6, "reward": 30.0, "samples": [
        {"prompt": "Road work on Highway 22. TL;DR:", "completion": "Highway 22 closes for repaving.", "total": 30.0}]})
    page.get_by_role("button", name="Refresh list").click()
    expect(answers.locator(".gs-answer").first).to_contain_text(f"1. {two_runs[0].name}", timeout=30_000)
    expect(answers.locator(".gs-answer").first).to_contain_text("step 6")
    expect(answers.locator(".gs-answer").first.locator("ins")).to_contain_text("closes for repaving")
    expect(page.locator("#answer-pick input")).to_have_value("1. Road work on Highway 22. TL;DR:")
    # From their evaluations instead: neither run has been evaluated, and the view says what to do.
    page.locator("#answer-source").get_by_text("Evaluation", exact=True).click()
    expect(answers).to_contain_text("Evaluate at least two of the ticked runs", timeout=10_000)
    # All of it on one page to keep: an export of the first run ticked.
    page.locator("#comparison-btn").click()
    expect(page.locator("#comparison-msg")).to_contain_text("2 runs on one page", timeout=30_000)
    expect(page.locator("#comparison-file")).to_contain_text(f"{two_runs[0].name}-comparison")

    # A run's settings go back into the Train form, to train another like it: its learning rate and step count,
    # with the run name left empty.
    page.locator("#action-run input").click()
    page.get_by_role("option", name=two_runs[1].name).click()
    page.locator("#load-run-btn").click()
    expect(page.locator("#action-msg")).to_contain_text(f"Loaded the settings {two_runs[1].name} started with",
                                                       timeout=30_000)
    open_settings(page)
    expect(page.get_by_label("Steps", exact=True)).to_have_value("4")
    expect(page.get_by_label("Learning rate", exact=True).first).to_have_value("0.001")
    expect(page.locator("#run-name textarea, #run-name input").first).to_have_value("")

    # Train a next stage from it: the same settings, and the model box holds the model run b ended with (its
    # merged folder; Start makes it the new run's own). Until that folder exists, the button says why it can't.
    page.locator("#stage-btn").click()
    expect(page.locator("#action-msg")).to_contain_text(f"{two_runs[1].name}' has no tuned model to start from",
                                                       timeout=30_000)
    (two_runs[1] / "merged").mkdir()
    (two_runs[1] / "merged" / "config.json").write_text("{}")
    page.locator("#stage-btn").click()
    expect(page.locator("#action-msg")).to_contain_text(f"The form now trains from the model {two_runs[1].name} "
                                                       "ended with (step 4)", timeout=30_000)
    expect(page.get_by_label("…or a hub id / local folder")).to_have_value(str(two_runs[1] / "merged"))
    expect(page.get_by_label("Steps", exact=True)).to_have_value("4")
    page.screenshot(path=str(ARTIFACTS / "runs-next-stage.png"), full_page=True)
    # A preset then sets what the stage teaches, and keeps its model.
    page.locator("#preset input").click()
    page.get_by_role("option", name="Arithmetic: correctness + format").click()
    expect(page.get_by_label("Arithmetic (bundled)")).to_be_checked(timeout=30_000)
    expect(page.get_by_label("…or a hub id / local folder")).to_have_value(str(two_runs[1] / "merged"))
