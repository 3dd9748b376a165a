"""The learnability scan in the Train tab: a user scans a few prompts, sees the spread and the share with no
signal, then keeps only the prompts with signal and finds them in the config the form makes."""

import re

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, fill_settings, open_settings

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_scan_then_keep_the_prompts_with_signal(page, app_url):
    page.goto(app_url)
    scan = page.locator("#scan")
    expect(scan.locator("[data-state=no-scan]")).to_be_visible(timeout=30_000)  # the empty state says what it does
    # One prompt a step, so even a single prompt with signal is enough for a run.
    fill_settings(page, {"Max completion tokens": "12", "Batch (completions / step)": "4"})
    prompts = page.locator("#scan-prompts input")
    prompts.fill("3")
    prompts.press("Tab")
    page.locator("#scan-btn").click()
    result = scan.locator(".gs-scan")
    expect(result).to_be_visible(timeout=180_000)
    expect(result).to_have_attribute("data-prompts", "3")
    expect(scan.locator(".gs-scan-share")).to_contain_text(re.compile(r"\d of 3"))
    expect(scan.locator("svg .gs-scan-row")).to_have_count(3)
    expect(scan.locator(".gs-scan-table tr")).to_have_count(4)  # a header and one row per prompt
    kept = scan.locator("svg .gs-scan-row[data-signal=true]").count()
    scan.screenshot(path=str(ARTIFACTS / "learnability-scan.png"))

    # Kept prompts and a run: pre-flight reads the config the form makes, as Start would write it.
    open_settings(page)
    page.get_by_label("Train only on prompts with signal (from the scan)").check()
    page.get_by_role("button", name="Pre-flight check").click()
    message = page.locator("#train-message")
    if kept:
        expect(message).to_contain_text(f"The run trains on the {kept} the learnability scan found signal on",
                                        timeout=120_000)
    else:
        expect(message).to_contain_text("needs a learnability scan first", timeout=120_000)
