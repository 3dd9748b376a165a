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
