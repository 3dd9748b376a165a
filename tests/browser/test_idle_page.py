"""An open page asks the browser for no frames while nothing happens, and a pending event's timer still ticks.

Gradio's status tracker leaves its timer loop running (a frame every frame, for as long as the page is open)
when the tracker is removed while pending, as the page's own loading indicator is: 5-6% of a core in
chromium on an idle page. ui/first_script.py stops such a loop. Each test counts the animation frames the
tracker's module asks for while no status on the page is pending: a counter put in before any of the page's
scripts, which the app's script wraps in turn, so only the requests it lets through are counted."""

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser]

COUNT_TRACKER_FRAMES = """(() => {
  const frame = window.requestAnimationFrame.bind(window);
  window.gsTrackerFrames = 0;
  window.requestAnimationFrame = function gsCount(callback) {
    // The request's caller, past this counter and the app's own wrapper (gsFrame) when that is in place.
    const lines = (new Error().stack || '').split('\\n');
    const caller = lines.slice(lines.findIndex((line) => line.includes('gsCount')) + 1)
      .find((line) => !line.includes('gsFrame')) || '';
    const pending = document.querySelector('[data-testid="status-tracker"] .progress-text');
    if (/statustracker/.test(caller) && !pending) window.gsTrackerFrames += 1;
    return frame(callback);
  };
})();"""


def tracker_frames(page, seconds: float) -> int:
    """The frames the status tracker asked for during `seconds` while no status was pending."""
    page.evaluate("window.gsTrackerFrames = 0")
    page.wait_for_timeout(int(seconds * 1000))
    return page.evaluate("window.gsTrackerFrames")


def test_the_app_page_asks_for_no_frames_while_it_waits(page, app_url):
    page.add_init_script(COUNT_TRACKER_FRAMES)
    page.goto(app_url)
    expect(page.locator("#run-select")).to_be_visible(timeout=30_000)
    page.wait_for_timeout(2_000)  # the page load's own events settle
    # The script is the first script in the page's head, so it runs before Gradio's modules. (Not the first element:
    # a chart's tooltip style goes in at the top of the head once a run's charts are drawn.)
    assert "gsFrame" in page.evaluate("document.head.querySelector('script').textContent")
    # Without it, the loading indicator's leaked loop asks for about 60 frames a second.
    assert tracker_frames(page, 3) == 0


def test_a_pending_events_timer_still_ticks_and_stops_after(browser):
    """A small app served with the app's options: an event that takes 3 s shows its elapsed time, counting
    up, and once it has finished the tracker asks for no more frames."""
    import time

    import gradio as gr

    import app
    from tests.integration.helpers import free_port

    def slow():
        time.sleep(3)
        return "done"

    with gr.Blocks() as demo:
        go = gr.Button("Go", elem_id="go")
        out = gr.Textbox(elem_id="out")
        go.click(slow, None, out)
    port = free_port()
    demo.queue().launch(server_port=port, prevent_thread_lock=True, quiet=True, app_kwargs=app.server_options())
    page = browser.new_page()
    try:
        page.add_init_script(COUNT_TRACKER_FRAMES)
        page.goto(f"http://127.0.0.1:{port}")
        expect(page.locator("#go")).to_be_visible(timeout=30_000)
        page.locator("#go").click()
        timer = page.locator("#out .progress-text")
        expect(timer).to_contain_text("processing", timeout=5_000)
        first = timer.text_content()
        page.wait_for_timeout(800)
        assert timer.text_content() != first, first  # the elapsed time moves
        expect(page.locator("#out textarea")).to_have_value("done", timeout=10_000)
        page.wait_for_timeout(500)
        assert tracker_frames(page, 2) == 0
    finally:
        page.close()
        demo.close()
