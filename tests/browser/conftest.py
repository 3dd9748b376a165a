"""A real app process and a real browser: Playwright driving Debian's chromium (never a downloaded one)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.integration.helpers import free_port, poll, start_app_process

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# How long an `expect` without its own timeout waits: Playwright's 5 s is less than a page can take to draw the
# app on two busy cores (a trainer on one, the other worker's tests on the other). Only a failing check waits it out.
expect.set_options(timeout=20_000)


def start_app(port: int, *extra: str) -> subprocess.Popen:
    """The app as users run it, spare worker included: its environment stays the one it started with, so the jobs
    it starts match its spare (tests/conftest.py turns spares off for apps served inside pytest, whose environment
    names each test)."""
    return start_app_process(port, *extra, log_path=ARTIFACTS / f"app-{port}.log",
                             env={"GRPO_STUDIO_SPARE_WORKER": "1"})


@pytest.fixture(scope="session")
def app_url(studio_data, bundled_model_dir, movie_table):
    ARTIFACTS.mkdir(exist_ok=True)
    port = free_port()
    proc = start_app(port)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.fail("Debian chromium is required for browser tests: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    pg = context.new_page()
    yield pg
    context.close()
    # A trainer runs in its own session and outlives a failed test: stop it so it cannot slow or
    # block the tests after it.
    from pipeline import runner

    active = runner.active_run()
    if active is not None:
        runner.stop("train", active, grace_s=120)
    # A run that has written its final status can still be exiting (a queued run that the test watched to its
    # end): the tests after this one, on this worker and in this data folder, would find the machine busy.
    assert poll(lambda: runner.busy_run() is None, timeout=120), f"still busy after the test: {runner.busy_run()}"


def open_settings(page, timeout_s: float = 60.0, panel: str = "all-settings"):
    """Open the Train tab's "All settings" (or another panel folded on page load, such as "steer-panel") as a
    user would: click its header if it is closed, until the fields show (a page still loading may not show
    them yet), and go on the moment they do."""
    import time

    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    header = page.locator(f"#{panel} button.label-wrap").first
    content = page.locator(f"#{panel} [data-testid=accordion-content]").first
    deadline = time.time() + timeout_s
    while True:
        assert time.time() < deadline, f"#{panel} never opened"
        if "open" not in (header.get_attribute("class") or "").split():
            header.click()
        try:
            content.wait_for(state="visible", timeout=500)
            return
        except PlaywrightTimeout:
            continue


def fill_settings(page, values: dict[str, str]) -> None:
    """Type values into "All settings" fields by their labels, as a user would (Tab commits each)."""
    open_settings(page)
    for label, value in values.items():
        field = page.get_by_label(label, exact=True)
        field.fill(value)
        field.press("Tab")
        expect(field).to_have_value(value)


# A lighter run for browser tests about the live view, not about learning: one prompt a step and short
# completions halve a CPU step.
LIGHT_RUN = {"Batch (completions / step)": "4", "Max completion tokens": "16"}


def set_number_in_fold(page, header: str, elem_id: str, value: str) -> None:
    """Open a panel folded on page load (its header text) and type `value` into the number box `elem_id` in it, as
    a user would; Enter commits it."""
    page.get_by_text(header).click()
    field = page.locator(f"#{elem_id} input[type=number]")
    expect(field).to_be_visible()
    page.wait_for_timeout(500)  # a closed accordion's fields reset what is typed the moment they mount
    field.fill(value)
    field.press("Enter")
    expect(field).to_have_value(value)
