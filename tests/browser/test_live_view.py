"""Watching costs nothing between steps: the Train tab sends no Gradio event while the run files stay the
same, and redraws within seconds of a new metrics line (a stand-in trainer: this test process)."""

import os
import re
import time

import pytest
from playwright.sync_api import expect

from pipeline.run_folder import run_queue, runs
from pipeline.setup.config import RunConfig
from ui.page_title import NOTIFY_TIP

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser]


def metrics_line(step: int) -> dict:
    return {"step": step, "max_steps": 1000, "reward": 0.1 * step, "reward_std": 0.3, "kl": 0.01, "loss": 0.0,
            "entropy": 2.0, "completion_length": 30.0, "rewards": {"length_target": {"mean": 0.1 * step}},
            "elapsed": 10.0 * step, "eta_seconds": 100.0, "time": time.time()}


def running_run(name: str, max_steps: int, steps: int):
    """A run folder that reads as running (this process stands in for its trainer) with `steps` metrics lines;
    marked stopped when the test ends, so this process does not read as a live trainer to later tests."""
    run_dir = runs.new_run_dir(name)
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=max_steps).to_dict())
    runs.write_status(run_dir, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()),
                      started_at=time.time())
    for step in range(1, steps + 1):
        runs.append_jsonl(run_dir / "metrics.jsonl", {**metrics_line(step), "max_steps": max_steps})
    yield run_dir
    runs.write_status(run_dir, "stopped")


def seconds(clock: str) -> int:
    """'1m05s' as 65."""
    minutes, secs = re.fullmatch(r"(\d+)m(\d+)s", clock.strip()).groups()
    return 60 * int(minutes) + int(secs)


@pytest.fixture
def watched_run(studio_data):
    yield from running_run("watched", max_steps=1000, steps=1)


def test_no_event_while_nothing_changes_and_a_redraw_when_a_step_lands(page, app_url, watched_run):
    events, polls, redraws = [], [], []

    def seen(request):
        if "/queue/join" in request.url:
            events.append(request.url)
            data = (request.post_data_json or {}).get("data") or []
            if len(data) == 6 and isinstance(data[5], str):  # the live view's Refresh: its last input, the parts
                redraws.append(set(data[5].split()))
        elif "/run/live_stamps" in request.url:
            polls.append((request.post_data_json or {}).get("session_hash"))

    page.on("request", seen)
    page.goto(app_url)
    expect(page.locator("#run-select input")).to_have_value(watched_run.name)
    expect(page.locator("#progress .gs-progress")).to_have_attribute("data-step", "1", timeout=30_000)
    page.wait_for_timeout(2_000)  # the page load's own events settle (Playwright reports requests while it waits)
    events.clear(), polls.clear()
    elapsed_before = seconds(page.locator("#progress .gs-elapsed").inner_text())
    page.wait_for_timeout(6_000)
    # The header's clock moves on between steps, in the page alone (ui/clock.py): a run between two steps must not
    # read as a hung one.
    assert seconds(page.locator("#progress .gs-elapsed").inner_text()) - elapsed_before >= 4
    assert len(polls) >= 4, polls  # the page keeps asking...
    # ...in its own Gradio session: a call with none makes the app build a new session (every component's
    # config) each second, which cost it about 50 ms of CPU a poll.
    assert set(polls) == {page.evaluate("window.__gradio_session_hash__")} and polls[0], polls
    assert events == [], events  # ...and sends no Gradio event while the run files stay the same

    runs.append_jsonl(watched_run / "metrics.jsonl", metrics_line(2))
    expect(page.locator("#progress .gs-progress")).to_have_attribute("data-step", "2", timeout=5_000)
    assert len(events) >= 1
    expect(page.locator("#reward-plot")).to_contain_text("total (weighted)")
    # The Refresh was told what moved: the header and the charts, not the groups, the probes or the log.
    assert redraws and {"progress", "charts"} <= redraws[-1] and not {"groups", "probes", "log"} & redraws[-1], redraws

    (watched_run / "train.log").write_text("a new log line\n")  # the log alone moved: the log alone is redrawn
    expect(page.locator("#log textarea")).to_have_value(re.compile("a new log line"), timeout=5_000)
    assert redraws[-1] == {"log"}, redraws


@pytest.fixture
def eleven_step_run(studio_data):
    yield from running_run("eleven", max_steps=11, steps=10)


def x_labels(page, chart: str) -> list[str]:
    """The x-axis labels a chart shows (those not hidden)."""
    return page.evaluate("""(chart) => [...document.querySelectorAll(
            chart + ' g[aria-label^="X-axis"] .role-axis-label text')]
        .filter((label) => getComputedStyle(label).visibility !== 'hidden').map((label) => label.textContent)""", chart)


