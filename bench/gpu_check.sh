#!/usr/bin/env bash
# The GPU path, for real, on one GPU. Run it on a CUDA machine after `make setup-gpu`:
#     bash bench/gpu_check.sh 2>&1 | tee bench/results/gpu-check-$(date +%F).txt
# It prints what it measured: a 10-step bf16 run on the bundled model (s/step, final state), the same
# with use_vllm when vLLM is installed, a chat reply from the merged model, 4-bit QLoRA for 3 steps, and
# s/step against the plain TRL script on the same settings. CI never runs this (it needs a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
WORK="$(mktemp -d /tmp/gpu-check-XXXX)"
fail=0

$PY - <<'PY' || exit 1
import torch
assert torch.cuda.is_available(), "no CUDA GPU visible: this check needs one"
p = torch.cuda.get_device_properties(0)
print(f"GPU: {p.name}, compute capability {p.major}.{p.minor}, {p.total_memory / 2**30:.0f} GiB; torch {torch.__version__}")
PY

train() {  # name, extra config JSON fields
  local dir="$WORK/$1"
  mkdir -p "$dir"
  $PY - "$dir" "$2" <<'PY'
import json, sys
from pipeline.setup.config import RunConfig
cfg = RunConfig(**{"max_steps": 10, "save_steps": 5, "probe_every": 5, **json.loads(sys.argv[2])})
open(sys.argv[1] + "/config.json", "w").write(cfg.to_json())
PY
  local t0=$SECONDS
  $PY -m pipeline.train --run-dir "$dir" > "$dir/stdout.log" 2>&1
  local rc=$?
  $PY - "$dir" "$((SECONDS - t0))" "$1" <<'PY'
import json, statistics, sys
from pipeline.run_folder import runs
d, wall, name = sys.argv[1], sys.argv[2], sys.argv[3]
st, m = runs.read_status(d), runs.read_metrics(d)
steps = [r["step_seconds"] for r in m[1:]] or [float("nan")]
print(f"{name}: {st.get('state')} at step {st.get('step')}, {st.get('device')} {st.get('precision')}, "
      f"{wall} s wall, median {statistics.median(steps):.2f} s/step after the first, "
      f"reward {m[0]['reward'] if m else None} -> {m[-1]['reward'] if m else None}"
      + (f"; error: {st.get('error')}" if st.get("error") else ""))
PY
  [ $rc -eq 0 ] || { echo "$1 failed (exit $rc); log: $dir/train.log"; tail -20 "$dir/train.log"; fail=1; }
}

train bf16 '{"precision": "auto"}'
if $PY -c "import vllm" 2>/dev/null; then
  train vllm '{"precision": "auto", "use_vllm": true}'
else
  echo "vllm: not installed, skipped (make setup-gpu installs it)"
fi
if $PY -c "import bitsandbytes" 2>/dev/null; then
  train qlora '{"precision": "auto", "load_in_4bit": true, "max_steps": 3}'
else
  echo "qlora: bitsandbytes not installed, skipped"
fi

$PY - "$WORK/bf16" <<'PY' || fail=1
import sys, time
from pipeline.training.generate import generate_batch
from pipeline.models.loading import load_model
model, tok = load_model(sys.argv[1] + "/merged")
t0 = time.time()
reply = generate_batch(model, tok, [[{"role": "user", "content": "In one sentence: why do leaves change colour in autumn?"}]],
                       max_new_tokens=48)[0]
print(f"chat from the merged model on {model.device} ({time.time() - t0:.1f} s): {reply!r}")
PY

echo "--- s/step and time per token against plain TRL, same settings, bf16 ---"
$PY bench/train_step.py --steps 6 --rounds 2 --precision bf16 || fail=1
echo "work folder: $WORK"
exit $fail
