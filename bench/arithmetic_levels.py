"""How often the bundled model answers arithmetic right before training, level by level: which problems the
Arithmetic preset should hold (the base model right on some, wrong on others, so GRPO has groups to learn from).

    T=1 .venv/bin/python bench/arithmetic_levels.py N LEVEL [LEVEL ...]
    T=1 .venv/bin/python bench/arithmetic_levels.py 32 add2 sub21 mul1
    T=1 .venv/bin/python bench/arithmetic_levels.py 48 data      # the bundled set's own problems (its first N)

For each level: N seeded problems in the preset's prompt (system rule + the worked example), one greedy answer
and G=8 samples at temperature 1 (top-k 50, 40 tokens, as the trainer samples), scored by numeric_tolerance.
Prints greedy accuracy, sampled accuracy and the signal share: the share of problems whose 8 samples were not
all scored the same (GRPO learns only from those). T sets torch's threads (default 2). A throw-away copy of the
learnability scan's sampling with HF generate; the product's own scan is pipeline/training/learnability.py.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.setup.data import (  # noqa: E402
    ARITHMETIC_EXAMPLE, ARITHMETIC_LEVELS, ARITHMETIC_SYSTEM, arithmetic_problems)

G = 8
MODEL = ROOT / "data" / "models" / "SmolLM2-135M-Instruct"


def _level(name: str, rng: random.Random) -> tuple[str, int]:
    r = rng.randint
    if name == "add1":  # 5 + 7
        a, b = r(1, 9), r(1, 9); return f"Calculate {a} + {b}", a + b
    if name == "add2nc":  # 42 + 35: two digits, no carry
        a, b = r(10, 89), 0
        b = r(1, 9 - a // 10) * 10 + r(0, 9 - a % 10); return f"Calculate {a} + {b}", a + b
    if name == "sub2":  # 74 - 29, never below zero
        a, b = r(20, 99), r(10, 99)
        a, b = max(a, b), min(a, b); return f"Calculate {a} - {b}", a - b
    if name == "mul1":  # 6 × 7
        a, b = r(2, 9), r(2, 9); return f"Calculate {a} × {b}", a * b
    if name == "mul10":  # 7 × 10, 30 × 4
        a, b = r(2, 9), rng.choice([10, 20, 30, 100]); a, b = (a, b) if rng.random() < 0.5 else (b, a)
        return f"Calculate {a} × {b}", a * b
    if name == "addsub":  # 23 + 6 - 4
        a, b, c = r(10, 50), r(1, 9), r(1, 9); return f"Calculate {a} + {b} - {c}", a + b - c
    if name == "add3":  # 3 + 5 + 4
        a, b, c = r(1, 9), r(1, 9), r(1, 9); return f"Calculate {a} + {b} + {c}", a + b + c
    if name in ARITHMETIC_LEVELS:  # the bundled set's own levels
        return ARITHMETIC_LEVELS[name](rng)
    raise SystemExit(f"unknown level {name!r}")


def problems(name: str, n: int) -> list[tuple[str, int]]:
    if name == "data":
        return arithmetic_problems()[:n]
    rng = random.Random(f"levels-{name}")  # each level its own seed: the same problems whatever else is scanned
    return [_level(name, rng) for _ in range(n)]


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.rewards.accuracy_rewards import NumericTolerance

    torch.set_num_threads(int(os.environ.get("T", "2")))
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
    score = NumericTolerance()
    n = int(sys.argv[1])
    for name in sys.argv[2:]:
        greedy = sampled = signal = 0.0
        example = ""
        for q, a in problems(name, n):
            msgs = [{"role": "system", "content": ARITHMETIC_SYSTEM},
                    {"role": "user", "content": ARITHMETIC_EXAMPLE[0]},
                    {"role": "assistant", "content": ARITHMETIC_EXAMPLE[1]}, {"role": "user", "content": q}]
            ids = tok(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False),
                      add_special_tokens=False, return_tensors="pt").input_ids
            with torch.no_grad():
                g = model.generate(ids, max_new_tokens=40, do_sample=False)
                s = model.generate(ids, max_new_tokens=40, do_sample=True, temperature=1.0, top_k=50,
                                   num_return_sequences=G)
            text = tok.decode(g[0, ids.shape[1]:], skip_special_tokens=True)
            scores = score([tok.decode(x[ids.shape[1]:], skip_special_tokens=True) for x in s], answer=[str(a)] * G)
            greedy += score([text], answer=[str(a)])[0]
            sampled += sum(scores) / G
            signal += len(set(scores)) > 1
            example = example or f"{q!r} -> {text[:60]!r}"
        print(f"{name}: n={n} greedy {greedy / n:.2f} sampled {sampled / n:.2f} signal {signal / n:.2f}  eg {example}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
