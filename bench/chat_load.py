"""Concurrent chat: N gradio_client sessions send a message to the bundled model at the same moment.

Prints p50/p95 time to first token (TTFT) and to the full reply, against one client alone measured in
the same run (the reference), plus how many replies completed and whether any history crossed over.

    python bench/chat_load.py [--clients 20] [--tokens 24]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from report import p50_p95, save  # noqa: E402

MODEL = "bundled/SmolLM2-135M-Instruct"


def one_chat(url: str, index: int, tokens: int) -> dict:
    """One session: send a message, time the first streamed piece of the reply and the end."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    prompt = f"Session {index}: name one animal that starts with the letter {chr(65 + index % 26)}."
    start = time.perf_counter()
    job = client.submit(prompt, [], [], MODEL, MODEL, False, "", tokens, 0.0, 1.0, api_name="/respond")
    first = None
    for update in job:
        hist_a = update[0]
        if first is None and hist_a and hist_a[-1]["role"] == "assistant" and str(hist_a[-1]["content"]).strip():
            first = time.perf_counter() - start
    hist_a, _, _ = job.result()
    total = time.perf_counter() - start
    users = [str(m["content"]) for m in hist_a if m["role"] == "user"]
    reply = str(hist_a[-1]["content"]) if hist_a and hist_a[-1]["role"] == "assistant" else ""
    return {"ttft": first if first is not None else total, "total": total,
            "own_history": len(users) == 1 and f"Session {index}:" in users[0],
            "completed": bool(reply.strip()) and not reply.startswith("⚠️")}


def run_load(url: str, clients: int, tokens: int) -> list[dict]:
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        return list(pool.map(lambda i: one_chat(url, i, tokens), range(clients)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=24)
    a = ap.parse_args()
    os.environ.setdefault("GRPO_STUDIO_DATA", str(Path(tempfile.mkdtemp(prefix="chat-load-"))))
    from tests.integration.helpers import serve_app

    demo, url = serve_app()
    try:
        warm = one_chat(url, 0, tokens=a.tokens)  # loads the model once
        alone = [one_chat(url, i, a.tokens) for i in range(3)]
        t0 = time.perf_counter()
        results = run_load(url, a.clients, a.tokens)
        wall = time.perf_counter() - t0
    finally:
        demo.close()
    ref50, _ = p50_p95([r["ttft"] for r in alone])
    t50, t95 = p50_p95([r["ttft"] for r in results])
    d50, d95 = p50_p95([r["total"] for r in results])
    print(f"{a.clients} concurrent chat sessions, bundled SmolLM2-135M, {a.tokens} new tokens each, "
          "2 generations at a time (the chat queue)")
    print(f"  completed {sum(r['completed'] for r in results)}/{a.clients}, own history only "
          f"{sum(r['own_history'] for r in results)}/{a.clients}, wall {wall:.1f} s")
    print(f"  TTFT p50 {t50:.2f} s, p95 {t95:.2f} s; full reply p50 {d50:.2f} s, p95 {d95:.2f} s")
    print(f"  one client alone: TTFT p50 {ref50:.2f} s -> p50 ratio under load {t50 / ref50:.1f}x "
          f"(warm-up {warm['total']:.1f} s)")
    save("chat_load", {"clients": a.clients, "tokens": a.tokens, "results": results, "alone": alone, "wall_s": wall})
    return 0


if __name__ == "__main__":
    sys.exit(main())
