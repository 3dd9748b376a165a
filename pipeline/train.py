"""GRPO + LoRA training entry point (TRL GRPOTrainer + PEFT), run as its own process.

    python -m pipeline.train --run-dir DIR [--steps N] [--resume] [--allow-custom-rewards]
    torchrun --nproc_per_node 2 -m pipeline.train --run-dir DIR

Reads DIR/config.json (writing the default quick CPU config once when it is absent; it is never
rewritten) and writes status.json, launches.jsonl, metrics.jsonl, groups.jsonl, tokens.jsonl, train.log,
checkpoints, adapter/ and merged/ into DIR. `--steps` is an override: it is recorded in launches.jsonl
with the start's time and step, and holds for later resumes until another override replaces it.
SIGTERM stops after the current step, saves a checkpoint and the adapter, and marks the run stopped.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from pipeline.setup.config import ConfigError, RunConfig
from pipeline.setup.data import DatasetError, check_prompt_budget, load_dataset_split
from pipeline.rewards import GuardedReward, RewardFunctionError, build_rewards, wait_for_reward_threads
from pipeline.run_folder import run_files, runs
from pipeline.training.grpo_trainer import (PHASE_LOAD, PHASE_MERGE, PHASE_SAVE, StepClock, agree_to_stop,
                                            first_group_phase, grpo_args, make_callback, make_trainer_class)
from pipeline.run_folder.jobs import TRAIN
from pipeline.run_folder.jobstate import failure_since, job_worker
from pipeline.run_folder.paths import keep_private
from pipeline.setup.reward_check import needs_isolation
from pipeline.rewards.custom import NO_TOKEN_HINT
from pipeline.run_folder.processes import end_children
from pipeline.training import steer_trainer
from pipeline.training.probes import make_probe_callbacks

log = logging.getLogger("grpo_studio.train")


def is_main_rank() -> bool:
    return os.environ.get("RANK", "0") == "0"


def setup_logging(run_dir: Path) -> None:
    rank = os.environ.get("RANK", "0")
    tag = "" if rank == "0" else f"[rank {rank}] "
    fmt = logging.Formatter(f"%(asctime)s {tag}%(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    log_file = logging.FileHandler(run_dir / run_files.TRAIN_LOG, encoding="utf-8")
    if not is_main_rank():
        # Other ranks write their warnings and errors to the same log, tagged, so the log tail in the app
        # shows a failure wherever it happened.
        log_file.setLevel(logging.WARNING)
    handlers.append(log_file)
    for h in handlers:
        h.setFormatter(fmt)
    for name in ("grpo_studio", "pipeline", "transformers", "trl", "peft"):
        lg = logging.getLogger(name)
        lg.setLevel(logging.INFO if name in ("grpo_studio", "pipeline") else logging.WARNING)
        lg.handlers = list(handlers)  # a copy: libraries append to their own list
        lg.propagate = False


# ---- building the run --------------------------------------------------------------------------


def model_load_kwargs(cfg: RunConfig, precision: str, device: str) -> dict:
    """from_pretrained arguments. We load the model ourselves, so the 4-bit (QLoRA) quantization config must
    be given here: TRL only applies its own when it is handed a model id."""
    from pipeline.models.loading import torch_dtype

    kwargs = {"dtype": torch_dtype(precision, training=True)}
    if device == "cuda":
        # Straight onto this rank's GPU, never CPU-then-.to() (twice the host memory, and slower).
        kwargs["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))}
    if cfg.load_in_4bit:
        import torch
        from transformers import BitsAndBytesConfig

        compute = torch.bfloat16 if precision == "bf16" else torch.float16
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute, bnb_4bit_quant_storage=compute)
        kwargs["dtype"] = compute
    return kwargs


def load_or_create_config(run_dir: Path, steps: int | None) -> tuple[RunConfig, dict]:
    """The effective config (config.json + the overrides recorded in launches.jsonl + this start's) and
    this start's overrides. config.json is written here only when absent (a headless first start)."""
    path = run_dir / run_files.CONFIG
    if path.exists():
        cfg = RunConfig.load(path)
    else:
        cfg = RunConfig()
        log.info("No config.json in %s: writing the default quick CPU config.", run_dir)
        if is_main_rank():
            runs.write_json_atomic(path, cfg.to_dict())
    overrides = {"max_steps": steps} if steps else {}
    effective = runs.apply_overrides(cfg.to_dict(), [*runs.read_launches(run_dir), {"overrides": overrides}])
    return RunConfig.from_dict(effective), overrides


def remove_incomplete_checkpoints(run_dir: Path) -> None:
    complete = set(runs.checkpoints(run_dir))
    for ckpt in runs.checkpoints(run_dir, complete_only=False):
        if ckpt not in complete:
            log.warning("Removing %s: its save never finished (the trainer was killed while writing it).", ckpt.name)
            shutil.rmtree(ckpt, ignore_errors=True)


def merge_adapter(model, tokenizer, out_dir: Path, base_path: str | None = None, dtype=None) -> None:
    """Fold the LoRA weights into the base model and save a plain transformers folder. A 4-bit (QLoRA) base
    is not merged into: the adapter goes onto the base model reloaded in `dtype` from `base_path`."""
    if base_path is not None:
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        with tempfile.TemporaryDirectory() as adapter_dir:
            model.save_pretrained(adapter_dir)
            base = AutoModelForCausalLM.from_pretrained(base_path, dtype=dtype)
            model = PeftModel.from_pretrained(base, adapter_dir)
    merged = model.merge_and_unload()
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    merged.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)


