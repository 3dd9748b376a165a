"""The Python half of bench/gpu_device_check.sh: one call on a GPU machine that measures, within a time budget,

  a. where a GRPO step's time goes (generation, the log-prob passes, forward/backward, optimizer, rewards,
     logging, the rest), for the bundled model's shape and Qwen2.5-0.5B's;
  b. s/step of this app's pipeline against plain TRL (bench/plain_trl.py), interleaved A/B/A/B, same settings;
  c. the size table: SmolLM2-135M, Qwen2.5-0.5B, 1.5B and 7B shapes under the GPU standard and GSM8K presets'
     settings, with and without gradient checkpointing: s/step, completion tokens/s, peak memory, and the
     memory estimate of pipeline/setup/gpu_memory.py beside it;
  d. (asked for by name) the static decoding step compiled three ways, TorchInductor + CUDA graphs as shipped,
     CUDA graphs alone, and as shipped with the sampling inside the graph: the first call's compile time and the
     steady time a token.
  e. (asked for by name) the training passes compiled: the pipeline as shipped against the same run with the
     trainer's torch_compile by decoder layer (accelerate's regional compilation), interleaved; s/step, the first
     steps' seconds (compiles), and step 1's loss and KL on both sides (the same samples, so they should agree).
  f. (asked for by name) the pipeline as shipped against the same run with one of the changes the step profile
     led to taken back: cuDNN's attention kernels allowed, the decoding step's guards checked at every token.

    python bench/gpu_device_check.py skeleton OUT             here (needs the bundled model package): the bundled
                                                               model's config and tokenizer, read from its GGUF
    python bench/gpu_device_check.py all --skeleton DIR --out DIR [--deadline EPOCH] [--parts abc] [--engine E]
                                                               there: the three parts; --cpu-smoke runs the same
                                                               code on the CPU with tiny shapes, 1 step a row
    python bench/gpu_device_check.py row SPEC.json            one size-table row in a fresh process (used by `all`)

Every model is random weights of a real shape (the weights do not fit what a call may carry; the bundled tokenizer
serves every shape), so rewards and replies mean nothing; times and memory do. The prompts are the bundled TL;DR
ones (the longest is 251 tokens) for every row, with the length + diversity reward pair (no embedder).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.setup.gpu_memory import GIB, KNOWN_SHAPES, ModelShape, estimate, settings_from_config  # noqa: E402

# Seed 000's pair: neither needs the sentence embedder (post_similarity would).
SEED_000_REWARDS = [{"name": "length_target", "weight": 1.0, "params": {"target": 50, "unit": "chars"}},
                    {"name": "token_diversity", "weight": 1.0, "params": {}}]

# name -> (shape, transformers model type); the bundled model is a Llama, Qwen2.5 a Qwen2 (biases on q, k, v).
SHAPES = {
    "SmolLM2-135M": (KNOWN_SHAPES["HuggingFaceTB/SmolLM2-135M-Instruct"], "llama"),
    "Qwen2.5-0.5B": (KNOWN_SHAPES["Qwen/Qwen2.5-0.5B-Instruct"], "qwen2"),
    "Qwen2.5-1.5B": (KNOWN_SHAPES["Qwen/Qwen2.5-1.5B-Instruct"], "qwen2"),
    "Qwen2.5-7B": (KNOWN_SHAPES["Qwen/Qwen2.5-7B-Instruct"], "qwen2"),
}
# --cpu-smoke: the same code on shapes a CPU trains in seconds (the bundled tokenizer's vocabulary).
SMOKE_SHAPES = {
    "tiny-llama": (ModelShape(64, 2, 4, 2, 128, 49152, True, False), "llama"),
    "tiny-qwen2": (ModelShape(64, 2, 4, 2, 128, 49152, True, True), "qwen2"),
}
# The presets' settings a size-table row takes (pipeline/setup/presets.py: PRESETS); the rest are the defaults.
PRESET_FIELDS = ("num_generations", "batch_size", "learning_rate", "max_completion_length", "gradient_checkpointing",
                 "lora_r", "lora_alpha", "fast_engine", "lr_scheduler", "warmup_steps", "scale_rewards")
PRESET_NAMES = {"GPU standard": "GPU standard", "GSM8K": "GSM8K on GPU: Qwen2.5-0.5B-Instruct"}


# ---- models of a real shape, random weights -------------------------------------------------------------------


def skeleton(out: Path) -> None:
    """config.json, generation_config.json and the tokenizer of the bundled model (a few MB, no weights)."""
    from transformers import AutoConfig, AutoTokenizer

    from pipeline.models.loading import BUNDLED_GGUF, bundled_package_dir

    pkg = str(bundled_package_dir())
    config = AutoConfig.from_pretrained(pkg, gguf_file=BUNDLED_GGUF)
    if hasattr(config, "quantization_config"):  # the GGUF's marker; the random weights are plain
        del config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    AutoTokenizer.from_pretrained(pkg, gguf_file=BUNDLED_GGUF).save_pretrained(out)
    print(f"skeleton of the bundled model in {out}: {sorted(p.name for p in out.iterdir())}")


def model_folder(name: str, shapes: dict, skeleton_dir: Path, work: Path, weights: bool) -> Path:
    """A model folder of shape `name`: config.json and the bundled tokenizer, plus random weights when `weights`
    (a run in another process loads them). Without weights, `random_weights_loader` builds them in memory."""
    shape, model_type = shapes[name]
    out = work / "models" / name
    if (out / "config.json").exists() and (not weights or any(out.glob("*.safetensors"))):
        return out
    out.mkdir(parents=True, exist_ok=True)
    base = json.loads((skeleton_dir / "config.json").read_text())
    config = {k: v for k, v in base.items() if k in ("bos_token_id", "eos_token_id", "pad_token_id", "rms_norm_eps",
                                                      "max_position_embeddings", "rope_theta", "hidden_act")}
    config.update({"model_type": model_type, "architectures": ["Qwen2ForCausalLM" if model_type == "qwen2"
                                                               else "LlamaForCausalLM"],
                   "hidden_size": shape.hidden, "num_hidden_layers": shape.layers,
                   "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
                   "intermediate_size": shape.intermediate, "vocab_size": shape.vocab,
                   "tie_word_embeddings": shape.tied, "hidden_act": "silu", "max_position_embeddings": 32768})
    if model_type == "llama":
        config["attention_bias"] = shape.qkv_bias
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for f in skeleton_dir.iterdir():
        if f.name not in ("config.json", "generation_config.json") and f.is_file():
            shutil.copy(f, out / f.name)
    if weights:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out), dtype=torch.bfloat16)
        model.save_pretrained(out)
        del model
    return out


class random_weights_loader:
    """Within the block, AutoModelForCausalLM.from_pretrained builds random weights of the folder's config straight
    on the device asked for (no weights on disk: a 7B model would take minutes to write and read)."""

    def __enter__(self):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        self.cls, self.original = AutoModelForCausalLM, AutoModelForCausalLM.from_pretrained

        def build(path, *args, dtype=None, device_map=None, quantization_config=None, **kwargs):
            if quantization_config is not None:
                raise RuntimeError("random weights are not quantized: QLoRA rows are not part of this check")
            device = "cuda" if device_map is not None else "cpu"
            torch.manual_seed(0)
            with torch.device(device):
                return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=dtype)

        AutoModelForCausalLM.from_pretrained = build
        return self

    def __exit__(self, *exc):
        self.cls.from_pretrained = self.original


# ---- one pipeline run in this process ------------------------------------------------------------------------


class RowTimeout(BaseException):
    """Not an Exception: the trainer's own fallbacks (static decoding's, for one) catch those and go on."""


def run_config(model_dir: Path, fields: dict, steps: int) -> dict:
    from pipeline.setup.config import RunConfig

    known = {f.name for f in dataclasses.fields(RunConfig)}
    cfg = {"model": str(model_dir), "max_steps": steps, "save_steps": 10_000, "merge_at_end": False,
           "probe_every": 0, "rewards": SEED_000_REWARDS, **fields}
    dropped = sorted(set(cfg) - known)  # e.g. generation_engine on a checkout without it
    return {k: v for k, v in cfg.items() if k in known}, dropped


def train_here(run_dir: Path, cfg_dict: dict, seconds: float, on_trainer=None) -> dict:
    """pipeline.train.run_training in this process on random weights, stopped by an alarm after `seconds`.
    Returns state, step times, completion lengths and peak memory; an out-of-memory is a result, not a crash."""
    import torch

    import pipeline.train as trainer_module
    from pipeline.run_folder import runs
    from pipeline.models.loading import is_out_of_memory

    run_dir.mkdir(parents=True, exist_ok=True)
    runs.write_json_atomic(run_dir / "config.json", cfg_dict)
    cuda = torch.cuda.is_available()
    build = trainer_module.build_trainer

    def build_and_hook(*args, **kwargs):
        from transformers.trainer_callback import PrinterCallback

        trainer = build(*args, **kwargs)
        trainer.remove_callback(PrinterCallback)  # the trainer's own dict of logs on stdout, every step
        if on_trainer:
            on_trainer(trainer)
        return trainer

    def alarm(signum, frame):
        raise RowTimeout

    result = {"state": None}
    reset_compiled()
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(max(int(seconds), 1))
    trainer_module.build_trainer = build_and_hook
    t0 = time.time()
    try:
        with random_weights_loader():
            result["state"] = trainer_module.run_training(run_dir)
    except RowTimeout:
        result["state"] = "timed out"
    except Exception as exc:  # noqa: BLE001 - an out-of-memory is a row of the table
        result["state"] = "OOM" if is_out_of_memory(exc) else "failed"
        if result["state"] == "failed":
            result["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        exc.__traceback__ = None  # frames holding tensors go with it
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        trainer_module.build_trainer = build
    result["wall_s"] = time.time() - t0
    result["generation"] = generation_of(run_dir)
    metrics = runs.read_metrics(run_dir)
    result["step_seconds"] = [m["step_seconds"] for m in metrics]
    result["completion_lengths"] = [m["completion_length"] for m in metrics]
    if cuda:
        result["peak_allocated"] = torch.cuda.max_memory_allocated()
        result["peak_reserved"] = torch.cuda.max_memory_reserved()
        gc.collect()
        torch.cuda.empty_cache()
        result["left_allocated"] = torch.cuda.memory_allocated()  # a leak would count in the next row's peak
    return result


def reset_compiled() -> None:
    """Forget the compiled decoding steps of earlier runs in this process: each run compiles its own, and the
    recompile limit (8 by default) would otherwise make later runs decode uncompiled."""
    import torch

    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()


def generation_of(run_dir: Path) -> str:
    """How the run sampled its completions, from its status.json: static, or eager and why."""
    from pipeline.run_folder.jobstate import read_status

    status = read_status(run_dir)
    name = status.get("generation") or "?"
    return f"{name} ({status['generation_note']})" if status.get("generation_note") else name


def steady(values: list[float]) -> float | None:
    """The median after the first (warm-up) value; the first when it is the only one."""
    if not values:
        return None
    return statistics.median(values[1:]) if len(values) > 1 else values[0]


# ---- a. where a step's time goes ----------------------------------------------------------------------------


class StepProfile:
    """Inclusive seconds per trainer method, with torch.cuda.synchronize() at each boundary (so GPU work is billed
    to the method that queued it; this slows the step a little, which is why only this part does it)."""

    WRAPPED = {"_generate_single_turn": "generation", "_calculate_rewards": "rewards",
               "_generate_and_score_completions": "generate-and-score", "_prepare_inputs": "prepare inputs",
               "compute_loss": "loss forward", "training_step": "training step", "log": "logging"}

    def __init__(self, timed_steps: int = 10**9):
        self.totals: dict[str, float] = {}
        self.counting = False
        self.begin = None
        self.steps: list[float] = []
        self.each: list[dict[str, float]] = []  # each timed step's own totals (the table gives their mean)
        self.current: dict[str, float] = {}
        self.global_step = 0  # the trainer's step count when the current step began
        self.timed_steps = timed_steps  # steps 1..timed_steps-1 are timed; later ones (the op profile's) are not
        self.step_hooks: list = []  # (event, global_step) -> None, called at "begin" and "end" of every step

    def sync(self):
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def add(self, label: str, seconds: float):
        if self.counting:
            self.totals[label] = self.totals.get(label, 0.0) + seconds
            self.current[label] = self.current.get(label, 0.0) + seconds

    def wrap(self, trainer, method: str, label: str):
        import torch

        inner = getattr(trainer, method)

        def timed(*args, **kwargs):
            self.sync()
            t0 = time.perf_counter()
            try:
                phase = label or ("log-probs, policy" if torch.is_grad_enabled() else "log-probs, reference/old")
                with torch.profiler.record_function(f"## {phase}"):  # a range in the op profile
                    return inner(*args, **kwargs)
            finally:
                self.sync()
                name = label
                if method == "_get_per_token_logps_and_entropies":
                    name = "log-probs, policy (in the loss)" if torch.is_grad_enabled() else \
                        "log-probs, reference/old (no grad)"
                self.add(name, time.perf_counter() - t0)
                if method == "log":
                    self.end_step()

        setattr(trainer, method, timed)

    def install(self, trainer):
        from transformers import TrainerCallback

        for method, label in self.WRAPPED.items():
            self.wrap(trainer, method, label)
        self.wrap(trainer, "_get_per_token_logps_and_entropies", "")
        profile = self

        class Marks(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                for hook in profile.step_hooks:
                    hook("begin", state.global_step)
                profile.sync()
                profile.begin = time.perf_counter()
                profile.counting = 1 <= state.global_step < profile.timed_steps  # the first step is warm-up
                profile.global_step = state.global_step

            def on_pre_optimizer_step(self, args, state, control, **kw):
                profile.sync()
                self.t_opt = time.perf_counter()

            def on_optimizer_step(self, args, state, control, **kw):
                profile.sync()
                profile.add("optimizer", time.perf_counter() - self.t_opt)

        trainer.add_callback(Marks())

    def end_step(self):
        """A step ends once its logs are written (the trainer logs after on_step_end)."""
        if self.begin is not None and self.counting:
            self.steps.append(time.perf_counter() - self.begin)
            self.each.append({**self.current, "step": self.steps[-1]})
        self.current = {}
        if self.begin is not None:
            for hook in self.step_hooks:
                hook("end", self.global_step)
        self.begin = None

    def table(self) -> list[tuple[str, float]]:
        t, n = self.totals, max(len(self.steps), 1)
        get = lambda k: t.get(k, 0.0)
        step = sum(self.steps)
        rows = [
            ("generation", get("generation")),
            ("log-probs, reference/old (no grad)", get("log-probs, reference/old (no grad)")),
            ("rewards", get("rewards")),
            ("scoring rest: decoding text, advantages, host syncs",
             get("generate-and-score") - get("generation") - get("log-probs, reference/old (no grad)")
             - get("rewards")),
            ("loss forward (policy log-probs inside)", get("loss forward")),
            ("  of which policy log-probs", get("log-probs, policy (in the loss)")),
            ("backward", get("training step") - get("prepare inputs") - get("loss forward")),
            ("optimizer (clip, step)", get("optimizer")),
            ("logging (metrics, groups)", get("logging")),
        ]
        accounted = sum(v for k, v in rows if not k.startswith("  ")) + (get("prepare inputs")
                                                                          - get("generate-and-score"))
        rows.append(("other: batch slicing, data, scheduler, callbacks", step - accounted))
        return [(k, v / n) for k, v in rows] + [("step (wall, synchronised)", step / n)]


class OpProfile:
    """torch.profiler over one whole step after the timed ones: what the host dispatches (aten ops, kernel launches,
    host syncs) and what the GPU runs, so a step far above its arithmetic says where its time goes."""

    def __init__(self, at_step: int):
        self.at_step = at_step
        self.prof = None
        self.wall = None
        self.done = False  # the profiled step ended (else the run stopped inside it, or before it)

    def hook(self, event: str, step: int) -> None:
        import torch

        if step != self.at_step:
            return
        if event == "begin":
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=activities)
            self.prof.__enter__()
            self.wall = time.perf_counter()
        elif self.prof is not None and not self.done:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.prof.__exit__(None, None, None)
            self.wall = time.perf_counter() - self.wall
            self.done = True

    def close(self) -> None:
        """Stops a profiler the run left running (it ended inside the profiled step)."""
        if self.prof is not None and not self.done:
            self.prof.__exit__(None, None, None)
            self.prof = None

    def summary(self, top: int = 14) -> tuple[list[str], dict]:
        """Lines to print and the figures to record."""
        from torch.autograd import DeviceType

        if self.prof is None or not self.done:
            self.close()
            return ["   (no step was profiled: the run ended first)"], {}
        rows = self.prof.key_averages()
        spans = [(e.name, e.time_range.start, e.time_range.end, e.thread) for e in self.prof.events()
                 if e.name.startswith(("## ", "aten::")) or e.name in LAUNCHES]
        phases = phase_counts(spans)
        lines, figures = op_summary([(e.key, e.count, e.self_cpu_time_total, e.cpu_time_total,
                            getattr(e, "self_device_time_total", 0.0) or 0.0,
                            getattr(e, "device_type", None) not in (None, DeviceType.CPU)) for e in rows],
                          self.wall, top)
        lines.insert(1, "   by phase (innermost; aten calls / kernel launches): " + "; ".join(
            f"{name} {n_aten}/{n_launch}" for name, (n_aten, n_launch) in phases.items()))
        figures["by_phase"] = phases
        return lines, figures

    def save_trace(self, path: Path, limit_bytes: int = 12 * 2**20) -> str:
        """The step's Chrome trace, gzipped, where it is small enough to come back from the machine."""
        import gzip

        if self.prof is None or not self.done:
            return ""
        raw = path.with_suffix("")  # x.json.gz -> x.json
        self.prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        if path.stat().st_size > limit_bytes:
            path.unlink()
            return f"trace left out: over {limit_bytes >> 20} MiB gzipped"
        return f"trace {path.name} ({path.stat().st_size / 2**20:.1f} MiB)"


LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "aten::_local_scalar_dense")


def phase_counts(spans: list[tuple[str, float, float, int]]) -> dict[str, tuple[int, int]]:
    """(name, start, end, thread) of the step's "## phase" ranges, aten ops and kernel launches -> per phase, the
    aten calls and launches that began inside it on its thread (the innermost phase counts them); what began in
    none (the backward, on autograd's own thread; the optimizer) is "elsewhere".

    >>> phase_counts([("## a", 0, 10, 1), ("## b", 2, 5, 1), ("aten::mm", 1, 2, 1), ("aten::mm", 3, 4, 1),
    ...               ("cudaLaunchKernel", 3.5, 3.6, 1), ("aten::add", 3, 4, 2), ("aten::mul", 11, 12, 1)])
    {'a': (1, 0), 'b': (1, 1), 'elsewhere': (2, 0)}
    """
    phases = sorted((s for s in spans if s[0].startswith("## ")), key=lambda s: s[2] - s[1])  # innermost first
    counts: dict[str, list[int]] = {}
    for name, start, _, thread in spans:
        if name.startswith("## "):
            continue
        home = next((p[0][3:] for p in phases if p[3] == thread and p[1] <= start < p[2]), "elsewhere")
        slot = counts.setdefault(home, [0, 0])
        slot[0 if name.startswith("aten::") else 1] += 1
    order = [p[0][3:] for p in sorted(phases, key=lambda s: s[1])] + ["elsewhere"]
    return {k: tuple(counts[k]) for k in dict.fromkeys(order) if k in counts}


