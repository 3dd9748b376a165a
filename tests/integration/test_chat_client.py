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
