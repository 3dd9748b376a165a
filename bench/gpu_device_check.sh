#!/usr/bin/env bash
# One call on an offline GPU machine (Python 3.12 with torch + CUDA, transformers, peft, accelerate, but no trl or
# datasets, no network, at most 64 MiB carried, 10 minutes a command), timed to end within GPU_CHECK_BUDGET
# seconds (default 570) of its start:
#   a. where a GRPO step's time goes, for the bundled model's shape and Qwen2.5-0.5B's, then one more step under
#      torch.profiler: aten op calls, kernel launches, host syncs, GPU busy time, the top ops (and a gzipped Chrome
#      trace per shape, trace-<shape>.json.gz in $OUT, where it is under 12 MiB; --no-op-profile leaves it out);
#   b. s/step of this app's pipeline against plain TRL (bench/plain_trl.py), interleaved A/B/A/B, same settings;
#   c. the size table (SmolLM2-135M, Qwen2.5-0.5B/1.5B/7B shapes; GPU standard and GSM8K presets; gradient
#      checkpointing on and off): s/step, tokens/s, peak memory, and pipeline/setup/gpu_memory.py's estimate beside it.
#   d. (only when named in GPU_CHECK_PARTS) the static decoding step compiled three ways, TorchInductor + CUDA graphs
#      as shipped, CUDA graphs alone, and as shipped with the sampling inside the graph: first-call (compile) seconds
#      and steady ms a token. GPU_CHECK_PARTS=dab puts it first in call 1 (about 150 s).
#   e. (only when named) the training passes compiled by decoder layer (the trainer's torch_compile, accelerate's
#      regional compilation) against the pipeline as shipped, interleaved: steady s/step, the compile steps, step 1's
#      loss on both sides. A step far above its arithmetic with its GPU mostly idle is bound by what the host
#      dispatches (part a's op profile says so); compiling the layers is what cuts that.
#   f. (only when named) the pipeline as shipped against the same run with one change that part a's op profile led
#      to taken back each: cuDNN's attention kernels allowed (a plan built per new sequence length, in every pass),
#      and the decoding step's guards checked at every token (about 2 ms a token on the host). Interleaved A/B/C.
# Rows that do not fit the time left are printed as skipped; an out-of-memory is a row that says OOM.
#   1. here, once (network):  make gpu-device-files
#      -> .whl/ (git-ignored): the wheels they lack (trl, datasets, peft, dill, multiprocess) and
#         .whl/smollm2-skeleton/, the bundled model's config and tokenizer read from its GGUF (no weights)
#   2. there, with .whl carried:  bash bench/gpu_device_check.sh 2>&1 | tee $OUT/gpu-device-check.txt
#      (gpu-device-check.json lands in $OUT too); commit them as bench/results/gpu-device-check-DATE.txt/.json
# With 15 minutes of device time, the whole check does not fit one 10-minute command: run it as two calls on the
# same warm machine, the second sent at once (a machine goes back 30 s after a call), e.g.
#   GPU_CHECK_PARTS=ab GPU_CHECK_BUDGET=345 GPU_CHECK_ARGS="--budget-a 130 --rounds 1" bash ... | tee $OUT/...-ab.txt
#   GPU_CHECK_PARTS=c GPU_CHECK_BUDGET=440 GPU_CHECK_ARGS="--checkpointing off" bash ... | tee $OUT/...-c.txt
# The next check (what is still open after the check of 2026-11-29: the two changes' effect, b on the 0.5B shape,
# a valid 0.5B profile, the GSM8K rows and the checkpointing-on rows with static decoding):
#   GPU_CHECK_PARTS=fb GPU_CHECK_BUDGET=400 GPU_CHECK_ARGS="--budget-f 170 --rounds 1"
#   GPU_CHECK_PARTS=ac GPU_CHECK_BUDGET=330 GPU_CHECK_ARGS="--budget-a 150 --checkpointing on"
# (each run compiles its decoding step in its first step, 15-55 s; part f runs the bundled shape only; the GSM8K
# rows without checkpointing are left for a later check).
# (part c's --shapes, --presets, --checkpointing and part b's --versus-shapes pick the rows still to measure).
# Options travel as environment variables: GPU_CHECK_PARTS (abc), GPU_CHECK_ENGINE (the RunConfig field
# generation_engine for the pipeline runs, when the checkout has it), GPU_CHECK_ARGS (more flags for the .py).
# It fails at once, saying so, where torch sees no CUDA GPU. GPU_CHECK_SMOKE=1 runs the same code on a CPU with tiny
# shapes and 1 step a row: a check of this script, not of the GPU path.
set -uo pipefail
START=$(date +%s)
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PY:-python3}"
SMOKE="${GPU_CHECK_SMOKE:-0}"
BUDGET="${GPU_CHECK_BUDGET:-570}"
OUT_DIR="${OUT:-$ROOT/bench/out}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"

