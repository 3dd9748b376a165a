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

from pipeline.config import ConfigError, RunConfig
from pipeline.data import DatasetError, check_prompt_budget, load_dataset_split
from pipeline.rewards import (
    GuardedReward, RewardFunctionError, build_rewards, completion_text, wait_for_reward_threads,
)
from pipeline import engine, run_files, runs
from pipeline.jobs import TRAIN
from pipeline.jobstate import job_worker
from pipeline.advantages import group_stats, zero_std_share
from pipeline.jsonio import json_number as _clean  # finite float or None: what metrics lines may hold
from pipeline.paths import keep_private
from pipeline.reward_check import needs_isolation
from pipeline.rewards.custom import NO_TOKEN_HINT
from pipeline.processes import end_children
from pipeline.probes import make_probe_callbacks
from pipeline.token_capture import with_token_capture

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


# ---- the trainer with the studio's hooks ------------------------------------------------------


class StepClock:
    """Timing shared by the trainer subclass and the callback."""

    def __init__(self) -> None:
        self.train_start = time.time()
        self.step_start = time.time()
        self.gen_seconds = 0.0
        self.generations = 0
        self.steps_done_this_session = 0
        self.session_step_seconds = 0.0


def make_trainer_class():
    """GRPOTrainer that times generation and writes each step's groups to groups.jsonl."""
    from trl import GRPOTrainer

    class StudioGRPOTrainer(GRPOTrainer):
        studio_clock: StepClock
        studio_run_dir: Path
        studio_weights: dict[str, float]
        _studio_written_generation = 0

        studio_fast = False  # set from RunConfig.fast_engine
        studio_static = None  # a static_decode.StaticDecoder when completions are sampled through it

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                  has_tool_images=False):
            # Text prompts on one process: sample from the adapter folded into the weights (no LoRA branch
            # per layer while decoding), each distinct prompt pre-filled once for its G rows.
            # On the CPU, decoding runs on fewer threads than training (engine.decoding_threads: a watched
            # run shares its cores with the browser, and small per-token operations stall on a busy core).
            if (self.studio_fast and engine.single_process() and not self.use_vllm and images is None
                    and not multimodal_fields and not self.use_transformers_continuous_batching):
                import torch
                from trl.models import unwrap_model_for_generation

                static = self.studio_static
                with unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                                 generation_kwargs=self.generation_kwargs) as unwrapped, \
                        torch.no_grad(), engine.merged_adapter(unwrapped, static and static.weight_copies), \
                        engine.cpu_decoding(self.accelerator.device):
                    new = self._studio_static_generate(unwrapped, prompt_ids) if static else None
                    if new is None:
                        new = engine.generate_shared_prefill(unwrapped, prompt_ids, self._tokenizer.pad_token_id,
                                                             self.generation_config)
                return [engine.cut_at_eos(row, self.eos_token_ids) for row in new.tolist()], None
            with engine.cpu_decoding(self.accelerator.device):
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                     has_tool_images)

        def _studio_static_generate(self, unwrapped, prompt_ids):
            """Completions from the static decoder, or None after it failed: the run then samples eagerly for
            good, and the run header says why (an out-of-memory error is not caught: it ends the run)."""
            from pipeline.models import is_out_of_memory

            try:
                return self.studio_static.generate(unwrapped, prompt_ids, self.generation_config)
            except Exception as exc:  # noqa: BLE001 - a compile or capture failure on some card: sample eagerly
                if is_out_of_memory(exc):
                    raise
                log.warning("Static generation failed; sampling with generate from now on:\n%s",
                            traceback.format_exc())
                self.studio_static = None
                if self.accelerator.is_main_process:
                    runs.write_status(self.studio_run_dir, "running", generation="eager",
                                      generation_note=f"static decoding failed ({type(exc).__name__}: "
                                                      f"{str(exc)[:200]})")
                return None

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                               batch_size=None, compute_entropy=False, compute_aux_loss=False,
                                               **extra):
            # Each distinct prompt runs once for its G completions (pipeline/engine.py); TRL's path otherwise.
            if self.studio_fast and engine.fast_path_problem(model, extra, compute_aux_loss) is None:
                with self.accelerator.autocast():
                    logps, entropy = engine.shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep,
                                                                self.temperature, compute_entropy)
                return logps, entropy, None
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **extra)

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            return hide_monitors_of_unscored(rewards_per_func, self.reward_weights)

        def _generate_and_score_completions(self, inputs):
            t0 = time.time()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self.studio_clock.gen_seconds += time.time() - t0
                self.studio_clock.generations += 1

        def log(self, logs, start_time=None):
            # Capture the last generation batch before TRL's log() clears its buffers.
            if (self.model.training and self.accelerator.is_main_process
                    and self.studio_clock.generations > self._studio_written_generation and self._logs["prompt"]):
                self._studio_written_generation = self.studio_clock.generations
                record = self._studio_groups()
                if self.scale_rewards == "batch":
                    totals = [c["total"] for group in record["groups"] for c in group["completions"]]
                    record["batch_std"] = _clean(group_stats(totals)[1])  # the divisor every advantage shares
                    if "frac_reward_zero_std" in self._metrics["train"]:
                        # TRL's figure then asks whether the whole batch is flat; the chart means groups.
                        self._metrics["train"]["frac_reward_zero_std"] = [
                            zero_std_share(totals, self.num_generations)]
                runs.append_jsonl(self.studio_run_dir / run_files.GROUPS, record)
            super().log(logs, start_time)

        def _studio_groups(self) -> dict:
            prompts = list(self._logs["prompt"])
            completions = list(self._logs["completion"])
            advantages = list(self._logs["advantages"])
            names = list(self._logs["rewards"])
            per = {n: list(self._logs["rewards"][n]) for n in names}
            g = self.num_generations
            groups = []
            for start in range(0, len(prompts) - g + 1, g):
                items = []
                for i in range(start, start + g):
                    scores = {n: _clean(per[n][i]) for n in names}
                    present = [scores[n] * self.studio_weights.get(n, 1.0) for n in names if scores[n] is not None]
                    items.append({
                        "completion": completion_text(completions[i]),
                        "rewards": scores,
                        "total": sum(present) if present else None,
                        "advantage": _clean(advantages[i]),
                    })
                groups.append({"prompt": _prompt_text(prompts[start]), "completions": items})
            return {"step": self.state.global_step, "weights": self.studio_weights,
                    "scale_rewards": self.scale_rewards, "groups": groups}

    # The token view's record (tokens.jsonl) is read from the loss pass of this class's hooks.
    return with_token_capture(StudioGRPOTrainer)


