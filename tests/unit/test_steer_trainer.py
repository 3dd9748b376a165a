"""The trainer's side of steering, on torch's own scheduler: a new learning rate holds under the schedule
(the scheduler rewrites each step's rate from its base rates) and keeps its place in a warm-up."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.setup.config import RewardSpec, RunConfig
from pipeline.training.steer_trainer import set_learning_rate


def trainer_with_schedule(lr: float, schedule):
    import torch

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    return SimpleNamespace(optimizer=optimizer, lr_scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, schedule))


def lr_of(trainer) -> float:
    return trainer.optimizer.param_groups[0]["lr"]


def test_a_new_learning_rate_holds_under_the_schedule():
    trainer = trainer_with_schedule(3e-4, lambda step: 1.0)
    set_learning_rate(trainer, 1e-4)
    assert lr_of(trainer) == pytest.approx(1e-4)
    for _ in range(3):  # what the trainer does after each optimizer step
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
        assert lr_of(trainer) == pytest.approx(1e-4)
    assert trainer.lr_scheduler.get_last_lr() == [pytest.approx(1e-4)]  # what the metrics line logs


def test_a_new_learning_rate_keeps_its_place_in_a_warm_up():
    trainer = trainer_with_schedule(4e-4, lambda step: min(1.0, (step + 1) / 4))
    trainer.optimizer.step()
    trainer.lr_scheduler.step()  # step 1 of a 4-step warm-up: half the rate
    assert lr_of(trainer) == pytest.approx(2e-4)
    set_learning_rate(trainer, 2e-4)
    assert lr_of(trainer) == pytest.approx(1e-4)
    set_learning_rate(trainer, 2e-4)  # applied again (a resume): nothing moves
    assert lr_of(trainer) == pytest.approx(1e-4)
    for _ in range(2):
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    assert lr_of(trainer) == pytest.approx(2e-4)  # warm-up done, at the new rate


def test_a_new_temperature_reaches_sampling_and_both_log_prob_paths(tmp_path):
    """A steered temperature reaches what samples (generation_config), the studio's fast log-probs (the
    trainer's temperature) and TRL's fused LM head, which holds the temperature it was patched with: its
    log-probs must be log softmax(logits / the new temperature), and patching again must not stack."""
    import torch

    from pipeline.training.steer_trainer import set_temperature
    from tests.unit.test_trainer_engine import batch, logps_by_hand, studio_trainer

    trainer = studio_trainer(tmp_path, temperature=1.0)
    model = trainer.accelerator.unwrap_model(trainer.model)
    input_ids, mask, keep = batch()

    def fused_logps():
        labels = input_ids.masked_fill(mask == 0, -100)
        labels[:, :-keep] = -100
        with torch.no_grad():
            return model(input_ids=input_ids, attention_mask=mask, labels=labels, fused_lm_head=True).log_probs[:, -keep:]

    valid = mask[:, -keep:].bool()
    assert torch.allclose(fused_logps()[valid], logps_by_hand(model, input_ids, mask, keep, 1.0)[valid], atol=1e-4)
    for temperature in (0.5, 2.0):
        set_temperature(trainer, temperature)
        assert trainer.temperature == trainer.generation_config.temperature == temperature
        assert trainer.generation_kwargs["temperature"] == temperature
        by_hand = logps_by_hand(model, input_ids, mask, keep, temperature)
        assert torch.allclose(fused_logps()[valid], by_hand[valid], atol=1e-4), temperature
    # The patch wraps TRL's first one each time: one layer over it, however many changes.
    base = model.get_base_model()
    assert vars(base)["forward"].__func__.__closure__ is not None
    wrapped = dict(zip(vars(base)["forward"].__func__.__code__.co_freevars, vars(base)["forward"].__func__.__closure__))
    assert wrapped["original_forward"].cell_contents is base._studio_unfused_forward


def test_kl_turned_on_mid_run_trains_against_the_adapterless_model(tmp_path):
    """A run started with beta 0 has no reference model: with a LoRA, TRL gets the reference log-probs by
    switching the adapter off, which works from any step. Steered to 0.04 before step 2, the step logs a KL."""
    from pipeline.run_folder import run_files, runs
    from pipeline.setup import steering as steer
    from pipeline.training.steer_trainer import attach
    from transformers import TrainerCallback

    from tests.unit.test_trainer_engine import studio_trainer

    cfg = RunConfig(num_generations=4, batch_size=4, beta=0.0, max_steps=2,
                    rewards=[RewardSpec("length_target")])  # the stand-in trainer scores one reward
    runs.write_json_atomic(tmp_path / run_files.CONFIG, cfg.to_dict())
    trainer = studio_trainer(tmp_path, beta=0.0, max_steps=2, save_steps=100)
    from pipeline.training.grpo_trainer import StepClock

    trainer.studio_clock, trainer.studio_run_dir, trainer.studio_weights = StepClock(), tmp_path, {}
    attach(trainer, tmp_path, cfg, [1.0])

    logged = {}

    class AskAfterStep1(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                steer.request(tmp_path, {"beta": 0.04})

        def on_log(self, args, state, control, logs=None, **kwargs):  # what the metrics line is written from
            if "reward" in logs:
                logged[state.global_step] = dict(logs)

    trainer.add_callback(AskAfterStep1())
    trainer.train()
    assert "kl" not in logged[1] and logged[1]["beta"] == 0.0
    assert logged[2]["beta"] == 0.04 and logged[2]["kl"] >= 0
