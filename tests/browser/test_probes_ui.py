"""Completions over time, in Debian chromium: a run of the arithmetic preset shows the base model's answers
(step 0) to held-out prompts with their format compliance, then a later probe step with what changed, can be
scrubbed back, and probes the step a Stop ends on; the stopped run's header then sets base against tuned. One
training for the whole panel, of the two-layer random model: the panel shows any answer the same way, and the
bundled model's probes are checked in tests/integration/test_probes.py."""

import json
import re

import pytest
from playwright.sync_api import expect

from pipeline.run_folder import runs

from .conftest import ARTIFACTS, fill_settings

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def shot(page, name, locator=None):
    if locator is None:
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    else:
        locator.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def test_probes_show_step_0_then_a_later_step_with_format_compliance_and_the_step_a_stop_ends_on(page, app_url,
                                                                                                  tiny_model_dir):
    page.goto(app_url)
    expect(page.get_by_text("1. Model and data")).to_be_visible()
    # Before any run: the panel says what probes are.
    expect(page.locator("#probes")).to_contain_text("step 0 is the base model")

    # The verifiable-task preset, as a user picks it.
    page.get_by_label("Preset").click()
    page.get_by_role("option", name="Arithmetic: correctness + format").click()
    numeric = page.locator("#rewards-table [role=row]", has_text="numeric_tolerance").locator("input[type=checkbox]")
    expect(numeric).to_be_checked(timeout=30_000)
    # One prompt a step (G=4), 24 tokens and 2 probe prompts keep steps and probes short (the panel's layout is
    # the same for any answer, finished or cut). The two-layer model's steps take a fraction of a second: a probe
    # every 10 steps shows a second probe within seconds without a new step to pick every poll, and 400 steps
    # planned leave the run training when the test stops it, after the second probe.
    fill_settings(page, {"Steps": "400", "Group size G": "4", "Batch (completions / step)": "4",
                         "Max completion tokens": "24", "Probe every N steps (0 = off)": "10",
                         "Probe prompts (held out)": "2"})
    page.get_by_label("…or a hub id / local folder").fill(str(tiny_model_dir))
    page.locator("#start-btn").click()
    expect(page.locator("#train-message")).to_contain_text("Started", timeout=30_000)
    run_name = page.locator("#run-select input").input_value()
    cfg = json.loads((runs.runs_dir() / run_name / "config.json").read_text())
    assert cfg["dataset"]["source"] == "arithmetic" and cfg["model"] == str(tiny_model_dir)
    assert (cfg["max_steps"], cfg["batch_size"], cfg["probe_every"], cfg["probe_prompts"]) == (400, 4, 10, 2)

    # Step 0: the base model's answers to the 2 probe prompts, scored, with the task's own metrics.
    panel = page.locator("#probes .gs-probes")
    expect(panel).to_have_attribute("data-step", "0", timeout=600_000)
    expect(page.locator("#probes .gs-probe")).to_have_count(2)
    expect(panel).to_contain_text("step 0 · base")
    expect(panel.locator(".gs-format")).to_contain_text(re.compile(r"format compliance \d+%"))
    expect(panel).to_contain_text("accuracy")
    expect(page.locator("#probe-plot")).to_contain_text("total (weighted)", timeout=30_000)
    shot(page, "probes-01-step0")
    shot(page, "probes-05-arithmetic-step0", page.locator("#probes"))

    # A later probe step: the panel follows the latest one and compares it with the one before, format
    # compliance included.
    expect(panel).to_have_attribute("data-steps", re.compile(r"^0,\d+"), timeout=900_000)
    expect(panel).to_contain_text("Compared with step 0")
    expect(panel.locator(".gs-format")).to_contain_text(
        re.compile(r"format compliance \d+% \([+-]\d+ points vs step 0\)"))
    later = panel.get_attribute("data-step")
    assert later != "0"
    expect(page.locator("#probes .gs-probe-history").first).to_contain_text(f"{later}:")
    shot(page, "probes-02-later-step")
    shot(page, "probes-03-panel", page.locator("#probes"))

    # Scrub back to the base model.
    page.locator("#probe-step").get_by_text("0 · base").click()
    expect(panel).to_have_attribute("data-step", "0", timeout=30_000)
    expect(panel).not_to_contain_text("Compared with")
    page.locator("#probe-step").get_by_text("latest").click()
    expect(panel).not_to_have_attribute("data-step", "0", timeout=30_000)

    page.locator("#stop-btn").click()
    expect(page.locator("#stop-message")).to_contain_text("Stop requested", timeout=30_000)
    expect(page.locator("#progress [data-state=stopped]")).to_be_visible(timeout=600_000)
    # The step it stopped on was probed too ("end"), unless it was already a probe step.
    expect(panel).to_contain_text("· end", timeout=30_000)
    shot(page, "probes-04-stopped")
    shot(page, "probes-06-arithmetic-end", page.locator("#probes"))
    # Under the header: the base model against the tuned one on the same held-out prompts, and what to do next.
    outcome = page.locator("#progress .gs-outcome")
    expect(outcome).to_contain_text("on 2 held-out prompts the run never trained on", timeout=30_000)
    expect(outcome.locator("tr", has_text="accuracy")).to_be_visible()
    expect(outcome.locator("tr", has_text="numeric_tolerance")).to_be_visible()
    expect(outcome.locator(".gs-per-prompt")).to_contain_text(re.compile(r"Prompt by prompt: higher on \d, lower on "
                                                                         r"\d, the same on \d of 2\."))
    expect(outcome).to_contain_text("Evaluate base vs tuned")
    shot(page, "probes-07-before-and-after", page.locator("#progress"))
