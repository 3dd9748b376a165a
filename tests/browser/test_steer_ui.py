"""Steering a live run from the Train tab, in Debian chromium: a reward's weight set to 0 mid-run through the
"Steer this run" panel is applied at the next step, marked on the charts, shown in the per-reward chart's later
steps and listed in the run header and the Runs table."""

import re

import pytest
from playwright.sync_api import expect

from pipeline.run_folder import runs
from pipeline.setup import steering

from .conftest import ARTIFACTS, LIGHT_RUN, fill_settings, open_settings

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_weight_changed_mid_run_is_marked_and_used_from_the_next_step(page, app_url):
    page.goto(app_url)
    # A short, light run of the bundled model with the default rewards and no probes.
    fill_settings(page, {"Probe every N steps (0 = off)": "0", "Steps": "4", **LIGHT_RUN})
    page.locator("#start-btn").click()
    expect(page.locator("#train-message")).to_contain_text("Started", timeout=30_000)
    run_name = page.locator("#run-select input").input_value()
    run_dir = runs.runs_dir() / run_name

    # The panel is folded under the run header until opened, and filled with the values in force while the run
    # trains; fixed settings say why.
    expect(page.locator("#steer-panel [data-testid=accordion-content]").first).to_be_hidden()
    open_settings(page, panel="steer-panel")
    weight = page.get_by_label("weight: length_target", exact=True)
    expect(weight).to_have_value("1", timeout=60_000)
    expect(page.get_by_label("Temperature", exact=True).last).to_be_editable()
    fixed = page.get_by_role("button", name="Fixed for the whole run, and why")
    fixed.click()
    expect(page.locator("#steer-fixed")).to_contain_text("the sampler and the advantages are laid out for G")
    fixed.click()
    expect(page.locator("#progress .gs-step")).to_have_text(re.compile(r"[1-9]"), timeout=600_000)

    # Turn length_target into a monitor: only that field is sent, and the panel says when it applies.
    weight.fill("0")
    weight.press("Tab")
    page.locator("#steer-apply").click()
    expect(page.locator("#steer-message")).to_contain_text(re.compile(r"Requested w\(length_target\) 1→0\. "
                                                                      r"Applies at step \d"), timeout=30_000)
    promised = int(re.search(r"Applies at step (\d+)", page.locator("#steer-message").inner_text()).group(1))
    assert [r["changes"] for r in steering.read_requests(run_dir)] == [{"weight/length_target": 0.0}]
    expect(page.locator("#steer-answers")).to_contain_text("Applied at step", timeout=300_000)
    step = steering.applied_changes(run_dir)[0]["step"]
    assert step == promised

    # The marker on the charts, the change in the header and the Runs table, and the new weight from that step on.
    expect(page.locator("#reward-plot")).to_contain_text(f"steered at {step}", timeout=300_000)
    expect(page.locator("#plot-completion_length")).to_contain_text(f"steered at {step}")
    expect(page.locator("#progress")).to_contain_text(f"step {step}: w(length_target) 1→0")
    expect(page.locator("#runs-table")).to_contain_text("w(length_target) 1→0")
    expect(page.locator("#reward-plot")).to_contain_text("length_target (monitor", timeout=300_000)
    page.locator("#steer-panel").screenshot(path=str(ARTIFACTS / "steer-01-panel.png"))
    page.screenshot(path=str(ARTIFACTS / "steer-02-charts.png"), full_page=True)
    metrics = runs.read_metrics(run_dir)
    assert all(m["reward_weights"]["length_target"] == (0 if m["step"] >= step else 1) for m in metrics), metrics
    assert any(m["step"] >= step for m in metrics)
