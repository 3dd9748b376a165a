#!/usr/bin/env bash
# The GPU path, checked on an offline lent GPU machine (issue 20). Those machines have Python 3.12 with torch
# 2.11 + CUDA 13, transformers 5.17, peft, accelerate and sentence-transformers, but no trl, datasets, gradio,
# lancedb, vllm or bitsandbytes, and no network; a call carries at most 64 MiB. So:
#   1. here, once (network):  make gpu-device-files
#      -> .whl/ (git-ignored): the wheels they lack (trl, datasets, peft, dill, multiprocess) and
#         .whl/smollm2-skeleton/, the bundled model's config and tokenizer read from its GGUF (no weights)
#   2. there, with .whl carried:  bash bench/gpu_device_check.sh 2>&1 | tee $OUT/gpu-device-check.txt
#      then commit the output as bench/results/gpu-device-check-DATE.txt
# It fails at once, saying so, where torch sees no CUDA GPU. On a GPU it builds a random-weight model of the
# bundled model's shape (its 98 MB GGUF does not fit a call) and prints, on seed 000's two rewards (no
# embedder): 10 steps with precision auto (bf16 on Ampere and later) and the fast engine, with the frozen base
# weights compared before and after (and, for contrast, PEFT's in-place merge/unmerge); 10 steps in fp16;
# gradient checkpointing; a chat reply from the merged model; s/step against bench/plain_trl.py on the same
# settings; peak GPU memory per run. Exit status 0 only if every part worked.
# GPU_CHECK_SMOKE=1 runs the same plumbing on a CPU (2 layers, 2 steps, fp32, no fp16 run): a check of this
# script, not of the GPU path.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PY:-python3}"
STEPS="${GPU_CHECK_STEPS:-10}"
SMOKE="${GPU_CHECK_SMOKE:-0}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
fail=0

echo "== gpu_device_check $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# 1. A CUDA GPU, before anything else (a CPU box stops here, in a second or two).
if [ "$SMOKE" = 1 ]; then
  echo "GPU_CHECK_SMOKE=1: plumbing check on whatever device torch has; nothing here says anything about a GPU."
  STEPS="${GPU_CHECK_STEPS:-2}"; export GPU_CHECK_LAYERS="${GPU_CHECK_LAYERS:-2}"
else
  "$PY" - <<'PY' || exit 1
import sys
try:
    import torch
except ImportError:
    sys.exit("gpu_device_check: no torch in this Python, so no GPU check. Run it on a lent GPU machine (python3 there has torch).")
if not torch.cuda.is_available():
    sys.exit(f"gpu_device_check: torch {torch.__version__} sees no CUDA GPU (torch.version.cuda={torch.version.cuda}), "
             "so there is nothing to check here. Run it on a lent GPU machine, or GPU_CHECK_SMOKE=1 to test the script on a CPU.")
p = torch.cuda.get_device_properties(0)
print(f"GPU: {p.name}, compute capability {p.major}.{p.minor}, {p.total_memory / 2**30:.0f} GiB; torch {torch.__version__}, CUDA {torch.version.cuda}")
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

# 3. A random-weight model of the bundled model's shape.
SKELETON="${GPU_CHECK_SKELETON:-.whl/smollm2-skeleton}"
[ -f "$SKELETON/config.json" ] || { echo "gpu_device_check: no $SKELETON/config.json: run \`make gpu-device-files\` and carry .whl."; exit 1; }
WORK="$(mktemp -d /tmp/gpu-device-check-XXXX)"
MODEL="$WORK/model"
"$PY" bench/gpu_device_check.py model "$SKELETON" "$MODEL" || exit 1

train() {  # name, config fields as JSON
  local dir="$WORK/$1"
  mkdir -p "$dir"
  "$PY" - "$dir" "$MODEL" "$STEPS" "$2" <<'PY' || return 1
import json, sys
sys.path.insert(0, ".")
from bench.gpu_device_check import SEED_000_REWARDS
from pipeline.config import RunConfig
d, model, steps, extra = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
cfg = RunConfig.from_dict({"model": model, "max_steps": steps, "save_steps": 5, "probe_every": 5,
                           "rewards": SEED_000_REWARDS, **extra})
open(d + "/config.json", "w").write(cfg.to_json())
PY
  echo "-- $1: $2"
  timeout 240 "$PY" bench/gpu_device_check.py train "$dir" > "$dir/stdout.log" 2>&1
  local rc=$?
  "$PY" bench/gpu_device_check.py summary "$dir" "$1" || rc=1
  [ $rc -eq 0 ] || { echo "$1 failed (exit $rc); last lines of its log:"; tail -25 "$dir/train.log" 2>/dev/null || tail -25 "$dir/stdout.log"; fail=1; }
}

# 4. The runs. precision auto is the default set-up on a GPU: bf16 on compute capability 8.0+.
if [ "$SMOKE" = 1 ]; then
  train default '{"precision": "fp32"}'
  echo "fp16: skipped in a smoke run (fp16 mixed precision needs a CUDA GPU)"
  train checkpointing '{"precision": "fp32", "gradient_checkpointing": true}'
else
  train default '{"precision": "auto"}'
  train fp16 '{"precision": "fp16"}'
  train checkpointing '{"precision": "auto", "gradient_checkpointing": true}'
fi

# 5. A reply from the merged model of the default run.
if [ -d "$WORK/default/merged" ]; then
  timeout 180 "$PY" bench/gpu_device_check.py chat "$WORK/default/merged" || fail=1
else
  echo "chat: no merged model from the default run"; fail=1
fi

# 6. s/step against plain TRL, same settings (bf16 on a GPU).
PRECISION=bf16; [ "$SMOKE" = 1 ] && PRECISION=fp32
timeout 300 "$PY" bench/gpu_device_check.py versus "$MODEL" "$STEPS" "$PRECISION" || fail=1

echo "work folder: $WORK"
echo "== gpu_device_check: $([ $fail -eq 0 ] && echo 'every part worked' || echo 'SOME PART FAILED (see above)')"
exit $fail
