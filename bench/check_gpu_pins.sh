#!/usr/bin/env bash
# Does pip's resolver accept requirements-gpu.txt as one set? Nothing is installed (--dry-run); the
# resolution pip would make is printed, and the exit status is pip's. Needs the package index (vLLM's
# wheels are not on an offline mirror). Usage: bash bench/check_gpu_pins.sh [python]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-.venv/bin/python}"
REPORT="$(mktemp)"
trap 'rm -f "$REPORT"' EXIT
echo "pip resolver check for requirements-gpu.txt ($(date -u +%Y-%m-%dT%H:%MZ), $($PY -m pip --version))"
if $PY -m pip install --dry-run --ignore-installed --quiet --report "$REPORT" -r requirements-gpu.txt; then
  $PY - "$REPORT" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))["install"]
pins = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in items}
for name in ("torch", "transformers", "trl", "peft", "accelerate", "vllm", "bitsandbytes"):
    print(f"  {name:14s} {pins.get(name, '-')}")
print(f"resolved: {len(pins)} packages, no conflict")
PY
else
  echo "pip could not resolve requirements-gpu.txt (see above): a conflict, or no index with these releases."
  exit 1
fi
