"""The loss pass on the CPU where the shared-prompt engine does not apply (two ranks, gradient checkpointing):
log-probs and entropies of a GRPO batch, forward and backward through the LoRA model, scored with

  A. the model's own LM head (engine.plain_head_logps: what the trainer uses on the CPU), or
  B. TRL's chunked LM head (GRPOTrainer's own pass; its torch fallback is what runs without Triton).

    .venv/bin/python bench/cpu_lm_head.py [--model bundled] [--rows 16] [--prompt 160] [--completion 32]
                                          [--rounds 3] [--threads 2]

Both score the same batch (random tokens of the model's vocabulary, prompt + completion) in the trainer's
micro-batches, with the same thread count, interleaved A/B/A/B; the first round is warm-up and left out.
Prints seconds per pass and the ratio A/B, and the largest log-prob difference between the two; writes
bench/out/cpu_lm_head.json. Commit the printed output under bench/results/.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import scratch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bundled", help="'bundled' or a model folder")
    ap.add_argument("--rows", type=int, default=16, help="completions in the batch (G x prompts)")
    ap.add_argument("--micro", type=int, default=8, help="rows a forward (the trainer's per-device batch)")
    ap.add_argument("--prompt", type=int, default=160)
    ap.add_argument("--completion", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    os.environ.setdefault("GRPO_STUDIO_DATA", scratch("cpu-lm-head-"))

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from bench.report import save
    from pipeline.models.loading import ensure_bundled_model
    from pipeline.setup.config import RunConfig
    from pipeline.training.grpo_trainer import grpo_args, make_trainer_class

    torch.set_num_threads(a.threads)
    path = ensure_bundled_model() if a.model == "bundled" else Path(a.model)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    cfg = RunConfig(num_generations=4, batch_size=a.micro)
    work = Path(scratch("cpu-lm-head-run-"))
    trainer = make_trainer_class()(
        model=model, processing_class=tokenizer, args=grpo_args(cfg, work, "cpu", "fp32"),
        train_dataset=Dataset.from_list([{"prompt": "a"}] * 8),
        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
        peft_config=LoraConfig(task_type="CAUSAL_LM", r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                               target_modules=cfg.lora_target_modules.strip()))
    trainer.studio_fast = False  # as under two ranks: the trainer's TRL pass
    peft = trainer.model
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (a.rows, a.prompt + a.completion), generator=gen)
    mask = torch.ones_like(ids)

    passes = {"A plain head": trainer._get_per_token_logps_and_entropies,
              "B TRL chunked head": lambda *x, **k: GRPOTrainer._get_per_token_logps_and_entropies(trainer, *x, **k)}
    times = {name: [] for name in passes}
    values = {}
    for round_ in range(a.rounds + 1):
        for name, score in passes.items():
            peft.zero_grad()
            t0 = time.perf_counter()
            logps, entropy, _ = score(peft, ids, mask, a.completion, batch_size=a.micro, compute_entropy=True)
            (logps.sum() + entropy.sum()).backward()
            seconds = time.perf_counter() - t0
            if round_:
                times[name].append(seconds)
            values[name] = logps.detach()
    gap = (values["A plain head"] - values["B TRL chunked head"]).abs().max().item()
    med = {name: statistics.median(ts) for name, ts in times.items()}
    ratio = med["A plain head"] / med["B TRL chunked head"]
    print(f"cpu_lm_head: {path.name}, {a.rows} rows ({a.micro} a forward), prompt {a.prompt} + completion "
          f"{a.completion} tokens, vocab {model.config.vocab_size}, {a.threads} threads, "
          f"{platform.processor() or platform.machine()}")
    for name, ts in times.items():
        print(f"  {name:20s} median {med[name]:.2f} s a pass (forward + backward), rounds {[round(t, 2) for t in ts]}")
    print(f"  ratio A/B {ratio:.2f}; largest log-prob difference {gap:.2e}")
    save("cpu_lm_head", {"args": vars(a), "times": times, "median": med, "ratio": ratio, "max_logp_gap": gap})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
