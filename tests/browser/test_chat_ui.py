"""Chat in the browser: a reply streams in, side by side shows two replies, a reply gets scored; a Hub token
typed for a push is kept out of the browser's storage and the app's log."""

import json
import re
import time

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, set_number_in_fold

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_stream_side_by_side_and_score(page, app_url):
    page.goto(app_url)
    page.get_by_role("tab", name="Chat").click()
    expect(page.locator("#chat-model-a input")).not_to_have_value("", timeout=30_000)
    page.locator("#chat-side input").check()
    expect(page.locator("#chat-b")).to_be_visible()
    # Short replies, as a user sets them under Generation settings: two models share the CPU.
    set_number_in_fold(page, "Generation settings", "chat-max-tokens", "40")
    page.locator("#chat-input textarea").fill("Explain in two sentences why bread dough rises.")
    page.locator("#chat-send").click()

    # Streaming: the reply in A is seen at several growing lengths before it is complete.
    bot = page.locator("#chat-a .message.bot, #chat-a [data-testid=bot]").last
    expect(bot).to_be_visible(timeout=120_000)
    lengths = []
    deadline = time.time() + 180
    while time.time() < deadline:
        text = bot.inner_text().strip()
        if text and (not lengths or len(text) != lengths[-1]):
            lengths.append(len(text))
        if len(lengths) >= 3:
            break
        time.sleep(0.1)
    assert len(lengths) >= 3 and lengths == sorted(lengths), lengths
    page.screenshot(path=str(ARTIFACTS / "chat-01-streaming.png"), full_page=True)

    bot_b = page.locator("#chat-b .message.bot, #chat-b [data-testid=bot]").last
    expect(bot_b).to_have_text(re.compile(r"\w{3}"), timeout=180_000)
    # Let both replies finish (40 tokens at most): their text holds still for a second.
    still, last, deadline = 0, None, time.time() + 60
    while still < 10 and time.time() < deadline:
        now = (bot.inner_text(), bot_b.inner_text())
        still = still + 1 if now == last else 0
        last = now
        time.sleep(0.1)
    page.locator("#chat-score").click()
    scores = page.locator("#chat-scores")
    expect(scores).to_contain_text("A (", timeout=30_000)
    expect(scores).to_contain_text("B (")
    expect(scores).to_contain_text("length_target")
    expect(scores).to_contain_text("weighted total")
    page.screenshot(path=str(ARTIFACTS / "chat-02-scored.png"), full_page=True)

    # Push to the Hub with a token: Gradio keeps the inputs of a public event in its run history, in the
    # browser's localStorage; the push is a private event, so the token is never stored.
    page.get_by_text("Export a run").click()
    # Before an export: what it makes, and no empty download or code boxes.
    expect(page.locator("#chat-export-msg")).to_contain_text("Pick a tuned run or checkpoint as Model A")
    expect(page.locator("#chat-export-files")).to_be_hidden()
    expect(page.locator("#chat-export-code")).to_be_hidden()
    # A base model has no merged model to write as GGUF: the panel says what to pick, and shows no download.
    page.locator("#chat-gguf").click()
    expect(page.locator("#chat-export-msg")).to_contain_text("Pick a run's tuned model", timeout=30_000)
    expect(page.locator("#chat-export-files")).to_be_hidden()
    expect(page.locator("#chat-gguf-code")).to_be_hidden()
    page.get_by_label("Hub repo id").fill("someone/studio-test")
    page.get_by_label("Hub token").fill(FAKE_TOKEN)
    page.get_by_role("button", name="Push to hub").click()
    expect(page.locator("#chat-push-msg")).to_contain_text(re.compile(r"\w"), timeout=30_000)  # offline: refused
    stored = page.evaluate("JSON.stringify(localStorage) + JSON.stringify(sessionStorage)")
    assert "bread dough rises" in stored  # the run history is on: the chat message above was kept
    assert FAKE_TOKEN not in stored
    port = app_url.rsplit(":", 1)[1]
    assert FAKE_TOKEN not in (ARTIFACTS / f"app-{port}.log").read_text(errors="replace")


FAKE_TOKEN = "hf_studioFakeToken1234567890"


def test_model_as_run_brings_its_held_out_prompts_and_its_own_base_as_model_b(page, app_url, bundled_model_dir,
                                                                           tiny_model_dir):
    """With a run as model A, its held-out prompts (never trained on, written as in training) are offered under
    the examples, one click from the box, and side by side starts model B on the model the run started from (here
    a local folder, not the bundled model). A base model as A has no held-out prompts: the row goes."""
    from tests.integration.helpers import evaluable_run

    run_dir = evaluable_run("chat-held-out", bundled_model_dir, held_out=3)
    cfg = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**cfg, "model": str(tiny_model_dir)}))
    rows = json.loads((run_dir / "eval_prompts.json").read_text())
    # The second prompt comes as the arithmetic prompts do: a system prompt and a worked example before it.
    shot = [{"role": "user", "content": "Calculate 12 + 7"}, {"role": "assistant", "content": "<answer>19</answer>"}]
    rows[1]["prompt"] = [{"role": "system", "content": "Give only the final number inside <answer></answer>."},
                         *shot, {"role": "user", "content": "Calculate 46 - 7"}]
    (run_dir / "eval_prompts.json").write_text(json.dumps(rows))
    prompts = [row["prompt"][-1]["content"] for row in rows]
    page.goto(app_url)
    page.get_by_role("tab", name="Chat").click()
    expect(page.locator("#chat-model-a input")).not_to_have_value("", timeout=30_000)  # the page load listed them
    page.locator("#chat-model-a input").click()
    page.get_by_role("option", name=f"{run_dir.name} (tuned, final)", exact=True).click()
    held_out = page.locator("#chat-held-out")
    expect(held_out).to_contain_text("never trained on", timeout=30_000)
    samples = held_out.locator("button")
    expect(samples).to_have_count(3)
    samples.first.click()
    expect(page.locator("#chat-input textarea")).to_have_value(prompts[0])
    held_out.screenshot(path=str(ARTIFACTS / "chat-03-held-out-prompts.png"))
    # A prompt trained with a system prompt and a worked example starts a conversation holding both.
    samples.nth(1).click()
    expect(page.locator("#chat-input textarea")).to_have_value("Calculate 46 - 7")
    expect(page.locator("#chat-a")).to_contain_text("Calculate 12 + 7")
    expect(page.locator("#chat-a")).to_contain_text("19")
    page.get_by_role("button", name="Generation settings").click()
    expect(page.locator("#chat-system textarea")).to_have_value("Give only the final number inside <answer></answer>.")
    page.locator("#chat-a").screenshot(path=str(ARTIFACTS / "chat-04-held-out-as-trained.png"))
    samples.first.click()  # one without them: a new conversation, with no system prompt
    expect(page.locator("#chat-system textarea")).to_have_value("")
    expect(page.locator("#chat-a")).not_to_contain_text("Calculate 12 + 7")
    page.locator("#chat-side input").check()
    expect(page.locator("#chat-model-b input")).to_have_value(f"{tiny_model_dir} (base of model A)",
                                                              timeout=30_000)
    page.locator("#chat-model-a input").click()
    page.get_by_role("option", name=re.compile("SmolLM2-135M-Instruct")).first.click()
    expect(held_out).to_be_hidden(timeout=30_000)
