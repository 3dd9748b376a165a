"""The reward test bench reproduces the GRPO explainer's worked advantage table in the browser."""

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS

pytestmark = pytest.mark.browser


def test_seed_001_table(page, app_url):
    page.goto(app_url)
    page.get_by_role("tab", name="Reward test bench").click()
    # Before any score: what will show, and the table's real columns (not Gradio's "1 2 3").
    expect(page.locator("#bench-summary")).to_contain_text("Press Score the group")
    table = page.locator("#bench-table")
    expect(table.locator("th")).to_contain_text(["#", "advantage", "total"])
    raw = page.locator("#bench-raw textarea, #bench-raw input").first
    raw.fill("1,1,1,1,0,0,0,0")
    page.locator("#bench-score").click()
    expect(page.locator("#bench-summary")).to_contain_text("mean 0.5000", timeout=30_000)
    expect(page.locator("#bench-summary")).to_contain_text("std 0.5345")
    expect(table).to_contain_text("0.9352")
    expect(table).to_contain_text("-0.9352")
    page.screenshot(path=str(ARTIFACTS / "bench-seed-001.png"), full_page=True)
    # A group it can't score says why, and the last group's rows do not stay beside the message.
    raw.fill("5")
    page.locator("#bench-score").click()
    expect(page.locator("#bench-summary")).to_contain_text("Enter at least two rewards", timeout=30_000)
    expect(table).not_to_contain_text("0.9352")
    expect(table.locator("th")).to_contain_text(["#", "advantage", "total"])


def test_score_the_group_as_it_opens(page, app_url):
    """A new user's first click: the default rewards on the example prompt and completions score, post_similarity
    included (it compares with the prompt box's text)."""
    page.goto(app_url)
    page.get_by_role("tab", name="Reward test bench").click()
    page.locator("#bench-score").click()
    expect(page.locator("#bench-summary")).to_contain_text("Group of 4", timeout=60_000)
    expect(page.locator("#bench-table")).to_contain_text("post_similarity")
    page.screenshot(path=str(ARTIFACTS / "bench-defaults.png"), full_page=True)


def test_a_group_from_a_run_loads_with_the_runs_rewards_and_scores_again(page, app_url):
    """A run's logged group (prompt, G completions) fills the bench with the run's own rewards and weights, and
    scores again with whatever the user changes."""
    from pipeline.run_folder import runs
    from pipeline.setup.config import RewardSpec, RunConfig

    run_dir = runs.new_run_dir("bench-group")
    cfg = RunConfig(rewards=[RewardSpec("length_target", 0.5, {"target": 20, "unit": "chars"})])
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    completions = ["Short one.", "A somewhat longer answer here.", "Mid length.", "x"]
    others = ["One", "Two words here", "Three", "Four is the longest of these four"]
    runs.append_jsonl(run_dir / "groups.jsonl", {"step": 3, "scale_rewards": "batch", "groups": [
        {"prompt": "[user] First post\n\nTL;DR:", "completions": [{"completion": c} for c in others]},
        {"prompt": "[system] Be brief.\n[user] Second post\n\nTL;DR:",
         "completions": [{"completion": c, "total": -1.0, "advantage": 0.5} for c in completions]}]})

    page.goto(app_url)
    page.get_by_role("tab", name="Reward test bench").click()
    page.locator("#bench-load").get_by_text("Load a group from a run instead").click()
    page.locator("#bench-run input").click()
    page.get_by_role("option", name=run_dir.name, exact=True).click()
    page.get_by_label("Prompt #").fill("2")
    page.locator("#bench-load-btn").click()
    expect(page.locator("#bench-summary")).to_contain_text(f"Loaded {run_dir.name}, step 3, prompt 2: 4 completions",
                                                           timeout=30_000)
    expect(page.locator("#bench-candidates textarea")).to_have_value("\n---\n".join(completions))
    expect(page.locator("#bench-scale input[value=batch]")).to_be_checked()  # as the run scaled its advantages
    page.locator("#bench-score").click()
    expect(page.locator("#bench-summary")).to_contain_text("of all 8 totals of the step's 2 groups", timeout=30_000)
    table = page.locator("#bench-table")
    expect(table).to_contain_text("length_target", timeout=30_000)
    expect(table).not_to_contain_text("post_similarity")  # the run's rewards, not the bench's defaults
    expect(table).to_contain_text("advantage in the run")  # what the run gave them, beside the bench's
    expect(table.locator("[role=row]")).to_have_count(5)  # a header and the group's four completions
    page.screenshot(path=str(ARTIFACTS / "bench-from-a-run.png"), full_page=True)
