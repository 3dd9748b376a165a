"""The middleware that puts the app's first script into its pages: HTML pages get it at the top of <head>
with a Content-Length that matches; every other response passes through as it was sent."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

from ui.first_script import FirstScript, with_first_script

PAGE = b"<!doctype html><html><head><meta charset='utf-8'></head><body>app</body></html>"


def serve(headers, chunks, method="GET", script="go()"):
    """What a client receives from FirstScript around an app that answers with `headers` and body `chunks`."""

    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})

    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": method, "path": "/", "headers": []}
    # In a thread of its own: a test before this one on the same worker may have left an event loop running.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, FirstScript(inner, script)(scope, receive, send)).result()
    return sent


def test_an_html_page_gets_the_script_first_in_its_head_and_a_matching_length():
    sent = serve([(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(PAGE)).encode())],
                 [PAGE[:20], PAGE[20:]])
    start, *bodies = sent
    body = b"".join(m["body"] for m in bodies)
    assert body == PAGE.replace(b"<head>", b"<head><script>go()</script>")
    assert dict(start["headers"])[b"content-length"] == str(len(body)).encode()
    assert [k for k, _ in start["headers"]].count(b"content-length") == 1
    assert start["status"] == 200


def test_other_responses_pass_through_as_sent():
    json_chunks = [b'{"a":', b" 1}"]
    sent = serve([(b"content-type", b"application/json")], json_chunks)
    assert [m.get("body") for m in sent[1:]] == json_chunks  # streamed, chunk by chunk
    # A compressed page, a POST, and a page with no <head> are left as they are.
    gzipped = [(b"content-type", b"text/html"), (b"content-encoding", b"gzip")]
    assert serve(gzipped, [b"\x1f\x8b..."])[1]["body"] == b"\x1f\x8b..."
    assert serve([(b"content-type", b"text/html")], [PAGE], method="POST")[1]["body"] == PAGE
    assert serve([(b"content-type", b"text/html")], [b"<p>no head</p>"])[1]["body"] == b"<p>no head</p>"


def test_the_script_is_the_first_thing_in_the_head_of_gradios_own_page():
    """Gradio's page template, as this Gradio ships it: the script lands before its first script."""
    from importlib.util import find_spec
    from pathlib import Path

    template = (Path(find_spec("gradio").origin).parent / "templates" / "frontend" / "index.html").read_bytes()
    page = with_first_script(template, "go()")
    head = page[page.index(b"<head>"):]
    assert head.index(b"<script>go()</script>") < head.index(b"<script", len(b"<head><script>go()</script>"))
