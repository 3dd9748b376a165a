"""What checking a compiled decoding step's guards costs the host, per token, with the check at every token against
the check at each call's first token only (StaticDecoder.skip_guards, as shipped). On this machine's CPU: the
bundled model with a LoRA, the step compiled with backend="eager" (Dynamo's guards, no code generation), so what
differs between the two sides is the guard check alone. Interleaved A/B/A/B, equal threads.

    PYTHONPATH=. .venv/bin/python bench/guard_cost.py [--rounds 2] [--tokens 24] [--rows 4]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--rows", type=int, default=4)
    a = p.parse_args()
    torch.set_num_threads(2)
    from peft import LoraConfig, get_peft_model
    from torch.profiler import profile
    from transformers import AutoModelForCausalLM, GenerationConfig

    from pipeline.models import engine
    from pipeline.models.loading import bundled_cache_dir, ensure_bundled_model, load_tokenizer
    from pipeline.models.static_decode import StaticDecoder

    ensure_bundled_model()
    path = bundled_cache_dir()
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                           LoraConfig(task_type="CAUSAL_LM", r=8, target_modules="all-linear"))
    model.eval()
    tok = load_tokenizer(str(path))
    rows = [tok("Tides are caused by")["input_ids"]] * a.rows
    gc = GenerationConfig(max_new_tokens=a.tokens, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                          pad_token_id=tok.pad_token_id, eos_token_id=None)
    decoder = StaticDecoder(compiler=lambda step, device: torch.compile(step, backend="eager", dynamic=False))
    found = {"guards at every token": [], "guards at the first token (as shipped)": []}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {a.rows} rows x {a.tokens} tokens")
    with torch.no_grad(), engine.merged_adapter(model, decoder.weight_copies):
        decoder.generate(model, rows, gc)  # compiles
        for i in range(a.rounds):
            for side, skip in (("guards at every token", False), ("guards at the first token (as shipped)", True)):
                decoder.skip_guards = skip
                decoder.generate(model, rows, gc)
                with profile() as prof:
                    t0 = time.perf_counter()
                    decoder.generate(model, rows, gc)
                    wall = time.perf_counter() - t0
                lookup = [e for e in prof.key_averages() if e.key == "TorchDynamo Cache Lookup"]
                us = lookup[0].cpu_time_total / lookup[0].count if lookup else 0.0
                found[side].append(us)
                print(f"round {i + 1} {side}: guard check {us:7.0f} us a token ({lookup[0].count if lookup else 0} "
                      f"calls); the call {wall:.2f} s under the profiler")
    med = {side: statistics.median(v) for side, v in found.items()}
    (every, first) = med.values()
    print(f"median guard check a token: every token {every:.0f} us, first token only {first:.0f} us "
          f"(ratio {first / every:.3f})")


if __name__ == "__main__":
    main()
