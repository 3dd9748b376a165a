"""Time to first token and tokens/s: the app's streaming path vs a plain model.generate, in one run.

    .venv/bin/python bench/chat.py [--tokens 64] [--repeats 7] [--rounds 2]

Both use the bundled SmolLM2-135M (fp32, CPU), the same chat prompt, greedy decoding and exactly
`--tokens` new tokens (min_new_tokens = max_new_tokens).
  app path   pipeline.training.generate.stream_chat (generate in a worker thread, TextIteratorStreamer)
  reference  model.generate(...) on the main thread, no streamer; first-token time = a 1-token generate
Each path is measured in its own worker process, alternating app/plain for --rounds rounds: in the app
the web server's main thread never runs torch, and mixing both paths in one process puts two OpenMP
thread teams on 2 cores (that in-process figure is printed too, for comparison).
Target: tokens/s ratio app/reference >= 0.9.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report import save

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = [{"role": "user", "content": "Summarize in one sentence: the town library reopened on Monday after a "
                                      "two-year renovation that added a children's wing and a rooftop garden."}]


def worker(kind: str, tokens: int, repeats: int) -> dict:
    """Measure one path (or both interleaved, kind='mixed') in this process."""
    import torch

    from pipeline.training.generate import StreamStats, stream_chat
    from pipeline.models.loading import BUNDLED_MODEL_ID, load_model

    model, tok = load_model(BUNDLED_MODEL_ID)
    enc = tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    original = model.generate
    common = dict(do_sample=False, temperature=None, top_p=None, top_k=None, pad_token_id=tok.pad_token_id)

    def plain(n: int) -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = original(**enc, max_new_tokens=n, min_new_tokens=n, **common)
        assert out.shape[1] - enc["input_ids"].shape[1] == n
        return time.perf_counter() - t0

    def pinned(*args, **kwargs):  # the app path with a fixed token count
        kwargs["min_new_tokens"] = kwargs["max_new_tokens"]
        return original(*args, **kwargs)

    def app() -> StreamStats:
        stats = StreamStats()
        model.generate = pinned
        try:
            for _ in stream_chat(model, tok, PROMPT, max_new_tokens=tokens, temperature=0.0, stats=stats):
                pass
        finally:
            model.generate = original
        return stats

    out: dict = {"app_ttft": [], "app_tps": [], "ref_ttft": [], "ref_tps": []}
    if kind in ("app", "mixed"):
        app()  # warm-up
    if kind in ("plain", "mixed"):
        plain(4)
    for _ in range(repeats):
        if kind in ("app", "mixed"):
            s = app()
            out["app_ttft"].append(s.first_token_s)
            out["app_tps"].append(tokens / s.seconds)
        if kind in ("plain", "mixed"):
            out["ref_ttft"].append(plain(1))
            out["ref_tps"].append(tokens / plain(tokens))
    return out


def run_worker(kind: str, a) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", kind, "--tokens", str(a.tokens),
                           "--repeats", str(a.repeats)], cwd=ROOT, capture_output=True, text=True, check=True)
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--worker", choices=["app", "plain", "mixed"])
    a = ap.parse_args()
    if a.worker:
        print("RESULT " + json.dumps(worker(a.worker, a.tokens, a.repeats)))
        return 0

    merged: dict = {"app_ttft": [], "app_tps": [], "ref_ttft": [], "ref_tps": []}
    for _ in range(a.rounds):
        for kind in ("app", "plain"):
            for key, values in run_worker(kind, a).items():
                merged[key].extend(values)
    mixed = run_worker("mixed", a)
    med = statistics.median
    ratio = med(merged["app_tps"]) / med(merged["ref_tps"])
    mixed_ratio = med(mixed["app_tps"]) / med(mixed["ref_tps"])
    print(f"chat generation: bundled SmolLM2-135M, CPU fp32, greedy, {a.tokens} new tokens, "
          f"{a.rounds} x {a.repeats} repeats per path, medians")
    print(f"{'':30}{'TTFT s':>9}{'tok/s':>9}")
    print(f"{'app (stream_chat)':30}{med(merged['app_ttft']):9.3f}{med(merged['app_tps']):9.1f}")
    print(f"{'plain model.generate':30}{med(merged['ref_ttft']):9.3f}{med(merged['ref_tps']):9.1f}")
    print(f"tokens/s ratio app/plain: {ratio:.3f} (target >= 0.9)")
    print(f"both paths interleaved in one process: app {med(mixed['app_tps']):.1f} vs plain "
          f"{med(mixed['ref_tps']):.1f} tok/s, ratio {mixed_ratio:.3f}")
    save("chat", {"separate": merged, "mixed": mixed, "ratio": ratio, "mixed_ratio": mixed_ratio})
    return 0


if __name__ == "__main__":
    sys.exit(main())