def hide_monitors_of_unscored(rewards_per_func, weights):
    """Monitor rewards (weight 0) are scored and charted but must leave every advantage as it would be
    without them. TRL multiplies by the weights, so a monitor adds exactly 0 to each total, except in one
    case: TRL leaves a completion out of its group's mean and std (advantage 0) only when *every* reward
    is missing (NaN), and a monitor's score would make a completion that no trained reward could score
    count as a 0 total. So where every trained reward is missing, the monitors' scores are dropped too.
    `rewards_per_func` is (completions x rewards), changed in place and returned."""
    import torch

    monitor = (weights == 0).to(rewards_per_func.device)
    if not monitor.any() or monitor.all():
        return rewards_per_func
    unscored = torch.isnan(rewards_per_func[:, ~monitor]).all(dim=1)
    rewards_per_func[unscored.unsqueeze(1) & monitor.unsqueeze(0)] = torch.nan
    return rewards_per_func


def _prompt_text(prompt) -> str:
    if isinstance(prompt, list):
        return "\n".join(f"[{m.get('role')}] {m.get('content')}" for m in prompt if isinstance(m, dict))
    return str(prompt)


def agree_to_stop(stop_event: threading.Event, device=None) -> bool:
    """Whether to stop now. Under torchrun every rank must take the same decision at the same step, or
    the ranks that go on wait for the others in their next collective until the timeout: the ranks
    share their flags (max over ranks), and a rank that learns of the Stop from another sets its own."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        import torch

        flag = torch.tensor([1.0 if stop_event.is_set() else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            stop_event.set()
    return stop_event.is_set()


def make_callback(run_dir: Path, clock: StepClock, stop_event: threading.Event, guards: list[GuardedReward],
                  keep_checkpoints: int = 0, weights: list[float] | None = None):
    from transformers import TrainerCallback

    class StudioCallback(TrainerCallback):
        """Writes metrics.jsonl, marks complete checkpoints, and honours stop requests."""

        def on_step_begin(self, args, state, control, **kwargs):
            clock.step_start = time.time()
            clock.gen_seconds = 0.0

        def on_step_end(self, args, state, control, **kwargs):
            elapsed = time.time() - clock.step_start
            clock.steps_done_this_session += 1
            clock.session_step_seconds += elapsed
            clock.last_step_seconds = elapsed
            clock.last_gen_seconds = clock.gen_seconds
            if agree_to_stop(stop_event, args.device):
                control.should_training_stop = True
                control.should_save = True  # leave a resumable checkpoint at the step we stopped on
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs or "reward" not in logs:
                return
            runs.append_jsonl(run_dir / run_files.METRICS, metrics_row(logs, state, clock, guards, weights))
            runs.write_status(run_dir, "running", step=state.global_step, max_steps=state.max_steps)

        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                ckpt = run_files.checkpoint(run_dir, state.global_step)
                if ckpt.is_dir():
                    (ckpt / run_files.CHECKPOINT_MARKER).write_text(str(time.time()))
                    # Only now that the new one is complete may an older one go (see save_total_limit).
                    runs.prune_checkpoints(run_dir, keep_checkpoints)

    return StudioCallback()


def metrics_row(logs: dict, state, clock: StepClock, guards: list[GuardedReward],
                weights: list[float] | None = None) -> dict:
    """One metrics.jsonl line from TRL's log dict. It carries each reward's weight, so that a reader (the
    health check, the charts) can tell trained rewards from monitors (weight 0) without the config."""
    step = state.global_step
    per_step = clock.session_step_seconds / max(clock.steps_done_this_session, 1)
    remaining = max(state.max_steps - step, 0)
    rewards = {}
    for key, value in logs.items():
        if key.startswith("rewards/") and key.count("/") == 2:
            _, name, stat = key.split("/")
            rewards.setdefault(name, {})[stat] = _clean(value)
    warnings = [w for g in guards for w in g.warnings]
    for g in guards:
        g.warnings.clear()
    return {
        "step": step,
        "max_steps": state.max_steps,
        "reward": _clean(logs.get("reward")),
        "reward_std": _clean(logs.get("reward_std")),
        "rewards": rewards,
        "reward_weights": {g.__name__: w for g, w in zip(guards, weights)} if weights is not None else None,
        "kl": _clean(logs.get("kl")),
        "loss": _clean(logs.get("loss")),
        "entropy": _clean(logs.get("entropy")),
        "completion_length": _clean(logs.get("completions/mean_length")),
        "clipped_ratio": _clean(logs.get("completions/clipped_ratio")),
        "clip_ratio": _clean(logs.get("clip_ratio/region_mean")),
        "frac_reward_zero_std": _clean(logs.get("frac_reward_zero_std")),
        "grad_norm": _clean(logs.get("grad_norm")),
        "learning_rate": _clean(logs.get("learning_rate")),
        "step_seconds": round(getattr(clock, "last_step_seconds", 0.0), 3),
        "gen_seconds": round(getattr(clock, "last_gen_seconds", 0.0), 3),
        "elapsed": round(time.time() - clock.train_start, 2),
        "eta_seconds": round(per_step * remaining, 1),
        "time": time.time(),
        "warnings": warnings,
    }


# ---- building the run --------------------------------------------------------------------------


def model_load_kwargs(cfg: RunConfig, precision: str, device: str) -> dict:
    """from_pretrained arguments. We load the model ourselves, so the 4-bit (QLoRA) quantization config must
    be given here: TRL only applies its own when it is handed a model id."""
    from pipeline.models import torch_dtype

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


def vllm_importance_sampling_mode(loss_type: str) -> str:
    """How TRL corrects for the vLLM/training mismatch. TRL's default (sequence_mask) everywhere but vespo,
    which computes its own sequence-level weights and accepts only the per-token modes (GRPOTrainer refuses
    the run otherwise, once the model has loaded); token_truncate caps each token's ratio at TRL's C_max (3)
    and drops no token.

    >>> vllm_importance_sampling_mode("dapo"), vllm_importance_sampling_mode("vespo")
    ('sequence_mask', 'token_truncate')
    """
    return "token_truncate" if loss_type == "vespo" else "sequence_mask"


def trainer_refusals(args) -> list[str]:
    """What GRPOTrainer's __init__ refuses from its arguments alone, but only once the model has loaded (GRPOConfig's
    own checks run when it is built). Pre-flight asks both, so a refusal comes before the launch. The one rule a
    RunConfig can reach today; tests/unit/test_gpu_path.py runs TRL's trainer to check it still refuses so."""
    out = []
    if (args.loss_type == "vespo" and args.use_vllm and args.vllm_importance_sampling_correction
            and args.vllm_importance_sampling_mode not in ("token_truncate", "token_mask")):
        out.append("VESPO loss requires `vllm_importance_sampling_mode` to be either 'token_truncate' or 'token_mask'. "
                   f"Got: {args.vllm_importance_sampling_mode}.")
    return out


