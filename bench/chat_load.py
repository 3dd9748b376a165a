"""Concurrent chat: N gradio_client sessions send a message to the bundled model at the same moment (and,
with --turns, go on with the conversation, each message carrying the session's history).

Prints p50/p95 time to first token (TTFT) and to the full reply, against one client alone measured in
the same run (the reference), plus how many replies completed and whether any history crossed over.

    python bench/chat_load.py [--clients 20] [--tokens 24] [--turns 1]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from report import p50_p95, save, scratch  # noqa: E402
from pipeline.training.generate import is_error_reply  # noqa: E402

MODEL = "bundled/SmolLM2-135M-Instruct"


def one_chat(url: str, index: int, tokens: int, turns: int = 1, model: str = MODEL, temperature: float = 0.0) -> dict:
    """One session of `turns` messages. The Chat tab keeps a conversation in the browser: each message is
    sent with the history the server returned last time, as the page does. Times the first streamed piece
    of each reply and its end, and checks after every turn that the history holds this session's own
    messages, in order, with its earlier replies unchanged (no cross-talk between sessions)."""
    from gradio_client import Client

    from ui.chat import content_text as _text  # Gradio 6 sends content back as [{"type": "text", ...}]

    # Twenty sessions open at once, each reading the app's API description first: on a busy machine the last
    # of those answers can take longer than httpx's 5 s default, which would fail a session before it chats.
    client = Client(url, verbose=False, httpx_kwargs={"timeout": 120})
    history: list = []
    prompts: list[str] = []
    replies: list[str] = []
    ttfts, totals, starts, ends = [], [], [], []
    crossed: list[str] = []  # anything in the history that is not this session's own conversation
    failed: list[str] = []   # empty replies or error messages
    for turn in range(1, turns + 1):
        prompt = (f"Session {index}, turn {turn}: name one animal that starts with the letter "
                  f"{chr(65 + (index + turn) % 26)}.")
        start = time.perf_counter()
        starts.append(start)
        job = client.submit(prompt, history, [], model, model, False, "", tokens, temperature, 1.0,
                            api_name="/respond")
        first = None
        for update in job:
            last = update[0][-1] if update[0] else {}
            if first is None and last.get("role") == "assistant" and _text(last.get("content")).strip():
                first = time.perf_counter() - start
        history, hist_b, _ = job.result()
        ends.append(time.perf_counter())
        totals.append(ends[-1] - start)
        ttfts.append(first if first is not None else totals[-1])
        prompts.append(prompt)
        users = [_text(m["content"]) for m in history if m["role"] == "user"]
        got = [_text(m["content"]) for m in history if m["role"] == "assistant"]
        reply = got[-1] if got and history[-1]["role"] == "assistant" else ""
        if users != prompts:
            crossed.append(f"turn {turn}: user messages {users}")
        if len(history) != 2 * turn or got[:-1] != replies:
            crossed.append(f"turn {turn}: {len(history)} messages, earlier replies {got[:-1]} (had {replies})")
        if hist_b:
            crossed.append(f"turn {turn}: model B history {hist_b} (side by side is off)")
        if not reply.strip() or is_error_reply(history[-1]):
            failed.append(f"turn {turn}: reply {reply!r}")
        replies.append(reply)
    return {"session": index, "ttft": ttfts[0], "total": totals[0], "ttfts": ttfts, "totals": totals,
            "starts": starts, "ends": ends, "own_history": not crossed, "completed": not failed,
            "problems": crossed + failed}


def run_load(url: str, clients: int, tokens: int, turns: int = 1, model: str = MODEL,
             temperature: float = 0.0) -> list[dict]:
    """`clients` sessions at once, each chatting with `model` (a Chat tab choice: a base model id or "run:NAME")."""
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        return list(pool.map(lambda i: one_chat(url, i, tokens, turns, model, temperature), range(clients)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--turns", type=int, default=1, help="messages per session, each sent with its history")
    a = ap.parse_args()
    os.environ.setdefault("GRPO_STUDIO_DATA", scratch("chat-load-"))
    from tests.integration.helpers import serve_app

    demo, url = serve_app()
    try:
        warm = one_chat(url, 0, tokens=a.tokens)  # loads the model once
        alone = [one_chat(url, i, a.tokens) for i in range(3)]
        t0 = time.perf_counter()
        results = run_load(url, a.clients, a.tokens, a.turns)
        wall = time.perf_counter() - t0
    finally:
        demo.close()
    ref50, _ = p50_p95([r["ttft"] for r in alone])
    t50, t95 = p50_p95([t for r in results for t in r["ttfts"]])
    d50, d95 = p50_p95([t for r in results for t in r["totals"]])
    print(f"{a.clients} concurrent chat sessions of {a.turns} message(s), bundled SmolLM2-135M, {a.tokens} new "
          "tokens each, 2 generations at a time (the chat queue)")
    print(f"  completed {sum(r['completed'] for r in results)}/{a.clients}, own history only "
          f"{sum(r['own_history'] for r in results)}/{a.clients}, wall {wall:.1f} s")
    print(f"  TTFT p50 {t50:.2f} s, p95 {t95:.2f} s; full reply p50 {d50:.2f} s, p95 {d95:.2f} s")
    print(f"  one client alone: TTFT p50 {ref50:.2f} s -> p50 ratio under load {t50 / ref50:.1f}x "
          f"(warm-up {warm['total']:.1f} s)")
    for r in results:
        for problem in r["problems"]:
            print(f"  session {r['session']}: {problem}")
    save("chat_load", {"clients": a.clients, "tokens": a.tokens, "turns": a.turns, "results": results,
                       "alone": alone, "wall_s": wall})
    return 0


if __name__ == "__main__":
    sys.exit(main())