def op_summary(events: list[tuple[str, int, float, float, float, bool]], wall_s: float, top: int = 14
               ) -> tuple[list[str], dict]:
    """(name, calls, self host us, host us with children, self device us, whether it is a GPU kernel) per name ->
    printed lines and figures. "## name" rows are the step's phases (StepProfile's record_function ranges).

    >>> lines, figures = op_summary([("aten::mm", 300, 3000.0, 3000.0, 900.0, False),
    ...                               ("aten::add", 100, 500.0, 500.0, 0.0, False),
    ...                               ("cudaLaunchKernel", 400, 2000.0, 2000.0, 0.0, False),
    ...                               ("aten::_local_scalar_dense", 2, 10.0, 10.0, 0.0, False),
    ...                               ("## generation", 1, 100.0, 9000.0, 0.0, False),
    ...                               ("gemm_kernel", 300, 0.0, 0.0, 900.0, True)], wall_s=0.02)
    >>> figures["aten_calls"], figures["launches"], figures["syncs"], figures["gpu_busy_s"]
    (402, 400, 2, 0.0009)
    >>> [line.split() for line in lines if "generation" in line]
    [['##', 'generation', '9.000', 'ms']]
    """
    aten = sum(e[1] for e in events if e[0].startswith("aten::"))
    launches = sum(e[1] for e in events if e[0] in LAUNCHES)
    syncs = sum(e[1] for e in events if e[0] in SYNCS)
    kernels = [e for e in events if e[5]]
    busy = sum(e[4] for e in kernels) / 1e6
    figures = {"wall_s": round(wall_s, 4), "aten_calls": aten, "launches": launches, "syncs": syncs,
               "gpu_busy_s": round(busy, 6)}
    lines = [f"   one step under torch.profiler: {wall_s:.3f} s wall; {aten} aten op calls, "
             f"{launches} kernel launches, {syncs} host syncs; GPU kernels busy {busy:.3f} s "
             f"({busy / max(wall_s, 1e-9):.0%} of the wall)"]
    phases = [e for e in sorted(events, key=lambda e: -e[3]) if e[0].startswith("## ")]
    lines += [f"   {e[0]:<48} {e[3] / 1e3:9.3f} ms" for e in phases]
    host = sorted((e for e in events if not e[0].startswith("## ") and not e[5]), key=lambda e: -e[2])[:top]
    lines.append(f"   top host time (self):                            {'calls':>7} {'ms':>9}")
    lines += [f"     {e[0][:48]:<48} {e[1]:7d} {e[2] / 1e3:9.3f}" for e in host]
    device = sorted(kernels, key=lambda e: -e[4])[:top]
    if device:
        lines.append(f"   top GPU time (kernels):                          {'calls':>7} {'ms':>9}")
        lines += [f"     {e[0][:48]:<48} {e[1]:7d} {e[4] / 1e3:9.3f}" for e in device]
    figures["top_host"] = [[e[0], e[1], round(e[2] / 1e3, 3)] for e in host]
    figures["top_gpu"] = [[e[0], e[1], round(e[4] / 1e3, 3)] for e in device]
    figures["phases_ms"] = {e[0][3:]: round(e[3] / 1e3, 3) for e in phases}
    return lines, figures