def grpo_args(cfg: RunConfig, run_dir: Path, device: str, precision: str):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(run_dir),
        use_cpu=device == "cpu",  # GRPOConfig refuses CPU-only machines otherwise
        bf16=precision == "bf16",
        fp16=precision == "fp16",  # mixed precision: the model is loaded in fp32 (see torch_dtype)
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup_steps,
        max_grad_norm=cfg.max_grad_norm,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        beta=cfg.beta,
        epsilon=cfg.epsilon,
        loss_type=cfg.loss_type,
        scale_rewards=cfg.scale_rewards,
        top_k=cfg.top_k,  # 0 turns top-k off in TRL; None would let transformers apply its default of 50
        min_p=cfg.min_p or None,
        repetition_penalty=cfg.repetition_penalty,
        num_iterations=cfg.num_iterations,
        epsilon_high=cfg.epsilon_high or None,
        importance_sampling_level=cfg.importance_sampling_level,
        steps_per_generation=cfg.steps_per_generation or None,
        mask_truncated_completions=cfg.mask_truncated_completions,
        max_steps=cfg.max_steps,
        logging_steps=1,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        # transformers deletes old checkpoints at the end of its save, before on_save marks the new one
        # complete. The extra slot is that unmarked folder, so keep_checkpoints complete ones survive while
        # it is written (keep_checkpoints=1 would otherwise leave none); on_save then prunes to keep_checkpoints.
        save_total_limit=cfg.keep_checkpoints + 1 if cfg.keep_checkpoints > 0 else None,
        gradient_checkpointing=cfg.gradient_checkpointing,
        seed=cfg.seed,
        report_to=cfg.report_to,
        project="grpo-studio",  # trackio's project
        log_completions=False,
        use_vllm=cfg.use_vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        vllm_enable_sleep_mode=cfg.vllm_enable_sleep_mode,
        vllm_max_model_length=cfg.vllm_max_model_length or cfg.max_prompt_tokens + cfg.max_completion_length,
        vllm_tensor_parallel_size=cfg.vllm_tensor_parallel_size,
        vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode=vllm_importance_sampling_mode(cfg.loss_type),
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


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
    runs.write_status(run_dir, "running", step=0, max_steps=cfg.max_steps)