def y_title(page, chart: str) -> str:
    """The y-axis title a chart shows."""
    return "/".join(page.locator(f'{chart} g[aria-label^="Y-axis"] .role-axis-title text').all_text_contents())


def test_the_wide_reward_chart_labels_whole_steps_only_and_keeps_doing_so_as_steps_land(page, app_url,
                                                                                       eleven_step_run):
    whole = [str(step) for step in range(12)]  # the axis runs 0 to the planned last step, 11 (the default run's)
    page.goto(app_url)
    expect(page.locator("#run-select input")).to_have_value(eleven_step_run.name)
    expect(page.locator("#progress .gs-progress")).to_have_attribute("data-step", "10", timeout=30_000)
    expect(page.locator("#reward-plot")).to_contain_text("total (weighted)")
    deadline = time.time() + 10
    while x_labels(page, "#reward-plot") != whole and time.time() < deadline:
        page.wait_for_timeout(200)
    assert x_labels(page, "#reward-plot") == whole  # Vega ticks this width every half step: "0.5" stays hidden
    assert all(label.isdigit() for label in x_labels(page, "#plot-kl"))  # a half-width chart too
    # Each chart's y axis names its unit, not the plot's column name.
    assert [y_title(page, chart) for chart in ("#reward-plot", "#plot-kl", "#plot-completion_length")] == [
        "reward", "KL", "tokens"]

    runs.append_jsonl(eleven_step_run / "metrics.jsonl", {**metrics_line(11), "max_steps": 11})
    expect(page.locator("#progress .gs-progress")).to_have_attribute("data-step", "11", timeout=10_000)
    page.wait_for_timeout(1_000)  # the redrawn chart
    assert x_labels(page, "#reward-plot") == whole


@pytest.fixture
def stepless_run(studio_data):
    yield from running_run("stepless", max_steps=11, steps=0)


def test_before_the_first_step_charts_say_what_they_will_show_and_stop_greys_out_when_the_run_ends(
        page, app_url, stepless_run):
    """Before the first step, each chart's box says which chart it is and when it fills (not a bare icon); the
    first metrics line replaces that with the chart. Stop is usable while the run trains, greyed once it ended."""
    page.goto(app_url)
    expect(page.locator("#run-select input")).to_have_value(stepless_run.name)
    expect(page.locator("#progress .gs-progress")).to_have_attribute("data-step", "0", timeout=30_000)
    expect(page.locator("#stop-btn")).to_be_enabled()

    def note(chart: str) -> str:
        return page.locator(f"#{chart} .empty").evaluate("e => getComputedStyle(e, '::after').content")

    assert "Train reward: total and per function" in note("reward-plot")
    assert "KL to reference" in note("plot-kl") and "Not logged when beta is 0." in note("plot-kl")
    assert "base model" in note("probe-plot")
    page.locator("#reward-plot").screenshot(path=str(ARTIFACTS / "train-empty-chart.png"))
    runs.append_jsonl(stepless_run / "metrics.jsonl", metrics_line(1))
    expect(page.locator("#reward-plot")).to_contain_text("total (weighted)", timeout=10_000)
    expect(page.locator("#plot-kl .empty")).to_have_count(0)

    runs.write_status(stepless_run, "finished")  # it ends: the header says so and Stop greys out
    expect(page.locator("#progress [data-state=finished]")).to_be_visible(timeout=10_000)
    expect(page.locator("#stop-btn")).to_be_disabled()


@pytest.fixture
def titled_run(studio_data):
    yield from running_run("titled", max_steps=5, steps=1)


# A browser slows the timers of a page that has been behind other tabs for minutes to about one a minute. This
# stands in for that, faster: once the test sets window.gsSlowMs, each repeating timer fires at most that often.
SLOW_TIMERS_JS = """(() => {
  const every = window.setInterval;
  window.setInterval = (fn, ms, ...args) => {
    let last = 0;
    return every(() => {
      const now = Date.now();
      if (window.gsSlowMs && now - last < window.gsSlowMs) return;
      last = now;
      fn(...args);
    }, ms);
  };
})();"""
# The browser's notifications, kept in window.gsNotes instead of shown; the user allows them when asked.
NOTES_JS = """(() => {
  window.gsNotes = [];
  class Note { constructor(head, options) { window.gsNotes.push([head, (options || {}).body]); } close() {} }
  Note.permission = 'default';
  Note.requestPermission = async () => (Note.permission = 'granted');
  window.Notification = Note;
})();"""


