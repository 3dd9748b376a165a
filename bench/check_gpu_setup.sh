#!/usr/bin/env bash
# The two checks around `make setup-gpu`.
#     bash bench/check_gpu_setup.sh driver        before installing: an NVIDIA driver >= 580 and a card of
#                                                 compute capability >= 7.5, or refuse with the reason
#     bash bench/check_gpu_setup.sh torch [PY]    after installing: torch is a CUDA build and sees the GPU
# Why: the GPU pin set is CUDA 13 (torch 2.13 from the package index needs cuda-toolkit 13; vLLM 0.31's
# extension links libcudart.so.13). CUDA 13 needs driver 580 or later and drops cards below compute
# capability 7.5. Installed on a machine without a driver, the set puts CUDA builds of torchvision and
# torchaudio beside a CPU torch, and then even CPU training fails ("operator torchvision::nms does not
# exist"); so the driver is checked before anything is installed. The driver check uses bash builtins
# and nvidia-smi only; NVIDIA_SMI names another nvidia-smi (tests/unit/test_setup_gpu.py uses fakes).
set -uo pipefail
MIN_DRIVER=580
SMI="${NVIDIA_SMI:-nvidia-smi}"

refuse() {
  echo "make setup-gpu refused: $*" >&2
  echo "Nothing was installed. On a machine without a suitable NVIDIA GPU, \`make setup\` installs the CPU set." >&2
  exit 1
}

check_driver() {
  command -v "$SMI" >/dev/null 2>&1 || refuse "no NVIDIA driver found ('$SMI' is not on PATH). The GPU set is \
built for CUDA 13, which needs NVIDIA driver $MIN_DRIVER or later: install the driver first."
  local out
  out="$("$SMI" --query-gpu=driver_version,compute_cap,name --format=csv,noheader 2>&1)" ||
    refuse "'$SMI' failed, so the driver is not usable: $out"
  [ -n "$out" ] || refuse "'$SMI' lists no GPU."
  local version cap name major
  while IFS=, read -r version cap name; do
    version="${version// /}"; cap="${cap// /}"; name="${name# }"
    major="${version%%.*}"
    [[ "$major" =~ ^[0-9]+$ ]] || refuse "could not read the driver version from '$SMI' (got '$version')."
    (( major >= MIN_DRIVER )) || refuse "NVIDIA driver $version is older than $MIN_DRIVER. The GPU set is CUDA 13 \
(torch 2.13, vLLM 0.31), which needs driver $MIN_DRIVER or later: update the driver first."
    if [[ "$cap" =~ ^([0-9]+)\.([0-9]+)$ ]]; then
      (( BASH_REMATCH[1] * 10 + BASH_REMATCH[2] >= 75 )) || refuse "$name has compute capability $cap. CUDA 13 \
supports 7.5 or later (Turing and newer), so the GPU set can't use this card."
    fi
    echo "NVIDIA driver $version, $name (compute capability $cap): fits the CUDA 13 set."
  done <<< "$out"
}

check_torch() {
  "$1" - <<'PY'
import sys

import torch

cuda = torch.version.cuda
if cuda is None:
    sys.exit(f"setup-gpu check failed: torch {torch.__version__} is a CPU build, so training would run on the CPU. "
             "pip took it from a source of CPU wheels (`pip config list` shows a find-links or index-url; remove "
             "it), then reinstall torch from the package index (`.venv/bin/python -m pip install --force-reinstall "
             "--no-deps torch==2.13.0`) and run `make setup-gpu` again.")
if not torch.cuda.is_available():
    sys.exit(f"setup-gpu check failed: torch {torch.__version__} is built for CUDA {cuda} but sees no GPU: a "
             f"driver too old for CUDA {cuda} (`nvidia-smi` shows it), or CUDA_VISIBLE_DEVICES hides the GPUs.")
p = torch.cuda.get_device_properties(0)
print(f"torch {torch.__version__}, CUDA {cuda}: {torch.cuda.device_count()} GPU(s), {p.name} "
      f"(compute capability {p.major}.{p.minor}).")
PY
}

case "${1:-}" in
  driver) check_driver ;;
  torch) check_torch "${2:-.venv/bin/python}" ;;
  *) echo "usage: bash bench/check_gpu_setup.sh driver | torch [python]" >&2; exit 2 ;;
esac
