"""Evaluate base vs tuned from the Runs panel: the click comes back at once, the panel follows the job
to its result, and a reload finds the result again."""

import pytest
from playwright.sync_api import expect

from tests.integration.helpers import evaluable_run

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_evaluate_shows_progress_then_the_result_and_a_reload_keeps_it(page, app_url, bundled_model_dir):
    run_dir = evaluable_run("eval-ui", bundled_model_dir, held_out=3)
    page.goto(app_url)
    evaluate = page.get_by_role("button", name="Evaluate base vs tuned")
    panel = page.locator(".column", has=evaluate).last  # innermost
    stop = page.locator("#eval-stop-btn")
    expect(stop).to_be_disabled()  # nothing to stop yet
    panel.get_by_label("Run", exact=True).click()
    page.get_by_role("option", name=run_dir.name, exact=True).click()
    evaluate.click()
    expect(panel).to_contain_text(f"Started evaluating {run_dir.name} on up to", timeout=30_000)
    status = page.locator("#eval-status")
    expect(status).to_contain_text("answers", timeout=300_000)  # the job's progress, through the live view's poll
    expect(stop).to_be_enabled()  # while it runs, its Stop is usable...
    expect(status).to_contain_text("Delta (tuned - base)", timeout=600_000)
    expect(status.locator("table")).to_contain_text("tuned")  # the base vs tuned table
    expect(stop).to_be_disabled()  # ...and greyed once it has ended, as Stop is for a training
    expect(page.locator("#push-stop-btn")).to_be_disabled()
    page.screenshot(path=str(ARTIFACTS / "eval-01-result.png"), full_page=True)
    page.reload()  # the newest run is offered again, and its result read back from disk
    expect(page.locator("#eval-status")).to_contain_text("Delta (tuned - base)", timeout=60_000)
