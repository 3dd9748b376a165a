"""Does llama.cpp run what GGUF export writes as transformers runs the merged model? For each model folder:
write it as Q8_0 and F16 (pipeline/models/gguf_export.py; seconds and MiB), then, for a few chat prompts,
compare llama.cpp against transformers on the folder:

  - the prompt's token ids (llama.cpp tokenizing the chat-formatted text with the file's tokenizer);
  - greedy decoding from those ids: how many of the first --tokens tokens agree;
  - the reply to the chat messages, formatted by llama.cpp from the chat template in the file;

and, as a control for Q8_0, llama.cpp's own Q8_0 of the F16 file (its llama_model_quantize): how far
llama.cpp's own 8-bit file stays with transformers, and how many greedy tokens it shares with ours.

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
import ctypes, json, sys
import llama_cpp
from llama_cpp import Llama
job = json.load(sys.stdin)
if job.get("quantize_from"):  # llama.cpp's own Q8_0 of the F16 file
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    if llama_cpp.llama_model_quantize(job["quantize_from"].encode(), job["path"].encode(), ctypes.byref(params)):
        sys.exit("llama_model_quantize failed")
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


def same_quantization(f16_path: Path, theirs_path: Path) -> str:
    """Ours quantizes from the fp32 weights and llama.cpp's own from the F16 file: given the same F16 values, does
    ours write the bytes llama.cpp writes? Checked on every Q8_0 tensor."""
    import gguf
    import numpy as np

    source = {t.name: t for t in gguf.GGUFReader(str(f16_path)).tensors}
    same = total = 0
    for tensor in gguf.GGUFReader(str(theirs_path)).tensors:
        if tensor.tensor_type != gguf.GGMLQuantizationType.Q8_0:
            continue
        ours = gguf.quants.quantize(np.array(source[tensor.name].data, dtype=np.float32),
                                    gguf.GGMLQuantizationType.Q8_0)
        total += 1
        same += np.array_equal(ours.reshape(-1), np.array(tensor.data).reshape(-1))
    return f"our Q8_0 quantizer on the F16 file's values: {same} of {total} Q8_0 tensors byte-identical to llama.cpp's"


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
        greedy = {}
        variants = [(t, None) for t in a.types]
        if {"Q8_0", "F16"} <= set(a.types):
            variants.append(("llama.cpp's own Q8_0 of the F16 file", "F16"))
        for label, quantize_from in variants:
            start = time.perf_counter()
            if quantize_from:
                path = work / f"{model_dir.name}-llama-cpp-Q8_0.gguf"
                source = str(work / f"{model_dir.name}-{quantize_from}.gguf")
            else:
                path = gguf_export.write(model_dir, work / f"{model_dir.name}-{label}.gguf", label)
                source = None
            seconds = time.perf_counter() - start
            job = {"path": str(path), "tokens": a.tokens, "quantize_from": source,
                   "cases": [{"text": c["text"], "messages": c["messages"]} for c in reference]}
            done = subprocess.run([a.llama_python, "-c", LLAMA_SIDE], input=json.dumps(job), capture_output=True,
                                  text=True)
            if done.returncode:
                print(f"-- {label}: llama.cpp failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
                continue
            got = json.loads(done.stdout.strip().splitlines()[-1])
            greedy[label] = [case["greedy"] for case in got["cases"]]
            made = "made by llama.cpp" if quantize_from else f"written in {seconds:.1f} s"
            print(f"-- {label}: {made}, {path.stat().st_size / 2**20:.0f} MiB; llama.cpp loaded it (eos id "
                  f"{got['eos']}, bos id {got['bos']})")
            for ref, llama in zip(reference, got["cases"]):
                same_ids = ref["ids"] == llama["ids"]
                shared = agreeing(ref["greedy"], llama["greedy"])
                print(f"   prompt ids {'identical' if same_ids else 'DIFFER'} ({len(ref['ids'])} tokens); greedy: "
                      f"first {shared} of {len(ref['greedy'])} tokens agree (llama.cpp made {len(llama['greedy'])}); "
                      f"chat reply {'identical' if llama['chat'].strip() == ref['reply'] else 'differs'}")
                if not same_ids:
                    print(f"     transformers {ref['ids'][:40]}\n     llama.cpp    {llama['ids'][:40]}")
                print(f"     transformers: {ref['reply'][:160]!r}\n     llama.cpp:    {llama['chat'].strip()[:160]!r}")
        theirs = greedy.get("llama.cpp's own Q8_0 of the F16 file")
        if theirs and "Q8_0" in greedy:
            shared = [agreeing(ours, own) for ours, own in zip(greedy["Q8_0"], theirs)]
            print(f"-- our Q8_0 against llama.cpp's own, greedy tokens shared per prompt: {shared} "
                  f"(of {[len(t) for t in theirs]})")
            f16, own = work / f"{model_dir.name}-F16.gguf", work / f"{model_dir.name}-llama-cpp-Q8_0.gguf"
            print(f"   {same_quantization(f16, own)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
