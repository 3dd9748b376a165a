"""Chat through gradio_client: streamed replies, and two sessions at once keep their own histories."""

import concurrent.futures

import pytest

from .helpers import serve_app

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def url(bundled_model_dir):
    demo, local_url = serve_app()
    yield local_url
    demo.close()


def _chat(url, prompt):
    from gradio_client import Client

    client = Client(url, verbose=False)
    job = client.submit(prompt, [], [], "bundled/SmolLM2-135M-Instruct", "bundled/SmolLM2-135M-Instruct",
                        False, "", 24, 0.0, 1.0, api_name="/respond")
    updates = list(job)
    hist_a, hist_b, _ = job.result()
    return updates, hist_a, hist_b


def test_reply_streams_and_sessions_stay_apart(url):
    prompts = ["Name one colour of the sky.", "Say hello to a cat."]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda p: _chat(url, p), prompts))
    for prompt, (updates, hist_a, hist_b) in zip(prompts, results):
        assert len(updates) > 3  # user echo, then the reply piece by piece
        users = [m["content"] for m in hist_a if m["role"] == "user"]
        assert len(users) == 1 and prompt in str(users[0])
        reply = [m for m in hist_a if m["role"] == "assistant"][-1]
        assert str(reply["content"]).strip() and "⚠️" not in str(reply["content"])
        assert hist_b == []


def test_a_broken_model_gets_a_message_and_the_app_keeps_serving(url):
    """A run whose merged model is garbage: the chat says why, and the next chat still works."""
    from gradio_client import Client

    from pipeline.run_folder import runs

    run = runs.runs_dir() / "broken-model-run"
    (run / "merged").mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text('{"model": "bundled/SmolLM2-135M-Instruct"}')
    (run / "merged" / "config.json").write_text('{"model_type": "no-such-architecture"}')
    client = Client(url, verbose=False)
    base = "bundled/SmolLM2-135M-Instruct"
    client.predict(base, base, api_name="/load_choices")
    hist_a, _, _ = client.predict("Hello?", [], [], "run:broken-model-run", base, False, "", 8, 0.0, 1.0,
                                  api_name="/respond")
    from ui.chat import content_text

    reply = content_text(hist_a[-1]["content"])
    assert reply.startswith("⚠️ Could not load") and "no-such-architecture" in reply
    from pipeline.training.generate import is_error_reply

    assert is_error_reply(hist_a[-1]), hist_a[-1]  # the mark survives Gradio's round trip (scoring skips it)
    updates, hist_a, _ = _chat(url, "Name one fruit.")
    assert content_text(hist_a[-1]["content"]).strip() and not content_text(hist_a[-1]["content"]).startswith("⚠️")
