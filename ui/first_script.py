"""A script that runs first on every page the app serves, before any of Gradio's, and the ASGI middleware
that puts it at the top of the page's <head>.

Gradio's status tracker runs a timer loop (a request for the next animation frame, every frame) while its
component's event is pending, and stops it when the status changes. A tracker removed while pending (the
page's own "Loading..." indicator, once the app has loaded) never sees that change, so its loop runs for as
long as the page is open: the browser draws sixty frames a second of nothing, 5-6% of a core in chromium's
renderer on an idle page, taken from the trainer beside it on a small CPU (bench/watch_cost.py --idle). The
script lets a tracker's loop go on only while some tracker on the page shows a pending status, so a live
timer ticks as before and a leaked one stops. Gradio's module keeps the requestAnimationFrame it found when
it loaded, so the script must run before that: Blocks(head=...) is added after the app has loaded."""

from __future__ import annotations

SCRIPT = """(() => {
  const frame = window.requestAnimationFrame.bind(window);
  const TRACKER = /statustracker[^/]*\\.js/;  // Gradio's status tracker module
  const PENDING = '[data-testid="status-tracker"] .progress-text';  // drawn only while a status is pending
  let inTrackerFrame = false;
  window.requestAnimationFrame = function gsFrame(callback) {
    const lines = (new Error().stack || '').split('\\n');
    const caller = lines[lines.findIndex((line) => line.includes('gsFrame')) + 1] || '';
    if (!TRACKER.test(caller)) return frame(callback);
    // The tracker asking again from inside its own frame is its timer loop: dropped when nothing is pending.
    if (inTrackerFrame && !document.querySelector(PENDING)) return 0;
    return frame((time) => {
      inTrackerFrame = true;
      try { callback(time); } finally { inTrackerFrame = false; }
    });
  };
})();"""

HEAD = b"<head>"


def with_first_script(html: bytes, script: str = SCRIPT) -> bytes:
    """The page with `script` as the first element of its <head>; a page without one is returned as it is.

    >>> with_first_script(b"<html><head><title>t</title></head></html>", "go()")
    b'<html><head><script>go()</script><title>t</title></head></html>'
    >>> with_first_script(b"not a page", "go()")
    b'not a page'
    """
    at = html.find(HEAD)
    if at < 0:
        return html
    at += len(HEAD)
    return html[:at] + f"<script>{script}</script>".encode() + html[at:]


class FirstScript:
    """ASGI middleware: every HTML page a GET returns gets SCRIPT first in its <head> (its Content-Length
    follows); any other response passes through untouched, streamed as it comes."""

    def __init__(self, app, script: str = SCRIPT):
        self.app = app
        self.script = script

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        held: dict | None = None  # an HTML page's start message, sent once its whole body is here
        body: list[bytes] = []

        async def send_page(message):
            nonlocal held
            if message["type"] == "http.response.start" and _is_plain_html(message.get("headers", [])):
                held = message
                return
            if held is None:
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            page = with_first_script(b"".join(body), self.script)
            headers = [(k, v) for k, v in held.get("headers", []) if k.lower() != b"content-length"]
            await send({**held, "headers": [*headers, (b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, send_page)


def _is_plain_html(headers) -> bool:
    """An uncompressed HTML body, the only kind the script is put into."""
    values = {k.lower(): v for k, v in headers}
    return values.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in values
