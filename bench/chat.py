"""Time to first token and tokens/s: the app's streaming path vs a plain model.generate, same run.

    .venv/bin/python bench/chat.py [--tokens 64] [--repeats 5]

Both use the bundled SmolLM2-135M (fp32, CPU), the same chat prompt, greedy decoding and exactly
`--tokens` new tokens (min_new_tokens = max_new_tokens), alternating so drift hits both equally.
  app path   pipeline.generate.stream_chat (TextIteratorStreamer in a worker thread, stop via the streamer)
  reference  model.generate(...) with no streamer; its first-token time is a 1-token generate
Target: tokens/s ratio app/reference >= 0.9.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = [{"role": "user", "content": "Summarize in one sentence: the town library reopened on Monday after a "
                                      "two-year renovation that added a children's wing and a rooftop garden."}]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args()

    import torch

    from pipeline.generate import StreamStats, stream_chat
    from pipeline.models import BUNDLED_MODEL_ID, load_model

    model, tok = load_model(BUNDLED_MODEL_ID)
    enc = tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    common = dict(do_sample=False, temperature=None, top_p=None, top_k=None, pad_token_id=tok.pad_token_id)

    def plain(n: int) -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=n, min_new_tokens=n, **common)
        assert out.shape[1] - enc["input_ids"].shape[1] == n
        return time.perf_counter() - t0

    # The app path with a fixed token count: stream_chat passes generation kwargs through _sampling, so
    # pin min_new_tokens by wrapping generate for the duration of the benchmark.
    original = model.generate

    def pinned(*args, **kwargs):
        kwargs["min_new_tokens"] = kwargs["max_new_tokens"]
        return original(*args, **kwargs)

    def app() -> StreamStats:
        stats = StreamStats()
        model.generate = pinned
        try:
            for _ in stream_chat(model, tok, PROMPT, max_new_tokens=a.tokens, temperature=0.0, stats=stats):
                pass
        finally:
            model.generate = original
        return stats

    def plain_in_thread(n: int) -> float:
        # What a non-streaming Gradio handler does: generate() off the main thread.
        box = []
        t = threading.Thread(target=lambda: box.append(plain(n)))
        t.start()
        t.join()
        return box[0]

    plain(4), app()  # warm-up
    app_ttft, app_tps, ref_ttft, ref_tps, thr_tps = [], [], [], [], []
    for _ in range(a.repeats):
        s = app()
        app_ttft.append(s.first_token_s)
        app_tps.append(a.tokens / s.seconds)
        ref_ttft.append(plain(1))
        ref_tps.append(a.tokens / plain(a.tokens))
        thr_tps.append(a.tokens / plain_in_thread(a.tokens))
    med = statistics.median
    ratio = med(app_tps) / med(ref_tps)
    print(f"chat generation: bundled SmolLM2-135M, CPU fp32, greedy, {a.tokens} new tokens, {a.repeats} repeats")
    print(f"{'':22}{'TTFT s':>9}{'tok/s':>9}")
    print(f"{'app (stream_chat)':22}{med(app_ttft):9.3f}{med(app_tps):9.1f}")
    print(f"{'plain model.generate':22}{med(ref_ttft):9.3f}{med(ref_tps):9.1f}")
    print(f"{'plain, worker thread':22}{'':>9}{med(thr_tps):9.1f}")
    print(f"tokens/s ratio app/plain: {ratio:.3f} (target >= 0.9); app/plain-in-a-thread: "
          f"{med(app_tps) / med(thr_tps):.3f}")
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "chat.json").write_text(json.dumps({"app_ttft": app_ttft, "app_tps": app_tps, "ref_ttft": ref_ttft,
                                               "ref_tps": ref_tps, "thread_tps": thr_tps, "ratio": ratio},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
