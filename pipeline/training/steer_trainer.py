"""The trainer's side of steering: at each step boundary rank 0 reads new change requests, checks them
(pipeline/setup/steering.py), records them, and every rank applies the same values to what TRL uses before the
step runs. On a start or resume, the recorded changes are applied before the first step.
torch and transformers are imported inside the functions that need them.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from pipeline.run_folder import run_files
from pipeline.setup.config import RunConfig
from pipeline.run_folder.jsonio import append_jsonl
from pipeline.training.grpo_trainer import is_step_log
from pipeline.setup.steering import (
    STEERABLE, WEIGHT, SteerRefused, apply_changes, check_changes, get_value, pending_requests, read_record,
    reward_names,
)

log = logging.getLogger("grpo_studio.steer")


def attach(trainer, run_dir: Path, cfg: RunConfig, weights: list[float], allow_custom_rewards: bool = False):
    """Register the steering callback on `trainer`, first in line, so a metrics line written in the same
    on_log already carries the values in force. `weights` is the list the metrics lines read the reward
    weights from; it is kept in step with the trainer's."""
    callback = make_steering_callback(trainer, Path(run_dir), cfg, weights, allow_custom_rewards)
    trainer.callback_handler.callbacks.insert(0, callback)
    return callback


def _share(value):
    """rank 0's `value` on every rank (torchrun); the value itself in a single process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    return value


def make_steering_callback(trainer, run_dir: Path, cfg: RunConfig, weights: list[float],
                           allow_custom_rewards: bool = False):
    from transformers import TrainerCallback

    main = os.environ.get("RANK", "0") == "0"
    names = reward_names(cfg)

    class SteeringCallback(TrainerCallback):
        """Applies steered values at step boundaries and puts the values in force into each log line."""

        def __init__(self) -> None:
            self.cfg = cfg  # the values in force
            self.answered: set[str] = set()  # request ids applied or refused, by any start of this run
            self.requests_size = -1  # the request file's size when last read: unchanged = nothing new

        def on_train_begin(self, args, state, control, **kwargs):
            # A resumed (or restarted) run trains with every change recorded so far.
            changes = []
            if main:
                record = read_record(run_dir)
                self.answered = {str(row.get("id")) for row in record}
                changes = [{"setting": r["setting"], "new": r.get("new")} for r in record if "setting" in r]
            changes = _share(changes)
            self.cfg = apply_changes(self.cfg, changes)
            apply_to_trainer(trainer, self.cfg, weights, names)
            if changes and main:
                log.info("Steered values in force: %s", _in_force_text(self.cfg, names))

        def on_step_begin(self, args, state, control, **kwargs):
            changes = self._new_changes(state.global_step + 1) if main else []
            changes = _share(changes)
            if changes:
                self.cfg = apply_changes(self.cfg, changes)
                apply_to_trainer(trainer, self.cfg, weights, names)

        def _new_changes(self, step: int) -> list[dict]:
            """Rank 0: check the requests not answered yet, in order, against the values in force, and record
            each applied change (or the refusal) at `step`, the first step that trains with it."""
            path = run_dir / run_files.STEER_REQUESTS
            try:
                size = path.stat().st_size
            except OSError:
                return []
            if size == self.requests_size:
                return []
            self.requests_size = size
            cfg, applied = self.cfg, []
            for req in pending_requests(run_dir, self.answered):
                self.answered.add(req["id"])
                now = time.time()
                try:
                    changes = check_changes(cfg, req.get("changes"), allow_custom_rewards)
                except SteerRefused as exc:
                    append_jsonl(run_dir / run_files.STEERING,
                                 {"id": req["id"], "step": step, "refused": str(exc), "time": now})
                    log.warning("Change request %s refused: %s", req["id"], exc)
                    continue
                if not changes:  # answered all the same, so it no longer reads as waiting
                    append_jsonl(run_dir / run_files.STEERING,
                                 {"id": req["id"], "step": step, "unchanged": True, "time": now})
                for change in changes:
                    append_jsonl(run_dir / run_files.STEERING, {"id": req["id"], "step": step, **change, "time": now})
                    log.info("Step %d: %s %s -> %s", step, change["setting"], change["old"], change["new"])
                cfg = apply_changes(cfg, changes)
                applied.extend({"setting": c["setting"], "new": c["new"]} for c in changes)
            return applied

        def on_log(self, args, state, control, logs=None, **kwargs):
            if is_step_log(logs):  # a training step's line: the values it trained with
                logs["temperature"] = self.cfg.temperature
                logs["beta"] = self.cfg.beta

    return SteeringCallback()


def _in_force_text(cfg: RunConfig, names: list[str]) -> str:
    return ", ".join([f"{s}={get_value(cfg, s)}" for s in STEERABLE]
                     + [f"{WEIGHT}{n}={get_value(cfg, WEIGHT + n)}" for n in names])


def apply_to_trainer(trainer, cfg: RunConfig, weights: list[float], names: list[str]) -> None:
    """Put the values of `cfg` into what the trainer reads. Absolute values, so applying twice (a resume
    from a checkpoint saved after a change) changes nothing."""
    # Reward weights: TRL's tensor (the advantages), the studio's copies (groups.jsonl totals, metrics lines).
    for i, name in enumerate(names):
        w = float(cfg.rewards[i].weight)
        trainer.reward_weights[i] = w
        weights[i] = w
        if getattr(trainer, "studio_weights", None) is not None:
            trainer.studio_weights[name] = w
    set_temperature(trainer, float(cfg.temperature))
    set_learning_rate(trainer, float(cfg.learning_rate))
    # KL: TRL computes the reference log-probs (the adapter switched off) and the KL term while beta != 0.
    trainer.beta = float(cfg.beta)


def set_temperature(trainer, temperature: float) -> None:
    """The sampling temperature and the one the log-probabilities are divided by, which must agree."""
    if trainer.temperature == temperature:
        return
    trainer.temperature = temperature  # TRL's loss and the studio's fast log-prob path read it
    if getattr(trainer, "generation_config", None) is not None:  # transformers' generate and the static decoder
        trainer.generation_config.temperature = temperature
    if isinstance(getattr(trainer, "generation_kwargs", None), dict):  # TRL passes these to the unwrapped model
        trainer.generation_kwargs["temperature"] = temperature
    if getattr(trainer, "vllm_generation", None) is not None:
        trainer.vllm_generation.temperature = temperature
    _repatch_head_temperature(trainer, temperature)


def _repatch_head_temperature(trainer, temperature: float) -> None:
    """TRL's fused LM head (its log-prob path when the fast engine is off) holds the temperature it was
    patched with; patch it again over the forward it wrapped, so the patches never stack."""
    from trl.trainer.utils import add_fused_lm_head

    model = trainer.accelerator.unwrap_model(trainer.model)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if "forward" not in vars(base):  # not patched (an older TRL): nothing holds a temperature
        return
    if not hasattr(base, "_studio_unfused_forward"):
        base._studio_unfused_forward = vars(base)["forward"]
    base.forward = base._studio_unfused_forward
    add_fused_lm_head(base, temperature=temperature, cast_lm_head_to_fp32=trainer.args.cast_lm_head_to_fp32,
                      outputs=("log_probs", "entropy"))


def set_learning_rate(trainer, learning_rate: float) -> None:
    """The scheduler rewrites each param group's lr from its base_lrs every step: change the base, and the
    lr of the step about to run by the same factor, so the schedule's shape holds at the new rate."""
    optimizer = getattr(trainer, "optimizer", None)
    scheduler = getattr(trainer, "lr_scheduler", None)
    if optimizer is None or scheduler is None:
        return
    scheduler = getattr(scheduler, "scheduler", scheduler)  # accelerate's wrapper
    groups = optimizer.param_groups
    base_lrs = list(getattr(scheduler, "base_lrs", [group.get("initial_lr", group["lr"]) for group in groups]))
    for i, group in enumerate(groups):
        base = base_lrs[i] if i < len(base_lrs) else group.get("initial_lr", group["lr"])
        factor = group["lr"] / base if base else 1.0  # where the schedule is now
        group["lr"] = learning_rate * factor
        group["initial_lr"] = learning_rate
        if i < len(base_lrs):
            base_lrs[i] = learning_rate
    if hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = base_lrs
    if hasattr(scheduler, "_last_lr"):
        scheduler._last_lr = [group["lr"] for group in groups]