def set_up_runtime(cfg: RunConfig, run_dir: Path, main: bool) -> tuple[str, str]:
    """Device, precision and threads for this process; refuses what this machine can't run."""
    import torch

    from pipeline.models import device_warning, pick_device, resolve_precision, runtime_problems

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
    if main:  # the run header shows what was resolved, not the setting ("auto")
        runs.write_status(run_dir, "running", device=device, precision=precision, world_size=world_size,
                          device_warning=warning)
    return device, precision


def load_prompts(cfg: RunConfig, tokenizer, run_dir: Path, main: bool) -> tuple[list[dict], list[dict], int]:
    """Training and held-out rows (only the scan's prompts with signal when the run keeps them), and the longest
    training prompt in tokens; every training prompt must fit the prompt budget. Rank 0 writes the held-out
    prompts into the run folder (evaluation reads them later)."""
    from pipeline.models import count_prompt_tokens

    train_rows, eval_rows = load_dataset_split(cfg.dataset, cfg.seed)
    if cfg.keep_signal_prompts:  # only the prompts the learnability scan found signal on
        from pipeline.learnability import keep_prompts

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
                   *make_probe_callbacks(run_dir, cfg, tokenizer, eval_rows, allow_custom_rewards)],
    )
    trainer.studio_clock = clock
    # A 4-bit base is not merged into for sampling (it would round the adapter away): TRL's own path.
    trainer.studio_fast = cfg.fast_engine and not cfg.load_in_4bit
    trainer.studio_static, trainer.studio_generation = generation_engine(cfg, trainer, device, longest_prompt)
    trainer.studio_run_dir = run_dir
    trainer.studio_weights = {g.__name__: w for g, w in zip(guards, weights)}
    return trainer


