"""Chat through gradio_client: streamed replies, and two sessions at once keep their own histories."""

import concurrent.futures
import shutil

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
    try:
        client.predict(base, base, api_name="/load_choices")
        hist_a, _, _ = client.predict("Hello?", [], [], "run:broken-model-run", base, False, "", 8, 0.0, 1.0,
                                      api_name="/respond")
    finally:
        shutil.rmtree(run)  # left in the session's data folder, it would be a later test's default model
    from ui.chat import content_text

    reply = content_text(hist_a[-1]["content"])
    assert reply.startswith("⚠️ Could not load") and "no-such-architecture" in reply
    from pipeline.training.generate import is_error_reply

    assert is_error_reply(hist_a[-1]), hist_a[-1]  # the mark survives Gradio's round trip (scoring skips it)
    updates, hist_a, _ = _chat(url, "Name one fruit.")
    assert content_text(hist_a[-1]["content"]).strip() and not content_text(hist_a[-1]["content"]).startswith("⚠️")


def test_a_reply_that_ends_first_does_not_cut_the_one_beside_it(bundled_model_dir):
    """Side by side (Chat) and tuned beside base (RAG), two replies stream with one shared Stop. A short reply
    ending must not end the long one: the long reply, greedy, is the same whether it streams alone or beside
    one that ends after 2 tokens."""
    import threading

    from pipeline.training.generate import ModelCache, stream_chat

    model, tok = ModelCache().get("bundled/SmolLM2-135M-Instruct")
    messages = [{"role": "user", "content": "Tell me a long story about a dragon."}]

    def reply(max_new_tokens, stop, out, key):
        for text in stream_chat(model, tok, messages, max_new_tokens=max_new_tokens, temperature=0.0, stop=stop):
            out[key] = text

    alone: dict = {}
    reply(32, threading.Event(), alone, "long")
    shared, out = threading.Event(), {}
    threads = [threading.Thread(target=reply, args=(n, shared, out, key)) for key, n in (("short", 2), ("long", 32))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(out["short"]) < len(alone["long"])
    assert out["long"] == alone["long"], out
    assert not shared.is_set()  # the caller's Stop is the caller's to set


def test_a_reply_with_no_text_says_so_and_stays_out_of_the_next_turn(url, tiny_model_dir):
    """A model that ends without a word (the two-layer random one, greedy, writes only newlines) gets a notice in
    its bubble instead of an empty one, marked so that scoring and the next turn's context leave it out. The reply
    beside it is the model's own."""
    from gradio_client import Client

    from pipeline.training.generate import EMPTY_REPLY, is_error_reply
    from ui.chat import _messages, content_text

    from .helpers import evaluable_run

    run_dir = evaluable_run("empty-reply", tiny_model_dir)
    base = "bundled/SmolLM2-135M-Instruct"
    try:
        client = Client(url, verbose=False)
        client.predict(base, base, api_name="/load_choices")  # the new run is among the choices
        hist_a, hist_b, _ = client.predict("Hello?", [], [], f"run:{run_dir.name}", base, True, "", 8, 0.0, 1.0,
                                           api_name="/respond")
    finally:
        shutil.rmtree(run_dir)  # a finished run would be every later test's default model
    assert EMPTY_REPLY in content_text(hist_a[-1]["content"]) and is_error_reply(hist_a[-1]), hist_a[-1]
    assert [m["role"] for m in _messages(hist_a, "")] == ["user"]  # the notice is not sent back as context
    beside = content_text(hist_b[-1]["content"])
    assert beside.strip() and EMPTY_REPLY not in beside and not is_error_reply(hist_b[-1]), hist_b[-1]


def test_a_message_over_the_models_context_is_refused_before_any_compute(url):
    """A pasted book: the reply says how many tokens it is and what the model reads, instead of holding the app's
    generation queue for minutes; the mark keeps it out of the next turn, and the next chat works."""
    from gradio_client import Client

    from pipeline.training.generate import is_error_reply
    from ui.chat import content_text

    client = Client(url, verbose=False)
    base = "bundled/SmolLM2-135M-Instruct"
    hist_a, _, _ = client.predict("word " * 9000, [], [], base, base, False, "", 24, 0.0, 1.0, api_name="/respond")
    reply = content_text(hist_a[-1]["content"])
    assert reply.startswith("⚠️ The prompt is ") and "more than the 8192 tokens this model reads at once" in reply
    assert is_error_reply(hist_a[-1]), hist_a[-1]
    updates, hist_a, _ = _chat(url, "Name one fruit.")
    assert content_text(hist_a[-1]["content"]).strip() and not content_text(hist_a[-1]["content"]).startswith("⚠️")
