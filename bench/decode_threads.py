"""Token-by-token decoding on the CPU with 1 thread vs all cores, on a quiet machine and beside other work.

    .venv/bin/python bench/decode_threads.py [--rounds 3] [--load 0 15 40]

What the trainer's probes do (greedy, 4 held-out TL;DR prompts, 32 new tokens, bundled model with a fresh
LoRA adapter), timed with torch.set_num_threads(1) and with every core, alternated in each round. Beside
each: a background process that keeps one core busy in short bursts for the given share of the time (0 =
quiet; 15 is about what a browser page that redraws often and the app serving it took; 40 a busy
browser). It prints the median seconds and the ratio of all cores to 1 thread under each load.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

from report import burn, save, scratch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load", type=float, nargs="+", default=[0, 15, 40], help="background load, % of one core")
    args = ap.parse_args()

    os.environ.setdefault("GRPO_STUDIO_DATA", scratch("bench-decode-"))
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.setup.config import RunConfig
    from pipeline.setup.data import load_dataset_split
    from pipeline.models.loading import ensure_bundled_model
    from pipeline.training.probes import generate_greedy

    cores = os.cpu_count() or 1
    print(f"cores {cores}, load average {os.getloadavg()}, torch {torch.__version__}", flush=True)
    path = ensure_bundled_model()
    tok = AutoTokenizer.from_pretrained(path)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path),
                           LoraConfig(r=8, lora_alpha=32, target_modules="all-linear", lora_dropout=0.05))
    prompts = [r["prompt"] for r in load_dataset_split(RunConfig().dataset, 42)[1][:4]]

    import pipeline.models.engine as engine

    def timed(threads: int) -> float:
        # generate_greedy decodes on engine.decoding_threads of the team: pin both to `threads` here.
        torch.set_num_threads(threads)
        real = engine.decoding_threads
        engine.decoding_threads = lambda n: threads
        try:
            t0 = time.perf_counter()
            generate_greedy(model, tok, prompts, 32)
            return time.perf_counter() - t0
        finally:
            engine.decoding_threads = real

    timed(cores)  # warm-up
    results = {}
    for load in args.load:
        stop = mp.Event()
        burner = mp.Process(target=burn, args=(load / 100, stop), daemon=True) if load else None
        if burner:
            burner.start()
        times = {1: [], cores: []}
        try:
            for _ in range(args.rounds):
                for threads in (cores, 1):
                    times[threads].append(timed(threads))
                    print(f"load {load:>3.0f}%  threads {threads}: {times[threads][-1]:.2f} s", flush=True)
        finally:
            if burner:
                stop.set()
                burner.join()
        results[str(load)] = {str(k): v for k, v in times.items()}
    print(f"\n{'load %':>7} {'1 thread s':>11} {f'{cores} threads s':>12} {f'{cores}/1':>6}")
    for load, times in results.items():
        one, many = statistics.median(times["1"]), statistics.median(times[str(cores)])
        print(f"{float(load):7.0f} {one:11.2f} {many:12.2f} {many / one:6.2f}")
    save("decode_threads", {"cores": cores, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