def generation_engine(cfg: RunConfig, trainer, device: str, longest_prompt: int = 0):
    """The static decoder when completions are sampled through it (else None), and what the run header shows:
    {"generation": "static" | "eager", "generation_note": why static isn't used, or None}."""
    from pipeline import static_decode

    def problem():
        return static_decode.run_problem(
            fast_engine=cfg.fast_engine, load_in_4bit=cfg.load_in_4bit, use_vllm=cfg.use_vllm,
            gradient_checkpointing=cfg.gradient_checkpointing,
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
                      final_reward=metrics[-1].get("reward") if metrics else None)
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
    from pipeline.models import ModelError, load_tokenizer, resolve_model

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
        runs.write_status(run_dir, "running", **trainer.studio_generation)

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
    keep_private()  # run files and models for this user's eyes only; its environment unreadable (pipeline/paths.py)
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
        from pipeline.sources import SourceRefused, allow_local_dirs, allowed_dirs

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
        with job_worker(run_dir, TRAIN, graceful=True, main=is_main_rank(), failure=lambda exc: failure(run_dir, exc),
                        command=sys.argv) as job:
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


def failure(run_dir: Path, exc: BaseException) -> str:
    """What status.json says when training fails: the reason in words (a full disk, out of memory, a bad
    setting), with the traceback in the log. Any rank's failure ends the run with its real message: rank 0
    may be waiting for this rank in a collective and never get to say why."""
    from pipeline.models import ModelError, is_out_of_memory, out_of_memory_message

    if isinstance(exc, (ConfigError, DatasetError, RewardFunctionError)):  # said in words: no traceback needed
        message = str(exc)
        log.error("Run failed: %s", message)
        return _ranked(message)
    log.error("Training failed:\n%s", "".join(traceback.format_exception(exc)))
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


def _ranked(message: str) -> str:
    rank = os.environ.get("RANK", "0")
    return message if rank == "0" else f"Rank {rank}: {message}"


if __name__ == "__main__":
    sys.exit(main())
