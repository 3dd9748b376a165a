"""Seconds per GRPO step: this pipeline vs a plain TRL script (seed 000's recipe), same run, same settings.

    .venv/bin/python bench/train_step.py [--steps 6] [--completion-length 48]

Runs, one after the other in this process tree:
  1. python -m pipeline.train          (GRPO Studio: guarded rewards, metrics/groups files, checkpoints)
  2. bench/plain_trl.py --gradient-checkpointing   (plain TRL + PEFT, same settings as the pipeline)
  3. bench/plain_trl.py                 (gradient checkpointing off, to show what turning it off would buy)
Same model folder, prompts (in the same order), G, completion length, LoRA, beta and seed.
The first step of each is warm-up and is left out. Prints a table and writes bench/out/train_step.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline import runs  # noqa: E402
from pipeline.config import RunConfig  # noqa: E402
from pipeline.data import load_dataset_split  # noqa: E402
from pipeline.models import ensure_bundled_model  # noqa: E402


def summarise(step_seconds: list[float], lengths: list[float], completions_per_step: int,
              gen_seconds: list[float] | None = None) -> dict:
    s, L = step_seconds[1:], lengths[1:]  # drop warm-up
    mean_s = statistics.fmean(s)
    out = {"steps_timed": len(s), "s_per_step": mean_s,
           "completion_tok_per_s": statistics.fmean(L) * completions_per_step / mean_s}
    if gen_seconds:
        g = statistics.fmean(gen_seconds[1:])
        out.update(gen_s=g, opt_s=mean_s - g, gen_share=g / mean_s)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--completion-length", type=int, default=48)
    a = ap.parse_args()

    model_dir = ensure_bundled_model()
    cfg = RunConfig(max_steps=a.steps, max_completion_length=a.completion_length, save_steps=10_000,
                    merge_at_end=False)
    train_rows, _ = load_dataset_split(cfg.dataset, cfg.seed)
    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    prompts = work / "prompts.json"
    prompts.write_text(json.dumps([r["prompt"] for r in train_rows]))
    results: dict[str, dict] = {}

    run_dir = work / "pipeline-run"
    run_dir.mkdir()
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "pipeline.train", "--run-dir", str(run_dir)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    m = runs.read_metrics(run_dir)
    results["pipeline"] = summarise([r["step_seconds"] for r in m], [r["completion_length"] for r in m],
                                    cfg.batch_size, [r["gen_seconds"] for r in m]) | {"wall_s": time.time() - t0}

    for name, extra in (("plain_trl", ["--gradient-checkpointing"]), ("plain_trl_no_ckpt", [])):
        t0 = time.time()
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "plain_trl.py"), "--model", str(model_dir),
                               "--prompts", str(prompts), "--steps", str(a.steps), "--out", str(work / name),
                               "--max-completion-length", str(a.completion_length), *extra],
                              cwd=ROOT, check=True, capture_output=True, text=True)
        line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
        r = json.loads(line[len("RESULT "):])
        results[name] = summarise(r["step_seconds"], r["completion_lengths"], cfg.batch_size) | {
            "wall_s": time.time() - t0}

    p, ref, ck = results["pipeline"], results["plain_trl"], results["plain_trl_no_ckpt"]
    ratio = p["s_per_step"] / ref["s_per_step"]
    tok_ratio = p["completion_tok_per_s"] / ref["completion_tok_per_s"]
    print(f"GRPO step benchmark: bundled SmolLM2-135M, CPU x{os.cpu_count()}, G={cfg.num_generations}, "
          f"{a.completion_length} completion tokens, LoRA r={cfg.lora_r}, {a.steps} steps (first is warm-up)")
    print(f"{'':24}{'s/step':>9}{'tok/s':>9}{'gen s':>8}{'opt s':>8}")
    print(f"{'pipeline':24}{p['s_per_step']:9.2f}{p['completion_tok_per_s']:9.2f}{p['gen_s']:8.2f}{p['opt_s']:8.2f}")
    print(f"{'plain TRL (same cfg)':24}{ref['s_per_step']:9.2f}{ref['completion_tok_per_s']:9.2f}")
    print(f"{'plain TRL, grad ckpt off':24}{ck['s_per_step']:9.2f}{ck['completion_tok_per_s']:9.2f}")
    print(f"ratio pipeline/plain s/step: {ratio:.3f} (target <= 1.05); tok/s ratio {tok_ratio:.3f}")
    print(f"speed-up from turning gradient checkpointing off: {ref['s_per_step'] / ck['s_per_step']:.3f}x")
    print(f"pipeline step split: generation {p['gen_share']:.0%}, optimisation {1 - p['gen_share']:.0%}")
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "train_step.json").write_text(json.dumps(results | {"ratio": ratio, "tok_ratio": tok_ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
