"""The trainer's side of steering, on torch's own scheduler: a new learning rate holds under the schedule
(the scheduler rewrites each step's rate from its base rates) and keeps its place in a warm-up."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.steer_trainer import set_learning_rate


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
