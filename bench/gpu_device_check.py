"""The Python half of bench/gpu_device_check.sh: the GPU check that runs on an offline lent machine.

    python bench/gpu_device_check.py skeleton OUT        here (needs the bundled model package): the bundled
                                                          SmolLM2's config and tokenizer, read from its GGUF
    python bench/gpu_device_check.py model SKELETON OUT   there: a random-weight model of that config
    python bench/gpu_device_check.py train RUN_DIR        there: one pipeline.train run in this process, with
                                                          base-weight drift and peak GPU memory in gpu_check.json
    python bench/gpu_device_check.py summary RUN_DIR NAME one line about a finished run
    python bench/gpu_device_check.py chat MODEL_DIR       a chat reply from a (merged) model
    python bench/gpu_device_check.py versus MODEL_DIR     s/step: the pipeline against bench/plain_trl.py, same settings

The bundled weights (a 98 MB GGUF) do not fit what a call may carry, so the plumbing runs on random weights
of the same shape: rewards, losses and replies mean nothing; states, timings, memory and drift do.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Seed 000's pair: neither needs the sentence embedder (post_similarity would).
SEED_000_REWARDS = [{"name": "length_target", "weight": 1.0, "params": {"target": 50, "unit": "chars"}},
                    {"name": "token_diversity", "weight": 1.0, "params": {}}]


def skeleton(out: Path) -> None:
    """config.json, generation_config.json and the tokenizer of the bundled model (a few MB, no weights)."""
    from transformers import AutoConfig, AutoTokenizer

    from pipeline.models import BUNDLED_GGUF, bundled_package_dir

    pkg = str(bundled_package_dir())
    config = AutoConfig.from_pretrained(pkg, gguf_file=BUNDLED_GGUF)
    if hasattr(config, "quantization_config"):  # the GGUF's marker; the random weights are plain
        del config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    AutoTokenizer.from_pretrained(pkg, gguf_file=BUNDLED_GGUF).save_pretrained(out)
    print(f"skeleton of the bundled model in {out}: {sorted(p.name for p in out.iterdir())}")


def random_model(skeleton_dir: Path, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(skeleton_dir)
    layers = int(os.environ.get("GPU_CHECK_LAYERS", "0"))  # a CPU smoke run uses fewer
    if layers:
        config.num_hidden_layers = layers
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(skeleton_dir).save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"random-weight {config.model_type} model, {config.num_hidden_layers} layers, {n / 1e6:.0f}M parameters, "
          f"in {out}")


def base_weights(model) -> dict:
    """The frozen weights a merge writes into, copied to the CPU."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if "base_layer" in n}


def drift(before: dict, model) -> dict:
    after = dict(model.named_parameters())
    changed = sum(int((after[n].detach().cpu() != w).sum()) for n, w in before.items())
    total = sum(w.numel() for w in before.values())
    worst = max((float((after[n].detach().cpu().float() - w.float()).abs().max()) for n, w in before.items()),
                default=0.0)
    return {"changed": changed, "total": total, "share": changed / max(total, 1), "max_abs": worst}


