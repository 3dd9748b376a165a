"""The group inspector's token view on a finished run: switched to Log-prob, each completion shows as shaded
token spans with their values on hover, beside its rewards and advantage; Entropy switches the scale. The run's
files are written directly (a step recorded from a real run on the bundled model: token_view_run.json)."""

import json
import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from pipeline.run_folder import run_files, runs, token_log
from tests.integration.helpers import make_run

from .conftest import ARTIFACTS, ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RECORDED = Path(__file__).with_name("token_view_run.json")


def finished_token_run() -> Path:
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    run_dir = make_run("token-view", max_completion_length=40, max_steps=1)
    runs.append_jsonl(run_dir / run_files.METRICS, recorded["metrics"])
    runs.append_jsonl(run_dir / run_files.GROUPS, recorded["groups"])
    token_log.append_step(run_dir, recorded["tokens"]["step"], recorded["tokens"]["groups"])
    runs.write_status(run_dir, "finished", step=1, started_at=1.0, ended_at=2.0)
    return run_dir


def test_a_finished_runs_completions_show_token_by_token_shaded_with_values_on_hover(page, app_url):
    run_dir = finished_token_run()
    page.goto(app_url)
    page.locator("#run-select input").click()
    page.get_by_role("option", name=run_dir.name, exact=True).click()
    groups = page.locator("#groups")
    expect(groups.locator(".gs-group").first).to_be_visible(timeout=30_000)
    expect(groups.locator(".gs-tok")).to_have_count(0)  # text until asked

    page.locator("#token-mode").get_by_text("Log-prob", exact=True).click()
    expect(groups.locator(".gs-tok-legend")).to_contain_text("surprising", timeout=15_000)
    tokens = groups.locator(".gs-tok")
    expect(tokens.first).to_have_attribute("title", re.compile(r"log-prob -?\d+\.\d{4} \(p = .*entropy \d+\.\d{4}"))
    # Each row keeps its advantage beside its tokens, and some tokens are shaded.
    expect(groups.locator("tr.gs-pos .gs-tok").first).to_be_visible()
    expect(groups.locator("tr.gs-pos td.gs-adv").first).to_have_text(re.compile(r"\+\d\.\d\d"))
    alphas = tokens.evaluate_all("els => els.map(e => parseFloat(getComputedStyle(e).backgroundColor"
                                 ".split(',')[3] || '1'))")
    assert max(alphas) > 0.5 and min(alphas) < 0.1, alphas
    # The screenshot for the docs (written to docs/ only with DOCS_SHOTS=1, so a test run leaves the checkout as
    # it was): the toggle, the legend and the first groups, in one viewport.
    page.evaluate("document.getElementById('token-mode').scrollIntoView({block: 'start'})")
    box_mode, box_groups = page.locator("#token-mode").bounding_box(), groups.bounding_box()
    clip = {"x": box_groups["x"], "y": box_mode["y"], "width": box_groups["width"],
            "height": min(box_groups["y"] + box_groups["height"], 1100) - box_mode["y"]}
    ARTIFACTS.mkdir(exist_ok=True)
    targets = [ARTIFACTS / "token-view-logp.png"] + ([ROOT / "docs" / "token-view.png"]
                                                     if os.environ.get("DOCS_SHOTS") == "1" else [])
    for path in targets:
        page.screenshot(path=str(path), clip=clip)

    page.locator("#token-mode").get_by_text("Entropy", exact=True).click()
    expect(groups.locator(".gs-tok-legend")).to_contain_text("unsure", timeout=15_000)
    page.locator("#token-mode").get_by_text("Text", exact=True).click()
    expect(groups.locator(".gs-tok")).to_have_count(0, timeout=15_000)
