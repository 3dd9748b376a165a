"""The trainer's side of TRL: the GRPOTrainer subclass and its hooks, the callback that writes metrics.jsonl and
groups.jsonl (metrics_row is the schema of a metrics line), the cooperative stop, and TRL's arguments built
from a RunConfig (grpo_args) with what TRL would refuse (trainer_refusals). pipeline/train.py runs them."""

from __future__ import annotations

import logging
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

from pipeline.setup.config import RunConfig
from pipeline.rewards import GuardedReward, completion_text
from pipeline.models import engine
from pipeline.run_folder import run_files, runs
from pipeline.rewards.advantages import group_stats, zero_std_share
from pipeline.run_folder.jsonio import json_number as _clean  # finite float or None: what metrics lines may hold
from pipeline.training.token_capture import with_token_capture

# What the trainer is doing outside a step, in the run header's words: status.json's `phase`, cleared by each
# step's status write (docs/run-files.md).
PHASE_LOAD = "loading the model"
PHASE_FIRST_GROUP = "sampling the first group"
PHASE_RESUME = "loading the checkpoint, then sampling the next group"
PHASE_COMPILE = " (it compiles the decoding step first: up to a minute)"
PHASE_PROBE = "answering the held-out prompts (probe at step {step})"
PHASE_SAVE = "saving the adapter"
PHASE_MERGE = "saving the adapter and merging it into the model"


def first_group_phase(generation: str, resume: bool) -> str:
    """What the trainer does once its model is ready, until the first step ends.

    >>> first_group_phase("static", resume=False)
    'sampling the first group (it compiles the decoding step first: up to a minute)'
    >>> first_group_phase("eager", resume=True)
    'loading the checkpoint, then sampling the next group'
    """
    return (PHASE_RESUME if resume else PHASE_FIRST_GROUP) + (PHASE_COMPILE if generation == "static" else "")