def with_gpu_logps_pass(trainer):
    """The trainer with TRL's own log-prob pass, the one a GPU run takes (a CPU run takes the shared-prompt pass
    instead): so a CPU smoke run's op profile counts the operations a GPU step dispatches."""
    import types

    from trl import GRPOTrainer

    trainer._get_per_token_logps_and_entropies = types.MethodType(
        GRPOTrainer._get_per_token_logps_and_entropies, trainer)
    return trainer


def part_profile(ctx) -> None:
    print("\n== a. where a GRPO step's time goes (synchronised at each boundary; the first step left out)")
    for name in ctx.profile_shapes:
        if ctx.left() < 30:
            print(f"{name}: skipped, the time budget is spent")
            continue
        folder = model_folder(name, ctx.shapes, ctx.skeleton, ctx.work, weights=False)
        steps = ctx.profile_steps + (1 if ctx.op_profile else 0)  # the op profile's step comes after the timed ones
        cfg, dropped = run_config(folder, {**ctx.ab_fields, **ctx.engine_field}, steps)
        profile = StepProfile(timed_steps=ctx.profile_steps)
        ops = OpProfile(at_step=ctx.profile_steps) if ctx.op_profile else None
        if ops:
            profile.step_hooks.append(ops.hook)
        t0 = time.time()
        gpu_pass = with_gpu_logps_pass if ctx.smoke and ctx.gpu_pass else (lambda trainer: trainer)
        result = train_here(ctx.work / f"profile-{name}", cfg, min(ctx.left() - 5, ctx.part_cap),
                            on_trainer=lambda t: profile.install(gpu_pass(t)))
        print(f"-- {name}: {result['state']}, {len(profile.steps)} step(s) profiled in {time.time() - t0:.0f} s; "
              f"G={cfg['num_generations']}, batch {cfg['batch_size']}, {cfg['max_completion_length']} tokens, "
              f"precision {ctx.precision}, generation {result['generation']}"
              + (f", first step {result['step_seconds'][0]:.1f} s (warm-up and compile)"
                 if result["step_seconds"] else "")
              + (f" (no {', '.join(dropped)} field here)" if dropped else ""))
        if result.get("error"):
            print(f"   error: {result['error']}")
        if not profile.steps:
            continue
        step = profile.table()[-1][1]
        for label, seconds in profile.table():
            print(f"   {label:<52} {seconds:8.3f} s  {seconds / step:6.1%}")
        # each step apart: a pass that meets sequence lengths it has not met before can cost far more than the mean
        for key in ("step", "generation", "log-probs, reference/old (no grad)", "loss forward", "training step"):
            print(f"   {key + ', step by step':<52} " + " ".join(f"{e.get(key, 0.0):.3f}" for e in profile.each))
        op_figures = {}
        if ops:
            lines, op_figures = ops.summary()
            print("\n".join(lines))
            saved = ops.save_trace(ctx.out / f"trace-{name}.json.gz")
            if saved:
                print(f"   {saved}")
            ops.prof = None
        ctx.record("profile", {"shape": name, "config": cfg, "state": result["state"],
                               "seconds_per_step": dict(profile.table()), "each_step": profile.each,
                               "op_profile": op_figures})