def test_the_tab_title_follows_the_run_while_the_page_is_out_of_sight(page, app_url, titled_run):
    """The browser tab's title says the shown run's step, and that it ended; while the page is hidden (and its
    timers slowed, as a browser does) each poll it gets still redraws the run header and the queue (and nothing
    else, through an event of its own that names only their outputs), so the title moves on, and the page moves
    to the run the queue starts next, its header and title with it. With the header's bell pressed, the run's end
    comes as a browser notification, a failed run's with its error."""
    redraws = []

    def seen(request):
        body = (request.post_data_json or {}) if "/queue/join" in request.url else {}
        data = body.get("data") or []
        if len(data) == 6 and isinstance(data[5], str):  # a live view event: its last input, the parts
            redraws.append((body.get("trigger_id"), set(data[5].split())))

    page.on("request", seen)
    page.add_init_script(SLOW_TIMERS_JS)
    page.add_init_script(NOTES_JS)
    page.goto(app_url)
    expect(page.locator("#run-select input")).to_have_value(titled_run.name)
    # the step, and the header's ETA (100 s at the step, counting down) in whole minutes
    expect(page).to_have_title(re.compile(r"^1/5 ▶ [12] min left · GRPO Studio$"), timeout=30_000)
    bell = page.locator("#progress .gs-notify")
    expect(bell).to_have_text("Notify me")
    bell.click()  # the browser asks; the user allows
    expect(bell).to_have_text("✓ Notifying")
    page.evaluate("Object.defineProperty(document, 'hidden', {get: () => true, configurable: true})")
    # Out of sight, the header's clock still moves the time left when its whole minutes change, and the title
    # follows: 300 s left at the draw reads 5 min; two minutes on, 3 min.
    clock = "document.querySelector('#progress .gs-clock')"
    page.evaluate(f"(c => {{ c.dataset.left = '300'; c.dataset.floor = '0'; }})({clock})")
    expect(page).to_have_title("1/5 ▶ 5 min left · GRPO Studio", timeout=3_000)
    page.evaluate(f"(c => {{ c.dataset.drawn = String(Number(c.dataset.drawn) - 120000); }})({clock})")
    expect(page).to_have_title("1/5 ▶ 3 min left · GRPO Studio", timeout=3_000)
    page.evaluate("window.gsSlowMs = 6000")
    page.wait_for_timeout(1_500)  # the page load's own redraws, and a poll that began in front, settle
    redraws.clear()

    runs.append_jsonl(titled_run / "metrics.jsonl", {**metrics_line(2), "max_steps": 5})
    runs.write_status(titled_run, "finished", ended_at=time.time())
    expect(page).to_have_title("✓ Finished · GRPO Studio", timeout=14_000)
    assert page.locator("#progress .gs-progress").get_attribute("data-state") == "finished"
    assert page.evaluate("window.gsNotes") == [[f"✓ Finished: {titled_run.name}", "Step 2 of 5. GRPO Studio"]]
    expect(bell).to_have_count(0)  # no bell on a run that has ended

    # The queue starts the next run after it: the page, still hidden, moves to that run at its next polls.
    following = running_run("titled-next", max_steps=5, steps=0)
    next_run = next(following)
    kept = run_queue.read()
    try:
        queue = run_queue.read()
        queue.started.append({"run": next_run.name, "after": titled_run.name, "at": time.time(), "label": "next"})
        run_queue.write(queue)
        expect(page.locator("#run-select input")).to_have_value(next_run.name, timeout=14_000)
        # its header comes in the same redraw, not a slowed poll later
        expect(page).to_have_title("0/5 ▶ GRPO Studio", timeout=2_000)
        header = page.evaluate("""window.gradio_config.components
            .find((c) => c.props && c.props.elem_id === 'header-refresh').id""")
        assert redraws and all(event == header and parts <= {"progress", "queue"} for event, parts in redraws), \
            redraws  # the charts wait...

        page.evaluate("delete document.hidden; window.gsSlowMs = 0")  # ...until the page is in front again
        for _ in range(20):
            if any("charts" in parts for _, parts in redraws):
                break
            page.wait_for_timeout(500)
        assert any("charts" in parts for _, parts in redraws), redraws
        assert len(page.evaluate("window.gsNotes")) == 1  # moving to the queue's next run, after the end: no more
        expect(bell).to_have_text("✓ Notifying")  # the choice holds for the next run, until pressed again
        bell.click()
        expect(bell).to_have_text("Notify me")
        expect(bell).to_have_attribute("title", NOTIFY_TIP)  # its hover says what it does again

        # On again; the window loses the focus and the run fails: the notification says why.
        bell.click()
        expect(bell).to_have_text("✓ Notifying")
        page.evaluate("document.hasFocus = () => false")
        runs.write_status(next_run, "failed", error="CUDA out of memory: turn on gradient checkpointing",
                          ended_at=time.time())
        expect(page).to_have_title("✗ Failed · GRPO Studio", timeout=6_000)
        assert page.evaluate("window.gsNotes")[1:] == [[
            f"✗ Failed: {next_run.name}",
            "CUDA out of memory: turn on gradient checkpointing. Step 0 of 5. GRPO Studio"]]
    finally:
        run_queue.write(kept)  # later tests read the queue's record of the runs it started
        next(following, None)
