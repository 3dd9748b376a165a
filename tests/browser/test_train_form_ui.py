"""Values typed into the Train form are the values the run gets, even when typed the moment the page opens."""

import json

import pytest
from playwright.sync_api import expect

from pipeline.run_folder import runs

from .conftest import LIGHT_RUN, fill_settings, open_settings

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_typed_settings_reach_the_run_config(page, app_url, tiny_model_dir):
    # Type as early as the page allows, three page loads in a row: with the accordion built closed, a field
    # typed into while the page was still loading went back to its initial value in 2 of 6 such tries.
    # (test_settings_fold.py drives the same pattern ten times in a minimal app.)
    for attempt in range(3):
        page.goto(app_url, wait_until="commit")
        open_settings(page)
        steps = page.get_by_label("Steps", exact=True)
        steps.fill("6")
        steps.press("Tab")
        every = page.get_by_label("Checkpoint every N steps")
        every.fill("1")
        every.press("Tab")
        page.wait_for_timeout(800)
        assert (steps.input_value(), every.input_value()) == ("6", "1"), f"attempt {attempt + 1}"
    fill_settings(page, LIGHT_RUN)  # a lighter first step: the run is stopped during it
    # The model's answers don't matter here: a two-layer model with random weights, from a local folder.
    page.get_by_label("…or a hub id / local folder").fill(str(tiny_model_dir))
    page.locator("#run-name textarea, #run-name input").first.fill("Tiny model: 6 steps")
    page.locator("#start-btn").click()
    expect(page.locator("#train-message")).to_contain_text("Started", timeout=30_000)
    run_name = page.locator("#run-select input").input_value()
    assert run_name.endswith("-tiny-model-6-steps"), run_name  # the typed name, after the start time
    cfg = json.loads((runs.runs_dir() / run_name / "config.json").read_text())
    assert (cfg["max_steps"], cfg["save_steps"], cfg["batch_size"]) == (6, 1, 4)
    assert cfg["model"] == str(tiny_model_dir)
    expect(steps).to_have_value("6")
    page.locator("#stop-btn").click()
    expect(page.locator("#progress [data-state=stopped]")).to_be_visible(timeout=600_000)


def test_a_preset_then_typed_values(page, app_url):
    """Picking a preset fills the form; values typed after it are kept."""
    page.goto(app_url)
    page.get_by_label("Preset").click()
    page.get_by_role("option", name="Length + diversity pair").click()
    similarity = page.locator("#rewards-table [role=row]", has_text="post_similarity").locator("input[type=checkbox]")
    expect(similarity).not_to_be_checked(timeout=30_000)  # the preset's rewards: the length + diversity pair only
    open_settings(page)
    steps = page.get_by_label("Steps", exact=True)
    steps.fill("7")
    steps.press("Tab")
    page.wait_for_timeout(1000)
    # "Show command" prints the config the form makes, without starting a run (the test above does that).
    page.get_by_role("button", name="Show command").click()
    # Its first line sums up the config the Start button would write.
    expect(page.locator("#train-command")).to_contain_text(
        "# 7 steps, G=4, 32 completion tokens, rewards: length_target, token_diversity", timeout=30_000)


def test_what_each_reward_does_reads_as_written(page, app_url):
    """The rewards' descriptions show their tags and their absolute values: a tag is not taken as HTML and
    dropped, and a | does not split the table's cells."""
    page.goto(app_url)
    page.get_by_text("What each reward does").click()
    strict = page.locator("tr", has_text="strict_format").first
    expect(strict).to_contain_text("exactly <think>...</think><answer>...</answer>.", timeout=30_000)
    length = page.locator("tr", has_text="length_target").first
    expect(length.locator("td")).to_have_count(3)
    expect(length.locator("td").nth(1)).to_contain_text("-|target - length|; peaks at the target length")


def test_the_prompt_preview_shows_when_asked_for(page, app_url):
    """No empty preview box on the form: it opens on the button, with the first prompts as the model sees them."""
    page.goto(app_url)
    preview, button = page.locator("#prompt-preview"), page.get_by_role("button", name="Preview prompts as the model "
                                                                                  "sees them")
    expect(button).to_be_visible(timeout=30_000)  # the form is drawn...
    expect(preview).to_be_hidden()  # ...without the box
    button.click()
    expect(preview).to_be_visible(timeout=10_000)
    expect(preview).to_contain_text("--- prompt 1 (", timeout=60_000)
