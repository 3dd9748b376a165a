"""A new user's path through the Train tab, in Debian chromium: set up, start, watch, stop, reload, resume."""

import re
import time

import pytest
from playwright.sync_api import expect

from pipeline.run_folder import runs

from .conftest import ARTIFACTS, LIGHT_RUN, fill_settings

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def shot(page, name):
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def plotted_series(page, elem_id):
    """Legend entries drawn in a line plot: the plot has data when its series appear."""
    return page.locator(f"#{elem_id} .role-legend-symbol, #{elem_id} g.role-legend text, #{elem_id} .mark-text text")


def test_start_watch_stop_reload_and_resume(page, app_url, tiny_model_dir):
    page.goto(app_url)
    expect(page.get_by_text("1. Model and data")).to_be_visible()
    expect(page.get_by_label("Model", exact=True)).to_have_value(re.compile("SmolLM2-135M-Instruct"))
    expect(page.get_by_label("TL;DR (bundled)")).to_be_checked()

    # Rewards: keep length_target, switch token_diversity off.
    diversity = page.locator("#rewards-table [role=row]", has_text="token_diversity").locator("input[type=checkbox]")
    expect(diversity).to_be_checked()
    diversity.click()
    expect(diversity).not_to_be_checked()
    # No probes, and a two-layer model with random weights from a local folder: this test is about the live view,
    # Stop and Resume, not about what the model learns (steering trains the bundled model in its own).
    # Its steps take a fraction of a second, so the run is planned long enough to be stopped by hand.
    fill_settings(page, {"Probe every N steps (0 = off)": "0", "Steps": "400", **LIGHT_RUN})
    page.get_by_label("…or a hub id / local folder").fill(str(tiny_model_dir))
    shot(page, "train-01-setup")

    page.locator("#start-btn").click()
    expect(page.locator("#train-message")).to_contain_text("Started", timeout=30_000)
    run_name = page.locator("#run-select input").input_value()
    assert run_name
    cfg = (runs.runs_dir() / run_name / "config.json").read_text()
    assert "length_target" in cfg and "token_diversity" not in cfg and '"probe_every": 0' in cfg
    assert str(tiny_model_dir) in cfg

    # Live: the step counter moves, the reward chart gains a series, the group inspector fills. The header names the
    # new run first: until the next poll redraws it, the view still shows the run that was on screen before Start.
    expect(page.locator("#progress")).to_contain_text(run_name, timeout=30_000)
    expect(page.locator("#progress .gs-step")).to_have_text(re.compile(r"[1-9]"), timeout=600_000)
    expect(page.locator("#groups .gs-group").first).to_be_visible(timeout=30_000)
    expect(page.locator("#groups .gs-adv").first).to_have_text(re.compile(r"[+-]\d\.\d\d"))
    # The default scales advantages by the batch's std, and the formula above each group says so.
    expect(page.locator("#groups .gs-formula").first).to_contain_text("batch std = ")
    expect(page.locator("#reward-plot")).to_contain_text("length_target", timeout=30_000)
    shot(page, "train-02-running")

    # Stop from the UI: the run ends as "stopped" after the current step, with its adapter saved.
    page.locator("#stop-btn").click()
    expect(page.locator("#stop-message")).to_contain_text("Stop requested", timeout=30_000)
    expect(page.locator("#progress [data-state=stopped]")).to_be_visible(timeout=600_000)
    assert (runs.runs_dir() / run_name / "adapter" / "adapter_config.json").exists()
    shot(page, "train-03-stopped")

    # A reload finds the run, its chart and its groups again, from disk.
    page.reload()
    expect(page.locator("#run-select input")).to_have_value(run_name, timeout=30_000)
    expect(page.locator("#progress [data-state=stopped]")).to_be_visible(timeout=30_000)
    expect(page.locator("#reward-plot")).to_contain_text("length_target", timeout=30_000)
    expect(page.locator("#groups .gs-group").first).to_be_visible()
    expect(page.locator("#runs-table")).to_contain_text(run_name)
    shot(page, "train-04-reloaded")

    # Resume from the Runs panel: the run goes on from the checkpoint Stop wrote, not from step 1.
    run_dir = runs.runs_dir() / run_name
    stop_step = runs.read_status(run_dir)["step"]
    assert stop_step >= 1 and runs.checkpoints(run_dir)[-1].name == f"checkpoint-{stop_step}"
    lines_before = len(runs.read_jsonl(run_dir / "metrics.jsonl"))
    panel = page.locator(".column", has=page.get_by_role("button", name="Resume")).last  # innermost
    panel.get_by_label("Run", exact=True).click()
    page.get_by_role("option", name=run_name, exact=True).click()
    panel.get_by_role("button", name="Resume").click()
    expect(panel).to_contain_text(f"Resuming {run_name}", timeout=30_000)
    expect(page.locator("#run-select input")).to_have_value(run_name)
    expect(page.locator("#progress [data-state=running]")).to_be_visible(timeout=120_000)
    # The first step the resumed trainer logs is the one after the checkpoint.
    deadline = time.time() + 600
    while time.time() < deadline and len(runs.read_jsonl(run_dir / "metrics.jsonl")) <= lines_before:
        assert runs.read_status(run_dir)["state"] in runs.ACTIVE_STATES, runs.log_tail(run_dir, 20)
        time.sleep(1)
    new_steps = [row["step"] for row in runs.read_jsonl(run_dir / "metrics.jsonl")[lines_before:]]
    assert new_steps and new_steps[0] == stop_step + 1, (stop_step, new_steps)
    page.wait_for_function(f"() => +document.querySelector('#progress .gs-step')?.textContent > {stop_step}",
                           timeout=60_000)
    shot(page, "train-05-resumed")
    # Stop it again, so no trainer is left running.
    page.locator("#stop-btn").click()
    expect(page.locator("#progress [data-state=stopped]")).to_be_visible(timeout=600_000)
    assert runs.read_status(run_dir)["step"] > stop_step