def train(run_dir: Path) -> int:
    """pipeline.train's own entry point in this process, so the trainer's model can be read after it is built and
    again after the last step (before the final merge, which folds the adapter into it for good)."""
    import torch

    import pipeline.train as trainer_module

    result: dict = {}
    seen: dict = {}
    build, save = trainer_module.build_trainer, trainer_module.save_and_merge

    def build_and_snapshot(*args, **kwargs):
        trainer = build(*args, **kwargs)
        seen["before"] = base_weights(trainer.model)
        return trainer

    def measure_then_save(trainer, *args, **kwargs):
        model = trainer.accelerator.unwrap_model(trainer.model)
        if "before" in seen:
            result["base_dtype"] = ",".join(sorted({str(w.dtype) for w in seen["before"].values()}))
            result["drift_whole_run"] = drift(seen["before"], model)
            # For contrast, what the engine did before issue 20's fix: PEFT's in-place round trip on the trained
            # adapter; the weights are put back afterwards, so the merged model is the run's own.
            kept = base_weights(model)
            with torch.no_grad():
                for _ in range(10):
                    model.merge_adapter()
                    model.unmerge_adapter()
                result["drift_peft_in_place_10_cycles"] = drift(kept, model)
                params = dict(model.named_parameters())
                for name, weight in kept.items():
                    params[name].copy_(weight)
        return save(trainer, *args, **kwargs)

    trainer_module.build_trainer, trainer_module.save_and_merge = build_and_snapshot, measure_then_save
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    result["exit_code"] = code = trainer_module.main(["--run-dir", str(run_dir)])
    if cuda:
        result["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        result["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    (run_dir / "gpu_check.json").write_text(json.dumps(result, indent=2))
    return code


def summary(run_dir: Path, name: str) -> int:
    from pipeline import runs

    status, metrics = runs.read_status(run_dir), runs.read_metrics(run_dir)
    extra = json.loads((run_dir / "gpu_check.json").read_text()) if (run_dir / "gpu_check.json").exists() else {}
    steps = [r["step_seconds"] for r in metrics[1:]] or [float("nan")]
    line = (f"{name}: {status.get('state')} at step {status.get('step')}, {status.get('device')} "
            f"{status.get('precision')}, median {statistics.median(steps):.2f} s/step after the first, "
            f"reward {metrics[0]['reward'] if metrics else None} -> {metrics[-1]['reward'] if metrics else None}")
    if "peak_allocated_gib" in extra:
        line += f", peak GPU memory {extra['peak_allocated_gib']:.2f} GiB allocated ({extra['peak_reserved_gib']:.2f} reserved)"
    if status.get("device_warning"):
        line += f"; DEVICE WARNING: {status['device_warning']}"
    if status.get("error"):
        line += f"; error: {status['error']}"
    print(line)
    for key, label in (("drift_whole_run", "base-weight drift over the whole run (fast engine)"),
                       ("drift_peft_in_place_10_cycles", "for contrast, PEFT's in-place merge/unmerge x10")):
        if key in extra:
            d = extra[key]
            print(f"  {label}: {d['changed']} of {d['total']} base entries changed ({d['share']:.2%}), "
                  f"max |change| {d['max_abs']:.3g} ({extra.get('base_dtype')})")
    return 0 if status.get("state") == "finished" else 1


def chat(model_dir: Path) -> None:
    import time

    from pipeline.generate import generate_batch
    from pipeline.models import load_model

    model, tokenizer = load_model(str(model_dir))
    t0 = time.time()
    reply = generate_batch(model, tokenizer, [[{"role": "user", "content": "Why do leaves change colour?"}]],
                           max_new_tokens=32)[0]
    print(f"chat from {model_dir.name} on {model.device}, {model.dtype} ({time.time() - t0:.1f} s; random weights, "
          f"so the words mean nothing): {reply[:160]!r}")


def versus(model_dir: Path, steps: int, precision: str) -> None:
    """The pipeline (fast engine) and bench/plain_trl.py, one run each, same settings; bench/train_step.py's
    measure: wall time between consecutive logged steps, the first step left out."""
    from bench.train_step import run_pipeline, run_plain
    from pipeline.config import RunConfig
    from pipeline.data import load_dataset_split

    cfg = RunConfig.from_dict({"model": str(model_dir), "max_steps": steps, "save_steps": 10_000,
                               "merge_at_end": False, "probe_every": 0, "precision": precision,
                               "rewards": SEED_000_REWARDS})
    train_rows, _ = load_dataset_split(cfg.dataset, cfg.seed)
    work = Path(tempfile.mkdtemp(prefix="gpu-versus-"))
    prompts = work / "prompts.json"
    prompts.write_text(json.dumps([r["prompt"] for r in train_rows]))
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    try:
        p = run_pipeline(cfg, work, "pipeline", env)
        q = run_plain(cfg, model_dir, prompts, work, "plain", env, threads=os.cpu_count() or 1)
    except subprocess.CalledProcessError as exc:
        print(f"s/step comparison failed: {exc}; logs in {work}")
        raise SystemExit(1)
    ps, qs = p["seconds"] / p["steps"], q["seconds"] / q["steps"]
    pt, qt = p["seconds"] / p["tokens"], q["seconds"] / q["tokens"]
    print(f"s/step, {precision}, G={cfg.num_generations}, batch {cfg.batch_size}, {cfg.max_completion_length} tokens, "
          f"{steps} steps (first left out): pipeline {ps:.3f}, plain TRL {qs:.3f}, ratio {ps / qs:.3f}; "
          f"ms/completion token: pipeline {pt * 1000:.2f}, plain TRL {qt * 1000:.2f}, ratio {pt / qt:.3f}")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "skeleton":
        skeleton(Path(args[0]))
    elif cmd == "model":
        random_model(Path(args[0]), Path(args[1]))
    elif cmd == "train":
        return train(Path(args[0]))
    elif cmd == "summary":
        return summary(Path(args[0]), args[1])
    elif cmd == "chat":
        chat(Path(args[0]))
    elif cmd == "versus":
        versus(Path(args[0]), int(args[1]) if len(args) > 1 else 10, args[2] if len(args) > 2 else "bf16")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