# ---- d. the decoding step, compiled three ways ---------------------------------------------------------------

# How static decoding compiles its step (pipeline/models/static_decode.py: compile_on_gpu) and the alternative: CUDA
# graphs over the unfused aten ops, which skips TorchInductor's code generation (the most of a first step's tens of
# seconds) at the price of more, smaller kernels in the graph.
# The third: the shipped compile with the sampling (processors, the draw, the end-of-row bookkeeping) inside the graph
# too (StaticDecoder(sample_in_graph=True)), so a token is one replay and a few copies.
DECODE_COMPILES = {"inductor + CUDA graphs (as shipped)": ({"mode": "reduce-overhead"}, False),
                   "CUDA graphs alone (backend cudagraphs)": ({"backend": "cudagraphs"}, False),
                   "inductor + CUDA graphs, sampling in the graph": ({"mode": "reduce-overhead"}, True)}


def part_decode(ctx) -> None:
    """The first call (compiling) and a steady call of StaticDecoder on the bundled shape with a merged LoRA, as the
    trainer samples: part a's rows, prompts and completion length, every row running to the last token."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    from pipeline.models import engine
    from pipeline.models.static_decode import StaticDecoder

    print("\n== d. the decoding step compiled three ways (bundled shape, merged LoRA; first call compiles)")
    name = next(iter(ctx.shapes))
    folder = model_folder(name, ctx.shapes, ctx.skeleton, ctx.work, weights=False)
    cuda = torch.cuda.is_available()
    dtype = torch.bfloat16 if ctx.precision == "bf16" else torch.float32
    torch.manual_seed(0)
    with torch.device("cuda" if cuda else "cpu"):
        base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=dtype)
    base.generation_config.eos_token_id = None  # random weights: every row runs the whole length, every time
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.eval()
    rows, new = ctx.ab_fields["batch_size"], ctx.ab_fields["max_completion_length"]
    width = 8 if ctx.smoke else 200
    prompts = [torch.randint(100, 40000, (width,)).tolist() for _ in range(2)]
    prompt_ids = [p for p in prompts for _ in range(rows // 2)]
    config = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new,
                              pad_token_id=0, eos_token_id=None)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for label, (options, in_graph) in DECODE_COMPILES.items():
        if ctx.left() < 45:
            print(f"   {label}: skipped, the time budget is spent")
            continue
        reset_compiled()

        def compiler(step, device, options=options):
            return torch.compile(step, dynamic=False, **options) if cuda else step

        decoder = StaticDecoder(compiler=compiler, sample_in_graph=in_graph)
        seconds, error = [], None
        try:
            with torch.no_grad(), engine.merged_adapter(model, decoder.weight_copies):
                for _ in range(4):
                    if seconds and ctx.left() < 10:
                        break
                    sync()
                    t0 = time.perf_counter()
                    tokens = decoder.generate(model, prompt_ids, config)
                    sync()
                    seconds.append(time.perf_counter() - t0)
        except Exception as exc:  # noqa: BLE001 - a backend that fails here is a finding, printed
            error = f"{type(exc).__name__}: {str(exc)[:300]}"
        call = steady(seconds)
        if error or not seconds:
            print(f"   {label:<46} failed: {error}")
        else:
            print(f"   {label:<46} first call {seconds[0]:6.1f} s; then {call:6.3f} s a call of {rows} rows x "
                  f"{tokens.size(1)} tokens, {1000 * call / tokens.size(1):5.2f} ms a token"
                  + ("" if cuda else " (CPU: not compiled)"))
        ctx.record("decode", {"compile": label, "options": options, "sample_in_graph": in_graph, "rows": rows,
                              "tokens": new,
                              "seconds": seconds, "error": error})
        del decoder
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()


# ---- b. pipeline vs plain TRL, interleaved ---------------------------------------------------------------------


def part_versus(ctx) -> None:
    from bench.train_step import run_pipeline, run_plain
    from pipeline.setup.config import RunConfig
    from pipeline.setup.data import load_dataset_split

    print("\n== b. s/step, this app's pipeline vs plain TRL (HF generate), interleaved A/B/A/B, same settings; "
          "a step is the wall time between consecutive logged steps, the first left out")
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    threads = os.cpu_count() or 1
    setups = {}
    for name in ctx.versus_shapes:
        folder = model_folder(name, ctx.shapes, ctx.skeleton, ctx.work, weights=True)
        fields, dropped = run_config(folder, {**ctx.ab_fields, **ctx.engine_field, "precision": ctx.precision},
                                     ctx.versus_steps)
        setups[name] = (folder, fields, dropped, RunConfig.from_dict(fields), {"pipeline": [], "plain TRL": []})
    prompts = ctx.work / "prompts.json"
    cfg0 = next(iter(setups.values()))[3]
    prompts.write_text(json.dumps([r["prompt"] for r in load_dataset_split(cfg0.dataset, cfg0.seed)[0]]))
    # round by round, each shape's A then B: when the budget runs out, every shape has had its first pair
    for i in range(ctx.rounds):
        for name, (folder, fields, dropped, cfg, sides) in setups.items():
            for side in sides:
                if ctx.left() < 40:
                    print(f"{name} round {i + 1} {side}: skipped, the time budget is spent")
                    continue
                t0 = time.time()
                try:
                    if side == "pipeline":
                        r = run_pipeline(cfg, ctx.work, f"versus-{name}-{i}", env)
                    else:
                        r = run_plain(cfg, folder, prompts, ctx.work, f"plain-{name}-{i}", env, threads)
                except subprocess.CalledProcessError as exc:
                    print(f"{name} round {i + 1} {side}: failed ({exc}); logs under {ctx.work}")
                    continue
                if side == "pipeline":
                    r["generation"] = generation_of(ctx.work / f"versus-{name}-{i}")
                sides[side].append(r)
                print(f"{name} round {i + 1} {side}: {r['seconds'] / max(r['steps'], 1):.3f} s/step, "
                      f"{r['tokens'] / max(r['steps'], 1):.0f} completion tokens/step ({time.time() - t0:.0f} s wall)"
                      + (f", generation {r['generation']}" if side == "pipeline" else ""))
    for name, (folder, fields, dropped, cfg, sides) in setups.items():
        done = {side: rs for side, rs in sides.items() if rs and sum(r["steps"] for r in rs)}
        if len(done) < 2:
            print(f"{name}: no complete A/B pair")
            continue
        per_step = {s: sum(r["seconds"] for r in rs) / sum(r["steps"] for r in rs) for s, rs in done.items()}
        per_tok = {s: sum(r["seconds"] for r in rs) / max(sum(r["tokens"] for r in rs), 1) for s, rs in done.items()}
        print(f"{name}, {ctx.precision}, G={cfg.num_generations}, batch {cfg.batch_size}, "
              f"{cfg.max_completion_length} tokens, {len(done['pipeline'])}+{len(done['plain TRL'])} runs: s/step "
              f"pipeline {per_step['pipeline']:.3f}, plain TRL {per_step['plain TRL']:.3f}, ratio "
              f"{per_step['pipeline'] / per_step['plain TRL']:.3f}; per completion token ratio "
              f"{per_tok['pipeline'] / per_tok['plain TRL']:.3f}"
              + (f" (engine setting ignored: no {', '.join(dropped)} field here)" if dropped else ""))
        ctx.record("versus", {"shape": name, "config": fields, "rounds": sides, "s_per_step": per_step})


# ---- e. the training passes compiled ------------------------------------------------------------------------


@contextlib.contextmanager
def compiled_training_passes():
    """Runs started inside train with the trainer's own torch_compile (TorchInductor, default mode), by decoder layer:
    accelerate's regional compilation compiles one layer's code and every layer reuses it. The model the loss
    forward and backward go through is the compiled one (the reference pass uses the trainer's unwrapped model).
    Sampling unwraps the model with its compiled layers kept, so the prefill (and, eager, each decoded token) is a
    variant of its own beside the loss forward's: the recompile limit is raised for the run."""
    import accelerate.utils
    import torch

    import pipeline.train as trainer_module

    args_of, plugin = trainer_module.grpo_args, accelerate.utils.TorchDynamoPlugin
    limit = torch._dynamo.config.recompile_limit

    def with_compile(*args, **kwargs):
        out = args_of(*args, **kwargs)
        out.torch_compile, out.torch_compile_backend = True, "inductor"
        return out

    class Regional(plugin):
        def __init__(self, *args, **kwargs):
            kwargs["use_regional_compilation"] = True
            super().__init__(*args, **kwargs)

    trainer_module.grpo_args, accelerate.utils.TorchDynamoPlugin = with_compile, Regional
    torch._dynamo.config.recompile_limit = max(limit, 64)
    try:
        yield
    finally:
        trainer_module.grpo_args, accelerate.utils.TorchDynamoPlugin = args_of, plugin
        torch._dynamo.config.recompile_limit = limit


def interleaved_runs(ctx, key: str, sides: dict, shapes: list[str]) -> None:
    """The pipeline's run on each of `shapes` under each side, round by round (A/B/A/B): side name ->
    (a context the run starts inside, a function given the built trainer, or None). Prints each run's steps and
    the steady s/step (median after the first two steps: the compiles, the dynamic-shape recompile) against the
    first side's; records them under `key`."""
    from pipeline.run_folder import runs

    for name in shapes:
        folder = model_folder(name, ctx.shapes, ctx.skeleton, ctx.work, weights=False)
        cfg, _ = run_config(folder, {**ctx.ab_fields, **ctx.engine_field}, ctx.versus_steps + 1)
        found: dict[str, list] = {side: [] for side in sides}
        for i in range(ctx.rounds):
            for side, (context, on_trainer) in sides.items():
                if ctx.left() < 45:
                    print(f"{name} round {i + 1} {side}: skipped, the time budget is spent")
                    continue
                run_dir = ctx.work / f"{key}-{name}-{i}-{side.replace(' ', '_')}"
                with context():
                    r = train_here(run_dir, cfg, min(ctx.left() - 5, ctx.part_cap), on_trainer=on_trainer)
                metrics = runs.read_metrics(run_dir)
                first = metrics[0] if metrics else {}
                secs = r["step_seconds"]
                later = secs[2:] or secs[1:]
                r.update(steady=statistics.median(later) if later else None, step1_loss=first.get("loss"),
                         step1_kl=first.get("kl"), step2_loss=metrics[1].get("loss") if len(metrics) > 1 else None)
                found[side].append(r)
                print(f"{name} round {i + 1} {side}: {r['state']}, steps {', '.join(f'{x:.2f}' for x in secs)} s; "
                      f"steady {fmt(r['steady'], '.3f')} s/step; step 1 loss {fmt(r['step1_loss'], '.6g')}, "
                      f"step 2 loss {fmt(r['step2_loss'], '.6g')}; peak {fmt_gib(r.get('peak_allocated'))}; "
                      f"generation {r['generation']}" + (f"; error {r['error']}" if r.get("error") else ""))
        steady = {s: statistics.median(v) for s, v in
                  ((s, [r["steady"] for r in rs if r["steady"]]) for s, rs in found.items()) if v}
        base = next(iter(sides))
        if base in steady and len(steady) > 1:
            print(f"{name}: steady s/step " + ", ".join(f"{s} {v:.3f}" for s, v in steady.items()) + "; ratio to "
                  f"{base}: " + ", ".join(f"{s} {v / steady[base]:.3f}" for s, v in steady.items() if s != base))
        ctx.record(key, {"shape": name, "config": cfg, "runs": found})


def part_compiled(ctx) -> None:
    print("\n== e. the training passes compiled by decoder layer (torch_compile, regional) vs as shipped, interleaved "
          "A/B/A/B, same settings; steady = median step after the first two (compiles, the dynamic-shape recompile)")
    interleaved_runs(ctx, "compiled", {"as shipped": (contextlib.nullcontext, None),
                                       "compiled": (compiled_training_passes, None)}, ctx.versus_shapes)


# ---- f. what the step profile pointed at, each put back ------------------------------------------------------


def with_cudnn_attention(trainer) -> None:
    """The run as before attention_kernels: cuDNN's attention kernels allowed (the trainer set them off)."""
    import torch

    torch.backends.cuda.enable_cudnn_sdp(True)


def with_guards_every_token(trainer) -> None:
    """The run as before StaticDecoder.skip_guards: the compiled decoding step checks its guards at every token."""
    if getattr(trainer, "studio_static", None) is not None:
        trainer.studio_static.skip_guards = False


def part_profile_fixes(ctx) -> None:
    """The pipeline as shipped against the same run with one of the two changes the step profile led to taken back:
    cuDNN's attention (a plan built per new sequence length in every pass) and the decoding step's guards checked
    at every token (about 2 ms a token on the host). The first of the part's shapes only."""
    print("\n== f. as shipped vs each change the step profile led to taken back, interleaved A/B/C, same settings; "
          "steady = median step after the first two")
    interleaved_runs(ctx, "fixes", {"as shipped": (contextlib.nullcontext, None),
                                    "cuDNN attention": (contextlib.nullcontext, with_cudnn_attention),
                                    "guards every token": (contextlib.nullcontext, with_guards_every_token)},
                     ctx.versus_shapes[:1])  # the bundled shape: three runs, each compiling, fill the part's time

# ---- c. the size table ---------------------------------------------------------------------------------------


def size_rows(ctx) -> list[dict]:
    """Every (shape, preset, checkpointing) row, each with the estimate: the presets' own setting (checkpointing on)
    first, then the others that the estimate says fit, then those it says do not (run last, to see the OOM)."""
    from pipeline.setup.config import RunConfig
    from pipeline.setup.presets import PRESETS

    rows = []
    for preset, full_name in PRESET_NAMES.items():
        if preset not in ctx.size_presets:
            continue
        for name in ctx.size_shapes:
            for checkpointing in ctx.size_checkpointing:
                fields = {k: PRESETS[full_name][k] for k in PRESET_FIELDS if k in PRESETS[full_name]}
                fields.update(gradient_checkpointing=checkpointing, precision=ctx.precision, **ctx.engine_field)
                if ctx.smoke:  # a CPU cannot take the presets' batches in seconds: 1 prompt, 8 tokens
                    fields.update(batch_size=fields["num_generations"], max_completion_length=8)
                folder = ctx.work / "models" / name
                cfg_dict, _ = run_config(folder, fields, ctx.size_steps)
                shape = ctx.shapes[name][0]
                est = estimate(shape, settings_from_config(RunConfig.from_dict(cfg_dict), ctx.precision, 251))
                fits = est.total <= ctx.card_total if ctx.card_total else True
                rows.append({"shape": name, "preset": preset, "checkpointing": checkpointing, "config": cfg_dict,
                             "estimate": est, "order": (0 if checkpointing else 1 if fits else 2)})
    return sorted(rows, key=lambda r: r["order"])


def part_size_table(ctx) -> None:
    print(f"\n== c. size table: {ctx.size_steps} step(s) a row; random weights, TL;DR prompts (longest 251 tokens), "
          f"precision {ctx.precision}; estimate = pipeline/setup/gpu_memory.py (allocated by tensors / on the card)")
    header = (f"{'shape':<13} {'preset':<13} {'ckpt':<4} {'state':<10} {'s/step':>7} {'tok/s':>7} {'peak alloc':>10} "
              f"{'reserved':>9} {'estimate':>9} {'error':>7} {'est. card':>9}")
    print(header)
    for row in size_rows(ctx):
        est = row["estimate"]
        label = f"{row['shape']:<13} {row['preset']:<13} {'on' if row['checkpointing'] else 'off':<4}"
        if ctx.left() < ctx.min_row_s:
            print(f"{label} skipped (time budget spent); estimate {est.allocated / GIB:.2f} GiB allocated, "
                  f"{est.total / GIB:.2f} GiB on the card")
            continue
        model_folder(row["shape"], ctx.shapes, ctx.skeleton, ctx.work, weights=False)
        seconds = min(ctx.left() - 10, ctx.row_cap)
        if ctx.isolate:
            r = run_row_in_child(ctx, row, seconds)
        else:
            run_dir = ctx.work / f"size-{row['shape']}-{row['preset'].replace(' ', '_')}-{row['checkpointing']}"
            r = train_here(run_dir, row["config"], seconds)
        cfg = row["config"]
        s_step = steady(r.get("step_seconds") or [])
        lengths = r.get("completion_lengths") or []
        tok_s = (steady(lengths) * cfg["batch_size"] / s_step) if s_step and lengths and steady(lengths) else None
        peak, reserved = r.get("peak_allocated"), r.get("peak_reserved")
        error = f"{(est.allocated - peak) / peak:+.0%}" if peak else "n/a"
        print(f"{label} {r['state']:<10} {fmt(s_step, '.2f'):>7} {fmt(tok_s, '.0f'):>7} {fmt_gib(peak):>10} "
              f"{fmt_gib(reserved):>9} {fmt_gib(est.allocated):>9} {error:>7} {fmt_gib(est.total):>9}"
              + (f"  {r['generation']}" if r.get("generation") else "")
              + (f"  {r['error']}" if r.get("error") else "")
              + (f"  ({fmt_gib(r['left_allocated'])} still allocated after it)"
                 if r.get("left_allocated", 0) > 0.25 * GIB else ""))
        ctx.record("size", {**{k: v for k, v in row.items() if k != "estimate"}, "result": r,
                            "estimate": {"allocated": est.allocated, "reserved": est.reserved, "total": est.total,
                                         "peak_phase": est.peak_phase, "terms": est.breakdown()}})


def run_row_in_child(ctx, row: dict, seconds: float) -> dict:
    """A size-table row in a fresh process: each starts with an empty card, and an OOM or a hang can't spoil the
    rows after it."""
    spec = ctx.work / f"row-{row['shape']}-{row['preset'].replace(' ', '_')}-{row['checkpointing']}.json"
    spec.write_text(json.dumps({"run_dir": str(spec.with_suffix("")), "config": row["config"], "seconds": seconds}))
    try:
        proc = subprocess.run([sys.executable, __file__, "row", str(spec)], capture_output=True, text=True,
                              timeout=seconds + 60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"state": "timed out"}
    lines = [l for l in proc.stdout.splitlines() if l.startswith("ROW ")]
    if not lines:
        return {"state": "failed", "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or "no output"}
    return json.loads(lines[-1][4:])


def row(spec_path: Path) -> int:
    spec = json.loads(spec_path.read_text())
    result = train_here(Path(spec["run_dir"]), spec["config"], spec["seconds"])
    print("ROW " + json.dumps(result))
    return 0


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def fmt_gib(value) -> str:
    return "-" if not value else f"{value / GIB:.2f}G"


# ---- the whole call ------------------------------------------------------------------------------------------


def picked(names: list[str], wanted: str) -> list[str]:
    """The names a comma-separated option keeps, in their own order; all of them when it is empty.

    >>> picked(["a", "b", "c"], "c,a"), picked(["a", "b"], "")
    (['a', 'c'], ['a', 'b'])
    """
    return [n for n in names if not wanted or n in wanted.split(",")]


class Context:
    def __init__(self, a):
        import torch

        self.smoke = a.cpu_smoke
        self.start = time.time()
        self.deadline = a.deadline or self.start + a.budget
        self.skeleton, self.out = Path(a.skeleton), Path(a.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="gpu-device-check-"))
        from pipeline.models.sources import allow_local_dirs  # its random-weight models live there

        allow_local_dirs([self.work])  # for this process and the trainers it starts
        self.shapes = SMOKE_SHAPES if self.smoke and not a.real_shapes else SHAPES
        names = list(self.shapes)
        self.profile_shapes = names[:2]
        self.versus_shapes = names[:2] if self.smoke else picked(names[:2], a.versus_shapes)
        self.size_shapes = names if self.smoke else picked(names, a.shapes)
        self.size_presets = picked(list(PRESET_NAMES), a.presets.replace("_", " "))
        self.size_checkpointing = {"both": (True, False), "on": (True,), "off": (False,)}[a.checkpointing]
        self.precision = "fp32" if self.smoke or not torch.cuda.is_available() else "bf16"
        self.card_total = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 0
        self.engine_field = {"generation_engine": a.engine} if a.engine else {}
        # part b's settings (and a's): the bundled shape at G=8 and 128 completion tokens, 2 prompts a step
        self.ab_fields = {"num_generations": 8, "batch_size": 16, "max_completion_length": 128}
        if self.smoke:
            self.ab_fields = {"num_generations": 4, "batch_size": 8, "max_completion_length": 8}  # 2 prompts, as there
        self.profile_steps = 2 if self.smoke else 3
        self.op_profile = not a.no_op_profile
        self.gpu_pass = not a.cpu_logps_pass
        self.versus_steps = 2 if self.smoke else a.versus_steps
        self.rounds = a.rounds
        self.size_steps = 1 if self.smoke else 2
        self.part_cap, self.row_cap, self.min_row_s = (120, 120, 20) if self.smoke else (150, 150, 30)
        if self.smoke and a.real_shapes:
            self.part_cap = 300  # TRL's log-prob head in plain torch over a 151,936-word vocabulary, on 2 cores
        self.isolate = a.isolate
        self.results: dict[str, list] = {part: [] for part in ("profile", "versus", "size", "decode", "compiled",
                                                                "fixes")}

    def left(self) -> float:
        return self.deadline - time.time()

    def record(self, part: str, item: dict) -> None:
        self.results[part].append(item)
        (self.out / "gpu-device-check.json").write_text(json.dumps(self.results, indent=1, default=str))


def run_all(a) -> int:
    ctx = Context(a)
    parts = {"a": part_profile, "b": part_versus, "c": part_size_table, "d": part_decode, "e": part_compiled,
             "f": part_profile_fixes}
    shapes = "the real shapes at the smoke settings (their op counts hold; their times say nothing about a GPU)" \
        if a.real_shapes else "tiny shapes, nothing here says anything about a GPU"
    print(f"work folder {ctx.work}; {ctx.left():.0f} s of budget" + (f"; CPU smoke run: {shapes}" if ctx.smoke else ""))
    whole = ctx.deadline
    for n, key in enumerate(a.parts):
        t0 = time.time()
        # a and b have caps of their own when parts come after them; the last part takes what is left
        caps = {"a": a.budget_a, "b": a.budget_b or 0.45 * (whole - t0), "d": a.budget_d, "e": a.budget_e,
                "f": a.budget_f}
        cap = caps.get(key) if a.parts[n + 1:] else None
        ctx.deadline = min(whole, t0 + cap) if cap else whole
        parts[key](ctx)
        print(f"-- part {key}: {time.time() - t0:.0f} s; {time.time() - ctx.start:.0f} s since the start")
    ctx.deadline = whole
    shutil.rmtree(ctx.work, ignore_errors=True)  # random-weight models and run folders: nothing to keep
    print(f"results: {ctx.out / 'gpu-device-check.json'}")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("skeleton", "all", "row"):
        print(__doc__)
        return 2
    if argv[0] == "skeleton":
        skeleton(Path(argv[1]))
        return 0
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames, once per run
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if argv[0] == "row":
        return row(Path(argv[1]))
    p = argparse.ArgumentParser(prog="gpu_device_check.py all")
    p.add_argument("--skeleton", required=True, help="the bundled model's config and tokenizer (make gpu-device-files)")
    p.add_argument("--out", required=True, help="folder for gpu-device-check.json")
    p.add_argument("--deadline", type=float, default=0, help="epoch seconds by which to be done (else --budget)")
    p.add_argument("--budget", type=float, default=540, help="seconds for all parts")
    p.add_argument("--budget-a", type=float, default=130, help="seconds for part a (compiles included)")
    p.add_argument("--budget-b", type=float, default=0, help="seconds for part b (0 = 45%% of what a left)")
    p.add_argument("--parts", default="abc", help="which parts, in order: a profile, b versus, c size table, "
                                                  "d the decoding step's compiles, e the training passes compiled, "
                                                  "f the profile's two changes each taken back")
    p.add_argument("--budget-f", type=float, default=240, help="seconds for part f when parts come after it")
    p.add_argument("--budget-d", type=float, default=150, help="seconds for part d when parts come after it")
    p.add_argument("--budget-e", type=float, default=200, help="seconds for part e when parts come after it")
    p.add_argument("--engine", default="", help="generation_engine for the pipeline runs (auto, eager, ...), when "
                                                "the checkout's RunConfig has that field")
    p.add_argument("--rounds", type=int, default=2, help="A/B rounds in part b")
    p.add_argument("--versus-steps", type=int, default=3, help="steps of each part b run (the first left out)")
    p.add_argument("--shapes", default="", help="part c: only these shapes, comma-separated (e.g. Qwen2.5-7B)")
    p.add_argument("--presets", default="", help="part c: only these presets, comma-separated, '_' for a space "
                                                 "(GPU_standard,GSM8K)")
    p.add_argument("--versus-shapes", default="", help="part b: only these shapes, comma-separated")
    p.add_argument("--checkpointing", choices=("both", "on", "off"), default="both",
                   help="part c: rows with gradient checkpointing on, off, or both")
    p.add_argument("--isolate", action="store_true", help="each size-table row in a fresh process (slower to start, "
                                                          "but an OOM or a leak can't touch the next row)")
    p.add_argument("--no-op-profile", action="store_true", help="part a: no torch.profiler step after the timed ones")
    p.add_argument("--real-shapes", action="store_true",
                   help="with --cpu-smoke: the real shapes at the smoke run's settings (part a's op counts for a real "
                        "model on a CPU)")
    p.add_argument("--cpu-logps-pass", action="store_true", help="with --cpu-smoke: the log-prob pass a CPU run "
                                                                   "takes (else TRL's, as on a GPU)")
    p.add_argument("--cpu-smoke", action="store_true", help="the same code on the CPU: tiny shapes, 1 step a row")
    return run_all(p.parse_args(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