def test_a_start_while_training_is_refused_and_a_queued_run_starts_when_it_ends(page, app_url, tiny_model_dir):
    """One training at a time: a second Start gets a clear message and launches nothing. Add to queue keeps the
    form's run in a line shown under the buttons; Remove takes one out; when the training ends (Stop), the app
    starts the queued run by itself, and the page that showed the stopped run moves to it."""
    from pipeline import runner
    from pipeline.run_folder import run_queue
    from pipeline.setup.config import RunConfig

    # The previous test's trainer wrote "stopped" and may still be exiting; wait for it as a user would.
    deadline = time.time() + 120
    while time.time() < deadline and runner.busy_run() is not None:
        time.sleep(0.5)
    busy = runner.start("train", cfg=RunConfig(model=str(tiny_model_dir), max_steps=5000, batch_size=4,
                                               max_completion_length=16, probe_every=0), label="busy")
    try:
        before = len(list(runs.iter_run_dirs()))
        page.goto(app_url)
        # The page opens on the run that is training now.
        expect(page.locator("#run-select input")).to_have_value(busy.name, timeout=30_000)
        expect(page.locator("#queue")).to_be_hidden()  # nothing waits
        page.locator("#start-btn").click()
        expect(page.locator("#train-message")).to_contain_text("still training", timeout=30_000)
        expect(page.locator("#train-message")).to_contain_text("Add to queue")
        assert len(list(runs.iter_run_dirs())) == before

        # A run queued from the form, then a sweep of it over Steps (one run per value); one is taken out again.
        fill_settings(page, {"Probe every N steps (0 = off)": "0", "Steps": "2", **LIGHT_RUN})
        page.get_by_label("…or a hub id / local folder").fill(str(tiny_model_dir))
        page.locator("#run-name textarea, #run-name input").first.fill("queued")
        page.locator("#queue-btn").click()
        expect(page.locator("#train-message")).to_contain_text("Queued queued, number 1", timeout=30_000)
        page.get_by_text("Queue a sweep").click()
        page.locator("#sweep-setting input").click()
        page.get_by_role("option", name="Steps", exact=True).click()
        page.locator("#sweep-values textarea, #sweep-values input").first.fill("1, 3")
        page.locator("#sweep-btn").click()
        expect(page.locator("#train-message")).to_contain_text("Queued 2 runs: queued-steps-1, queued-steps-3",
                                                               timeout=30_000)
        expect(page.locator("#queue")).to_contain_text("3 waiting", timeout=30_000)
        expect(page.locator("#queue")).to_contain_text(f"Next after {busy.name}")
        assert len(list(runs.iter_run_dirs())) == before  # waiting is not training
        shot(page, "train-06-queued")
        # Its settings load back into the form (a sweep's run carries its own value).
        page.locator("#queue-pick input").click()
        page.get_by_role("option", name="2. queued-steps-1").click()
        page.locator("#load-queued-btn").click()
        expect(page.locator("#train-message")).to_contain_text("Loaded queued-steps-1", timeout=30_000)
        expect(page.get_by_label("Steps", exact=True)).to_have_value("1")
        expect(page.locator("#run-name textarea, #run-name input").first).to_have_value("queued-steps-1")
        page.locator("#queue-pick input").click()
        page.get_by_role("option", name="3. queued-steps-3").click()
        page.locator("#unqueue-btn").click()
        expect(page.locator("#train-message")).to_contain_text("Removed queued-steps-3", timeout=30_000)
        expect(page.locator("#queue")).to_contain_text("2 waiting", timeout=30_000)

        page.locator("#stop-btn").click()
        expect(page.locator("#stop-message")).to_contain_text("Stop requested", timeout=30_000)
        # The queue's runs start one after another once the stopped one has exited, and the page follows each.
        expect(page.locator("#run-select input")).to_have_value(re.compile("-queued$"), timeout=120_000)
        expect(page.locator("#run-select input")).to_have_value(re.compile("queued-steps-1$"), timeout=300_000)
        expect(page.locator("#queue")).to_be_hidden(timeout=30_000)
        expect(page.locator("#progress [data-state=finished]")).to_be_visible(timeout=300_000)
        shot(page, "train-07-queue-started")
    finally:
        runner.stop("train", busy, grace_s=120)
    assert runs.read_status(busy)["state"] in ("stopped", "failed")
    started = [r["run"] for r in run_queue.read().started]
    assert len(started) == 2 and run_queue.read().waiting == []
    steps = [runs.read_json(runs.runs_dir() / name / "config.json")["max_steps"] for name in started]
    assert steps == [2, 1] and runs.read_status(runs.runs_dir() / started[0])["state"] == "finished"