echo "== gpu_device_check $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# 1. A CUDA GPU, before anything else (a CPU box stops here, in a second or two).
if [ "$SMOKE" = 1 ]; then
  echo "GPU_CHECK_SMOKE=1: the script's code on this machine's CPU; nothing here says anything about a GPU."
else
  "$PY" - <<'PY' || exit 1
import sys
try:
    import torch
except ImportError:
    sys.exit("gpu_device_check: no torch in this Python, so no GPU check. Run it on a GPU machine (python3 there has torch).")
if not torch.cuda.is_available():
    sys.exit(f"gpu_device_check: torch {torch.__version__} sees no CUDA GPU (torch.version.cuda={torch.version.cuda}), "
             "so there is nothing to check here. Run it on a GPU machine, or GPU_CHECK_SMOKE=1 to test the script on a CPU.")
p = torch.cuda.get_device_properties(0)
print(f"GPU: {p.name}, compute capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB; torch {torch.__version__}, CUDA {torch.version.cuda}")
PY
fi

# 2. The carried wheels, into /tmp/site (first on the path, so they win over the machine's own peft).
if [ "$SMOKE" != 1 ] && ls .whl/*.whl >/dev/null 2>&1; then  # (a smoke run uses this machine's packages)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" - <<'PY' || exit 1
import importlib, importlib.util, sys
missing = [m for m in ("trl", "datasets", "peft", "transformers", "accelerate") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_device_check: {', '.join(missing)} missing. Run `make gpu-device-files` where there is network and carry .whl.")
versions = {m: importlib.import_module(m).__version__ for m in ("torch", "transformers", "trl", "peft", "accelerate", "datasets")}
print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
PY

# 3. The bundled model's config and tokenizer (every shape uses its tokenizer).
SKELETON="${GPU_CHECK_SKELETON:-.whl/smollm2-skeleton}"
[ -f "$SKELETON/config.json" ] || { echo "gpu_device_check: no $SKELETON/config.json: run \`make gpu-device-files\` and carry .whl."; exit 1; }

# 4. The three parts, by the deadline.
ARGS=(all --skeleton "$SKELETON" --out "$OUT_DIR" --deadline "$((START + BUDGET))" --parts "${GPU_CHECK_PARTS:-abc}")
[ -n "${GPU_CHECK_ENGINE:-}" ] && ARGS+=(--engine "$GPU_CHECK_ENGINE")
[ "$SMOKE" = 1 ] && ARGS+=(--cpu-smoke)
# shellcheck disable=SC2206
ARGS+=(${GPU_CHECK_ARGS:-})
"$PY" bench/gpu_device_check.py "${ARGS[@]}"
rc=$?
echo "== gpu_device_check: $([ $rc -eq 0 ] && echo 'done' || echo "FAILED (exit $rc)") in $(( $(date +%s) - START )) s"
exit $rc
