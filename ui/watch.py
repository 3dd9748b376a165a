"""The page's one change detector. Once a second, while a view that follows the run files is on screen and
the browser tab is in front, the page asks the app for the stamps of pipeline/run_folder/live.py (one small HTTP call
to a queue-free endpoint, no Gradio event) and presses a view's hidden Refresh button only when a part it
draws has a new stamp; the handler is told which parts moved and redraws only those. A Gradio event costs
the page work for each output it names, and a re-sent plot is drawn again: three timers a second with twenty
outputs kept a quarter of a core busy in chromium, and the trainer beside it lost far more than that
(bench/watch_cost.py). Between two steps, watching a run costs one fetch a second; it names the page's own
Gradio session, so the app answers it from the page's session state instead of building a new one each time.

A view may name background parts: those it keeps following, at most every BACKGROUND_S seconds, while it is off
screen (another tab of the app) or the browser tab is behind another, through a button of their own whose event names
only their outputs (an event costs the page work for every output it names, whichever it redraws). The Train
tab's run header is one, so the page's title can say how the run stands (ui/page_title.py) while the user is
elsewhere, and so is its queue, so the page moves on to the run the queue starts next. The view's other parts wait
and redraw once it is on screen again. The background poll is due by the clock, not by a count of polls: a browser
slows the timers of a page that has been behind others for minutes to about one a minute, and each of those polls
is then a background one."""

from __future__ import annotations

import json

import gradio as gr
from gradio.context import get_blocks_context

from pipeline.run_folder import live

ENDPOINT = "live_stamps"
BACKGROUND_S = 5  # a view's background parts are checked at most this often while it is out of sight


def live_stamps(run_name: str | None, action_name: str | None) -> dict[str, str]:
    """What the page's poll asks for every second: a stamp per part of the live views (pipeline/run_folder/live.py) for
    the run the Train tab shows and the run picked in its Runs panel."""
    return live.stamps(run_name or None, action_name or None)


# Installed once per page; each view adds itself to `window.gsWatch.views`. `take(button)` hands the parts
# that moved since that button's last event to the event (its js), and forgets them.
POLL_JS = """() => {
  const view = %(view)s;
  const watch = window.gsWatch = window.gsWatch || {views: [], moved: {}};
  if (!watch.views.some((v) => v.button === view.button)) watch.views.push(view);
  if (watch.timer) return;
  watch.take = (button) => {
    const moved = [...(watch.moved[button] || [])];
    watch.moved[button] = new Set();
    return moved.join(' ');
  };
  const api = new URL('gradio_api/run/%(endpoint)s', document.baseURI);
  const ownSession = 'watch-' + Math.random().toString(36).slice(2);  // until Gradio has set the page's
  const value = (id) => (document.querySelector(id + ' input') || {}).value || null;
  const onScreen = (id) => { const el = document.getElementById(id); return !!el && el.offsetParent !== null; };
  let busy = false, lastBackground = 0;
  watch.timer = setInterval(async () => {
    // A view on screen in a tab in front follows all its parts; any other, its background parts, now and then.
    const now = Date.now();
    const background = now - lastBackground >= %(background_ms)d;
    const views = watch.views.map((v) => (!document.hidden && onScreen(v.show) ? {v, parts: v.parts, button: v.button}
      : {v, parts: background ? v.background : [], button: v.backgroundButton}))
      .filter(({parts, button}) => parts.length && document.getElementById(button));
    if (busy || !views.length) return;
    if (background) lastBackground = now;
    busy = true;
    try {
      // The page's own Gradio session: a call without one makes Gradio build a new session, the config of
      // every component on the page, for each poll (about 50 ms of the app's CPU against 3).
      const session = window.__gradio_session_hash__ || ownSession;
      const reply = await fetch(api, {method: 'POST', headers: {'Content-Type': 'application/json'},
                                      body: JSON.stringify({data: [value('#run-select'), value('#action-run')],
                                                            session_hash: session})});
      const stamps = reply.ok ? (await reply.json()).data[0] : null;
      if (!stamps) return;
      for (const {v, parts, button} of views) {
        const drawn = v.drawn = v.drawn || {};  // each view's own: two views may follow one part
        const moved = parts.filter((part) => stamps[part] !== drawn[part]);
        moved.forEach((part) => { drawn[part] = stamps[part]; });
        // A view that starts empty (drawFirst false) only takes note of the stamps it first sees.
        const first = !v.seen;
        v.seen = true;
        if (!moved.length || (first && !v.drawFirst)) continue;
        const pending = watch.moved[button] = watch.moved[button] || new Set();
        moved.forEach((part) => pending.add(part));
        document.getElementById(button).click();
      }
    } catch (err) {
      // the app restarting: the next second tries again
    } finally {
      busy = false;
    }
  }, %(every_ms)d);
}"""


def follow(show: str, button: str, parts: tuple[str, ...], draw_first: bool = True,
           background: tuple[str, ...] = (), background_button: str | None = None) -> str:
    """A view that follows the run files: the page script that presses the hidden button `button` (an elem_id)
    when one of `parts` (pipeline/run_folder/live.py: PARTS) moved while the element `show` is on screen. With
    `draw_first` the first stamps seen draw the view (a page load shows the run); without, the view waits for
    a change. `background` (some of `parts`) are followed while the view is off screen, at most every
    BACKGROUND_S seconds, by pressing `background_button` (an event that draws those parts alone). Registers the
    poll's endpoint in the Blocks being built, once.

    >>> follow("progress", "live-refresh", ("progress", "log"), background=("progress",))
    Traceback (most recent call last):
    ValueError: A view with background parts needs a background_button that draws them.
    """
    if not set(background) <= set(parts):
        raise ValueError(f"Background parts {sorted(set(background) - set(parts))} are not among the view's parts.")
    if background and not background_button:
        raise ValueError("A view with background parts needs a background_button that draws them.")
    unknown = set(parts) - set(live.PARTS)
    if unknown:
        raise ValueError(f"Unknown live view parts {sorted(unknown)}; the parts are {list(live.PARTS)}.")
    blocks = get_blocks_context()
    if blocks is not None and not any(getattr(fn, "api_name", None) == ENDPOINT for fn in blocks.fns.values()):
        gr.api(live_stamps, api_name=ENDPOINT, queue=False)
    view = {"show": show, "button": button, "parts": list(parts), "drawFirst": draw_first,
            "background": list(background), "backgroundButton": background_button}
    return POLL_JS % {"view": json.dumps(view), "endpoint": ENDPOINT, "every_ms": int(1000 * live.POLL_S),
                      "background_ms": int(1000 * BACKGROUND_S)}


def take_moved_js(button: str, inputs: int) -> str:
    """An event's js that hands the parts that moved (the poll's, for `button`) to its last input, in place of
    that input's value; with no poll on the page, the input's own value stands."""
    return (f"(...inputs) => [...inputs.slice(0, {inputs - 1}), window.gsWatch && window.gsWatch.take "
            f"? window.gsWatch.take({json.dumps(button)}) : inputs[{inputs - 1}]]")
