"""Does llama.cpp run what GGUF export writes as transformers runs the merged model? For each model folder:
write it as Q8_0 and F16 (pipeline/models/gguf_export.py; seconds and MiB), then, for a few chat prompts,
compare llama.cpp against transformers on the folder:

  - the prompt's token ids (llama.cpp tokenizing the chat-formatted text with the file's tokenizer);
  - greedy decoding from those ids: how many of the first --tokens tokens agree;
  - the reply to the chat messages, formatted by llama.cpp from the chat template in the file.

llama.cpp runs through llama-cpp-python in a Python of its own (it has no wheel for this project's pins):

    python3 -m venv /tmp/lcpv && /tmp/lcpv/bin/pip install llama-cpp-python   # builds llama.cpp, minutes
    .venv/bin/python bench/gguf_check.py --llama-python /tmp/lcpv/bin/python [--model DIR ...] [--tokens 48]

Without --model it checks the bundled model's folder. Commit the output under bench/results/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import scratch  # noqa: E402
from pipeline.models import gguf_export  # noqa: E402

PROMPTS = [
    "Summarize in one sentence: the city council voted to close the old bridge for repairs, and buses will "
    "take a detour through the market street until spring.",
    "What is 17 + 25? Answer with the number.",
    "Name three things a cat likes.",
    "Explain in two sentences why bread dough rises.",
]

# Run by the llama.cpp Python: reads a JSON job on stdin, prints a JSON answer.
LLAMA_SIDE = r"""
import json, sys
from llama_cpp import Llama
job = json.load(sys.stdin)
llm = Llama(model_path=job["path"], n_ctx=1024, n_threads=2, seed=0, verbose=False, logits_all=False)
out = []
for case in job["cases"]:
    ids = llm.tokenize(case["text"].encode("utf-8"), add_bos=False, special=True)
    greedy = []
    for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0, reset=True):
        if token == llm.token_eos() or len(greedy) >= job["tokens"]:
            break
        greedy.append(token)
    chat = llm.create_chat_completion(case["messages"], temperature=0.0, top_k=1, max_tokens=job["tokens"],
                                      repeat_penalty=1.0)
    out.append({"ids": ids, "greedy": greedy, "chat": chat["choices"][0]["message"]["content"]})
print(json.dumps({"cases": out, "eos": llm.token_eos(), "bos": llm.token_bos()}))
"""


def transformers_side(model_dir: Path, tokens: int) -> list[dict]:
    """The reference: the folder's model and tokenizer in transformers, fp32, greedy."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    cases = []
    for prompt in PROMPTS:
        messages = [{"role": "user", "content": prompt}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=tokens, do_sample=False)[0][len(ids):].tolist()
        if tokenizer.eos_token_id in out:
            out = out[:out.index(tokenizer.eos_token_id)]
        cases.append({"messages": messages, "text": text, "ids": ids, "greedy": out,
                      "reply": tokenizer.decode(out, skip_special_tokens=True).strip()})
    return cases


def agreeing(a: list[int], b: list[int]) -> int:
    """How many leading tokens two sequences share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-python", required=True, help="a Python with llama-cpp-python installed")
    ap.add_argument("--model", type=Path, nargs="*", help="merged model folders (default: the bundled model's)")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--types", nargs="+", default=list(gguf_export.OUT_TYPES))
    a = ap.parse_args()
    if not a.model:
        from pipeline.models.loading import ensure_bundled_model

        a.model = [ensure_bundled_model()]
    version = subprocess.run([a.llama_python, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    print(f"llama-cpp-python {version}; greedy, {a.tokens} tokens at most; {len(PROMPTS)} chat prompts")
    work = Path(scratch("gguf-check-"))
    for model_dir in a.model:
        print(f"\n== {model_dir}")
        reference = transformers_side(model_dir, a.tokens)
        for out_type in a.types:
            start = time.perf_counter()
            path = gguf_export.write(model_dir, work / f"{model_dir.name}-{out_type}.gguf", out_type)
            seconds = time.perf_counter() - start
            job = {"path": str(path), "tokens": a.tokens,
                   "cases": [{"text": c["text"], "messages": c["messages"]} for c in reference]}
            done = subprocess.run([a.llama_python, "-c", LLAMA_SIDE], input=json.dumps(job), capture_output=True,
                                  text=True)
            if done.returncode:
                print(f"-- {out_type}: llama.cpp failed to run the file:\n{done.stderr[-2000:]}")
                continue
            got = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"-- {out_type}: written in {seconds:.1f} s, {path.stat().st_size / 2**20:.0f} MiB; llama.cpp "
                  f"loaded it (eos id {got['eos']}, bos id {got['bos']})")
            for ref, llama in zip(reference, got["cases"]):
                same_ids = ref["ids"] == llama["ids"]
                shared = agreeing(ref["greedy"], llama["greedy"])
                print(f"   prompt ids {'identical' if same_ids else 'DIFFER'} ({len(ref['ids'])} tokens); greedy: "
                      f"first {shared} of {len(ref['greedy'])} tokens agree (llama.cpp made {len(llama['greedy'])}); "
                      f"chat reply {'identical' if llama['chat'].strip() == ref['reply'] else 'differs'}")
                if not same_ids:
                    print(f"     transformers {ref['ids'][:40]}\n     llama.cpp    {llama['ids'][:40]}")
                print(f"     transformers: {ref['reply'][:160]!r}\n     llama.cpp:    {llama['chat'].strip()[:160]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