log = logging.getLogger("grpo_studio.train")


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
        self.first_step_seconds: float | None = None
        self.last_step_seconds = 0.0
        # Held-out probes run between steps (pipeline/training/probes.py sets these): the ETA counts the ones to come.
        self.probes_at: Callable[[int, int], bool] = lambda step, max_steps: False  # (step, max_steps) -> probes?
        self.probe_seconds = 0.0  # the last probe's time

    def add_step(self, seconds: float) -> None:
        if self.steps_done_this_session == 0:
            self.first_step_seconds = seconds
        self.steps_done_this_session += 1
        self.session_step_seconds += seconds
        self.last_step_seconds = seconds

    def seconds_per_step(self) -> float:
        """Mean seconds a step for the ETA: the session's first step is left out once others have run (it also
        warms up, and on a GPU it compiles the decoding step, tens of seconds that no later step repeats).

        >>> clock = StepClock()
        >>> clock.seconds_per_step()
        0.0
        >>> clock.add_step(47.0); clock.seconds_per_step()
        47.0
        >>> clock.add_step(2.0); clock.add_step(3.0); clock.seconds_per_step()
        2.5
        """
        n = self.steps_done_this_session
        if n >= 2:
            return (self.session_step_seconds - self.first_step_seconds) / (n - 1)
        return self.session_step_seconds / max(n, 1)

    def seconds_left(self, step: int, max_steps: int) -> float:
        """The ETA after `step`: the steps still to run at the mean step time, and the held-out probes still to
        come at the last probe's time (a probe is seconds of a CPU run; left out, the ETA ran out while the final
        probe still ran).

        >>> clock = StepClock(); clock.add_step(30.0); clock.add_step(20.0); clock.add_step(20.0)
        >>> clock.seconds_left(3, 11)  # no probe timed yet
        160.0
        >>> clock.probes_at, clock.probe_seconds = (lambda step, max_steps: step in (5, max_steps)), 12.0
        >>> clock.seconds_left(3, 11), clock.seconds_left(5, 11), clock.seconds_left(11, 11)  # probes at 5 and 11
        (184.0, 132.0, 0.0)
        """
        probes = sum(self.probes_at(s, max_steps) for s in range(step + 1, max_steps + 1))
        return self.seconds_per_step() * max(max_steps - step, 0) + self.probe_seconds * probes


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
                # (it turns gradient checkpointing off while sampling, so the key/value cache works, and back on
                # with the trainer's own checkpointing arguments)
                with unwrap_model_for_generation(
                        self.model_wrapped, self.accelerator, generation_kwargs=self.generation_kwargs,
                        gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs) as unwrapped, \
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
            from pipeline.models.loading import is_out_of_memory

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
            # On the CPU each distinct prompt runs once for its G completions (pipeline/models/engine.py); TRL's path
            # otherwise, and always on a GPU (engine.logps_pass).
            if (self.studio_fast and engine.logps_pass(input_ids.device.type) == "shared"
                    and engine.fast_path_problem(model, extra, compute_aux_loss) is None):
                with self.accelerator.autocast():
                    logps, entropy = engine.shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep,
                                                                self.temperature, compute_entropy)
                return logps, entropy, None
            if (self.accelerator.device.type == "cpu" and not compute_aux_loss
                    and all(v is None for v in extra.values())):
                # TRL's pass with the model's own LM head: its chunked head has no fast CPU version.
                with self.accelerator.autocast():
                    logps, entropy = engine.plain_head_logps(model, input_ids, attention_mask, logits_to_keep,
                                                             self.temperature, compute_entropy,
                                                             batch_size or input_ids.size(0))
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
            clock.add_step(elapsed)
            clock.last_gen_seconds = clock.gen_seconds
            if agree_to_stop(stop_event, args.device):
                control.should_training_stop = True
                control.should_save = True  # leave a resumable checkpoint at the step we stopped on
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not is_step_log(logs):
                return
            runs.append_jsonl(run_dir / run_files.METRICS, metrics_row(logs, state, clock, guards, weights))
            runs.write_status(run_dir, "running", step=state.global_step, max_steps=state.max_steps, phase=None)

        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                ckpt = run_files.checkpoint(run_dir, state.global_step)
                if ckpt.is_dir():
                    (ckpt / run_files.CHECKPOINT_MARKER).write_text(str(time.time()))
                    # Only now that the new one is complete may an older one go (see save_total_limit).
                    runs.prune_checkpoints(run_dir, keep_checkpoints)

    return StudioCallback()


def is_step_log(logs: dict | None) -> bool:
    """Whether TRL's log dict is an optimizer step's line. A step that samples a new batch logs its rewards; a
    step that trains again on a batch sampled earlier (iterations per batch or steps per generation above 1)
    logs only the loss side (loss, KL, clip ratio, entropy), and is a line too. The run's closing summary
    (train_runtime, train_loss) is not.

    >>> is_step_log({"reward": 1.0, "loss": 0.1}), is_step_log({"loss": 0.1, "kl": 0.01})
    (True, True)
    >>> is_step_log({"train_runtime": 9.0, "train_loss": 0.1}), is_step_log(None)
    (False, False)
    """
    return bool(logs) and ("reward" in logs or "loss" in logs)


def metrics_row(logs: dict, state, clock: StepClock, guards: list[GuardedReward],
                weights: list[float] | None = None) -> dict:
    """One metrics.jsonl line from TRL's log dict. It carries each reward's weight, so that a reader (the
    health check, the charts) can tell trained rewards from monitors (weight 0) without the config. On a step
    that reuses a batch sampled earlier, the sampled batch's figures (rewards, length, zero-std share) are
    null: they were logged on the step that sampled it."""
    step = state.global_step
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
        "temperature": _clean(logs.get("temperature")),  # the values in force, steered or not (steer_trainer.py)
        "beta": _clean(logs.get("beta")),
        "step_seconds": round(getattr(clock, "last_step_seconds", 0.0), 3),
        "gen_seconds": round(getattr(clock, "last_gen_seconds", 0.0), 3),
        "elapsed": round(time.time() - clock.train_start, 2),
        "eta_seconds": round(clock.seconds_left(step, state.max_steps), 1),
        "time": time.time(),
        "warnings": warnings,
    }


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