def record_start(run_dir: Path, cfg: RunConfig, resume: bool, overrides: dict) -> None:
    """The launch record and the step count in the "running" status (the job's context wrote "running" with
    the pid), written by rank 0 once the config is valid (so a bad override such as --steps -1 never sticks
    to later resumes)."""
    start = runs.last_complete_checkpoint(run_dir) if resume else None
    runs.record_launch(run_dir, resume, runs.checkpoint_step(start) if start else 0, overrides, sys.argv)
    runs.write_status(run_dir, "running", step=0, max_steps=cfg.max_steps, phase=PHASE_LOAD)


def set_up_runtime(cfg: RunConfig, run_dir: Path, main: bool) -> tuple[str, str]:
    """Device, precision and threads for this process; refuses what this machine can't run."""
    import torch

    from pipeline.models import engine
    from pipeline.models.loading import device_warning, pick_device, resolve_precision, runtime_problems

    device = pick_device()
    precision = resolve_precision(cfg.precision, device)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    for problem in runtime_problems(cfg, device, precision=precision, processes=world_size):
        raise ConfigError(problem)
    # A GPU box whose torch can't use the GPU trains on the CPU: said in the run header, not only in the log.
    warning = device_warning() if device == "cpu" else None
    if warning:
        log.warning(warning)
    if cfg.report_to == "tensorboard":
        os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(run_dir / run_files.TENSORBOARD))
    # One team of threads per core, split between ranks; an explicit OMP_NUM_THREADS wins (benchmarks set it).
    threads = os.environ.get("OMP_NUM_THREADS", "")
    torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0
                          else max(1, (os.cpu_count() or 1) // int(os.environ.get("WORLD_SIZE", "1"))))
    log.info("Device %s, precision %s, model %s, world size %s", device, precision, cfg.model, world_size)
    attention = engine.attention_kernels(device)
    if attention:
        log.info(attention)
    if main:  # the run header shows what was resolved, not the setting ("auto")
        runs.write_status(run_dir, "running", device=device, precision=precision, world_size=world_size,
                          device_warning=warning)
    return device, precision


def load_prompts(cfg: RunConfig, tokenizer, run_dir: Path, main: bool) -> tuple[list[dict], list[dict], int]:
    """Training and held-out rows (only the scan's prompts with signal when the run keeps them), and the longest
    training prompt in tokens; every training prompt must fit the prompt budget. Rank 0 writes the held-out
    prompts into the run folder (evaluation reads them later)."""
    from pipeline.models.loading import count_prompt_tokens

    train_rows, eval_rows = load_dataset_split(cfg.dataset, cfg.seed)
    if cfg.keep_signal_prompts:  # only the prompts the learnability scan found signal on
        from pipeline.training.learnability import keep_prompts

        train_rows = keep_prompts(train_rows, cfg.signal_prompts)
        log.info("Keeping the %d prompts the learnability scan found signal on", len(train_rows))
    longest = check_prompt_budget(train_rows, lambda m: count_prompt_tokens(tokenizer, m), cfg.max_prompt_tokens,
                                  cfg.dataset.source)
    log.info("%d training prompts, %d held out for evaluation", len(train_rows), len(eval_rows))
    if main:
        runs.write_json_atomic(run_dir / run_files.EVAL_PROMPTS, eval_rows)
    return train_rows, eval_rows, longest


def build_trainer(cfg: RunConfig, run_dir: Path, model_path: str, tokenizer, device: str, precision: str,
                  train_rows: list[dict], eval_rows: list[dict], guards: list[GuardedReward], weights: list[float],
                  stop_event: threading.Event, allow_custom_rewards: bool, longest_prompt: int = 0):
    """TRL's GRPOTrainer (our subclass, see make_trainer_class) on a LoRA of the base model, with the
    studio's callback (metrics, groups, Stop, checkpoints) and the held-out probes."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, **model_load_kwargs(cfg, precision, device))
    targets = cfg.lora_target_modules.strip()
    lora = LoraConfig(
        task_type="CAUSAL_LM", r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
        target_modules=targets if targets == "all-linear" else [t.strip() for t in targets.split(",")],
    )
    args = grpo_args(cfg, run_dir, device, precision)
    args.reward_weights = weights
    clock = StepClock()
    trainer = make_trainer_class()(
        model=model,
        processing_class=tokenizer,
        reward_funcs=guards,
        args=args,
        train_dataset=Dataset.from_list(train_rows),
        peft_config=lora,
        # Probes come after the studio callback so they see a Stop request (a probe at the last step).
        callbacks=[make_callback(run_dir, clock, stop_event, guards, cfg.keep_checkpoints, weights),
                   *make_probe_callbacks(run_dir, cfg, tokenizer, eval_rows, allow_custom_rewards, clock)],
    )
    trainer.studio_clock = clock
    # A 4-bit base is not merged into for sampling (it would round the adapter away): TRL's own path.
    trainer.studio_fast = cfg.fast_engine and not cfg.load_in_4bit
    trainer.studio_static, trainer.studio_generation = generation_engine(cfg, trainer, device, longest_prompt)
    trainer.studio_run_dir = run_dir
    trainer.studio_weights = {g.__name__: w for g, w in zip(guards, weights)}
    # Changes asked for while it trains (steer_requests.jsonl), applied at step boundaries: setup/steering.py.
    steer_trainer.attach(trainer, run_dir, cfg, weights, allow_custom_rewards)
    return trainer


def generation_engine(cfg: RunConfig, trainer, device: str, longest_prompt: int = 0):
    """The static decoder when completions are sampled through it (else None), and what the run header shows:
    {"generation": "static" | "eager", "generation_note": why static isn't used, or None}."""
    from pipeline.models import static_decode

    def problem():
        return static_decode.run_problem(
            fast_engine=cfg.fast_engine, load_in_4bit=cfg.load_in_4bit, use_vllm=cfg.use_vllm,
            processes=int(os.environ.get("WORLD_SIZE", "1"))) \
            or static_decode.static_problem(trainer.model, trainer.generation_config)

    name, note = static_decode.choose_engine(cfg.generation_engine, device, problem)
    if note:
        log.info("Generation: eager, not static (%s)", note)
    decoder = static_decode.StaticDecoder(min_length=longest_prompt + cfg.max_completion_length) \
        if name == "static" else None
    return decoder, {"generation": name, "generation_note": note}


def resume_point(run_dir: Path, resume: bool) -> Path | None:
    """The newest complete checkpoint to resume from (half-written ones are removed first), or None."""
    if not resume:
        return None
    remove_incomplete_checkpoints(run_dir)
    checkpoint = runs.last_complete_checkpoint(run_dir)
    if checkpoint is None:
        log.info("No complete checkpoint to resume from: starting from step 0.")
    else:
        log.info("Resuming from %s", checkpoint.name)
    return checkpoint


def save_and_merge(trainer, tokenizer, cfg: RunConfig, run_dir: Path, model_path: str, precision: str,
                   state: str) -> None:
    """Rank 0: the adapter, the merged model for chat (when asked), and the final status."""
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    runs.write_status(run_dir, "running", phase=PHASE_MERGE if cfg.merge_at_end else PHASE_SAVE)
    unwrapped.save_pretrained(run_dir / run_files.ADAPTER)
    tokenizer.save_pretrained(run_dir / run_files.ADAPTER)
    if cfg.merge_at_end:
        log.info("Merging the adapter into the base model...")
        if cfg.load_in_4bit:
            merge_adapter(unwrapped, tokenizer, run_dir / run_files.MERGED, base_path=model_path,
                          dtype=model_load_kwargs(cfg, precision, "cpu")["dtype"])
        else:
            merge_adapter(unwrapped, tokenizer, run_dir / run_files.MERGED)
    metrics = runs.read_metrics(run_dir)
    runs.write_status(run_dir, state, step=trainer.state.global_step, ended_at=time.time(),
                      final_reward=runs.final_reward(metrics), phase=None)
    log.info("Run %s: %s at step %d", run_dir.name, state, trainer.state.global_step)


def run_training(run_dir: Path, steps: int | None = None, resume: bool = False,
                 allow_custom_rewards: bool = False, stop_event: threading.Event | None = None) -> str:
    """Train one run. Returns the final state: finished, stopped or failed."""
    stop_event = stop_event or threading.Event()
    main = is_main_rank()

    # 1. Config: config.json plus recorded and new overrides, validated before anything is written.
    cfg, overrides = load_or_create_config(run_dir, steps)
    cfg.validate(allow_custom_rewards=allow_custom_rewards)
    if main:
        record_start(run_dir, cfg, resume, overrides)

    # 2. Runtime: device, precision and threads (refused here if this machine can't do what was asked).
    device, precision = set_up_runtime(cfg, run_dir, main)

    # 3. Data: the tokenizer, the training prompts (within the prompt budget) and the held-out ones.
    from pipeline.models.loading import ModelError, load_tokenizer, resolve_model

    try:
        model_path = resolve_model(cfg.model)
    except ModelError as exc:  # a run with custom rewards was started without the Hub token: say so
        if not allow_custom_rewards or not needs_isolation(cfg.rewards):
            raise
        raise ModelError(f"{exc} {NO_TOKEN_HINT}") from None
    tokenizer = load_tokenizer(model_path)
    train_rows, eval_rows, longest_prompt = load_prompts(cfg, tokenizer, run_dir, main)

    # 4. Rewards: each one guarded (a failure names the reward and the sample; reward_errors decides).
    guards, weights = build_rewards(cfg.rewards, policy=cfg.reward_errors, allow_custom=allow_custom_rewards,
                                    on_warning=lambda msg: log.warning(msg), timeout_s=cfg.reward_timeout_s)

    # 5. Model and trainer: LoRA on the base model inside TRL's GRPOTrainer, with our callbacks.
    trainer = build_trainer(cfg, run_dir, model_path, tokenizer, device, precision, train_rows, eval_rows,
                            guards, weights, stop_event, allow_custom_rewards, longest_prompt)
    if main:  # the run header says how completions are sampled, and why not statically where it can't
        runs.write_status(run_dir, "running", **trainer.studio_generation,
                          phase=first_group_phase(trainer.studio_generation["generation"], resume))

    # 6. Train, from the last complete checkpoint on a resume; a Stop before the first step skips it.
    checkpoint = resume_point(run_dir, resume)
    if agree_to_stop(stop_event, trainer.args.device):
        log.info("Stop requested before training began.")
    else:
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)

    # 7. Save the adapter, merge it for chat, and write the final status (rank 0).
    state = "stopped" if stop_event.is_set() else "finished"
    if trainer.accelerator.is_main_process:
        save_and_merge(trainer, tokenizer, cfg, run_dir, model_path, precision, state)
    return state


def main(argv: list[str] | None = None) -> int:
    # run files and models for this user's eyes only; its environment unreadable (pipeline/run_folder/paths.py)
    keep_private()
    parser = argparse.ArgumentParser(prog="python -m pipeline.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True, help="Run directory (config.json is read from here).")
    parser.add_argument("--steps", type=int, default=None, help="Override max_steps.")
    parser.add_argument("--resume", action="store_true", help="Continue from the last complete checkpoint.")
    parser.add_argument("--allow-custom-rewards", action="store_true",
                        help="Allow the custom_python reward (runs arbitrary code).")
    parser.add_argument("--allow-local-dir", action="append", default=[], metavar="PATH",
                        help="A folder the model or dataset may be read from, besides the data folder (repeatable; "
                             "a run the app starts inherits the app's).")
    args = parser.parse_args(argv)
    if args.allow_local_dir:
        from pipeline.models.sources import SourceRefused, allow_local_dirs, allowed_dirs

        try:
            allow_local_dirs([*allowed_dirs()[1:], *args.allow_local_dir])
        except SourceRefused as exc:
            parser.error(str(exc))

    run_dir = Path(args.run_dir).expanduser().resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(run_dir)
    code = 1
    try:
        # status.json: running (rank 0), then finished or stopped (save_and_merge), stopped on a second Stop
        # signal, or failed with the reason (any rank). A Stop signal finishes the current step, then saves.
        started = time.time()
        with job_worker(run_dir, TRAIN, graceful=True, main=is_main_rank(),
                        failure=lambda exc: failure(run_dir, exc, started), command=sys.argv) as job:
            run_training(run_dir, args.steps, args.resume, args.allow_custom_rewards, job.stop_requested)
        code = job.exit_code
        return code
    finally:
        end_child_processes()
        if not wait_for_reward_threads():
            # A reward still running in an abandoned thread at interpreter shutdown can abort the process
            # ("terminate called without an active exception") after the run's status is written: leave
            # without the shutdown, so the exit code says how the run ended.
            logging.shutdown()
            os._exit(code)


def end_child_processes(grace_s: float = 3.0) -> list[str]:
    """End the processes this trainer started that are still there: a reward that hung past its timeout
    keeps running in an abandoned thread, and whatever it launched (a scorer, a shell tool) would outlive
    the run. Returns what was ended, for the log."""
    ended = end_children(grace_s)
    if ended:
        log.warning("Ended %d process(es) the run left behind: %s", len(ended), ", ".join(ended))
    return ended


def failure(run_dir: Path, exc: BaseException, started: float | None = None) -> str:
    """What status.json says when training fails: the reason in words (a full disk, out of memory, a bad
    setting), with the traceback in the log. Any rank's failure ends the run with its real message: rank 0
    may be waiting for this rank in a collective and never get to say why. A rank that fails only because
    another rank went away (its collective lost the peer) gives the other rank's message when that rank
    wrote one since `started`, so the cause is what the run shows, whichever rank writes last."""
    from pipeline.models.loading import ModelError, is_out_of_memory, out_of_memory_message

    # Said in words, with nothing under them a traceback would add (a model error is raised from None: its cause is
    # in its message). Out of memory while loading is not: it is named as such below.
    if isinstance(exc, (ConfigError, DatasetError, RewardFunctionError, ModelError)) and not is_out_of_memory(exc):
        message = str(exc)
        log.error("Run failed: %s", message)
        return _ranked(message)
    log.error("Training failed:\n%s", "".join(traceback.format_exception(exc)))
    if started is not None and lost_a_peer(exc):
        cause = wait_for_peer_failure(run_dir, started)
        if cause:
            log.error("Run failed on another rank: %s", cause)
            return cause
    if runs.is_disk_full(exc):
        message = runs.disk_full_message(run_dir, exc)
    elif is_out_of_memory(exc):
        message = out_of_memory_message(
            "training", "Try a smaller group size G or batch, shorter completions (max completion tokens), "
            "a smaller model, or a GPU with bf16. Resume continues from the last complete checkpoint.")
    else:
        message = str(exc) if isinstance(exc, ModelError) else f"{type(exc).__name__}: {exc}"
    log.error("Run failed: %s", message)
    return _ranked(message)


# What a collective says when the rank at the other end went away (gloo, NCCL, the c10d store).
_PEER_LOST = ("closed by peer", "reset by peer", "remote worker", "remote process", "broken pipe",
              "communicator was aborted")


def lost_a_peer(exc: BaseException, world_size: int | None = None) -> bool:
    """Whether `exc` (or what it wraps) is a collective that lost another rank, in a run of `world_size`
    processes (torchrun's WORLD_SIZE by default).

    >>> lost_a_peer(RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1"), 2)
    True
    >>> lost_a_peer(ValueError("only rank 1 cannot score this"), 2), lost_a_peer(RuntimeError("reset by peer"), 1)
    (False, False)
    """
    if (world_size or int(os.environ.get("WORLD_SIZE", "1"))) < 2:
        return False
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        names = {cls.__name__ for cls in type(exc).__mro__}
        text = str(exc).lower()
        if "DistNetworkError" in names or any(marker in text for marker in _PEER_LOST):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


PEER_FAILURE_WAIT_S = 15.0


def wait_for_peer_failure(run_dir: Path, started: float) -> str | None:
    """The failure another rank wrote to status.json since `started`, waiting up to PEER_FAILURE_WAIT_S
    for it (the rank that went away writes its reason before it exits, but the exit may be seen first)."""
    deadline = time.monotonic() + PEER_FAILURE_WAIT_S
    while True:
        cause = failure_since(run_dir, started)
        if cause or time.monotonic() >= deadline:
            return cause
        time.sleep(0.2)


def _ranked(message: str) -> str:
    rank = os.environ.get("RANK", "0")
    return message if rank == "0" else f"Rank {rank}: {message}"


if __name__ == "__main__":
    sys.exit(main())
