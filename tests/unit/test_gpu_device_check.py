"""The pure parts of bench/gpu_device_check.py, the one-command GPU measurement (its whole run needs a GPU; a CPU
smoke run is `GPU_CHECK_SMOKE=1 bash bench/gpu_device_check.sh`)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import gpu_device_check as check  # noqa: E402
from pipeline.setup.gpu_memory import GIB  # noqa: E402


def test_size_rows_run_the_presets_own_setting_first_and_predicted_ooms_last(tmp_path):
    ctx = SimpleNamespace(shapes=check.SHAPES, size_shapes=list(check.SHAPES), precision="bf16", engine_field={},
                          smoke=False, work=tmp_path, size_steps=2, card_total=80 * GIB,
                          size_presets=list(check.PRESET_NAMES), size_checkpointing=(True, False))
    rows = check.size_rows(ctx)
    assert len(rows) == 16
    orders = [r["order"] for r in rows]
    assert orders == sorted(orders) and orders[0] == 0 and orders[-1] == 2
    assert all(r["checkpointing"] for r in rows[:8])
    gsm8k_7b_off = next(r for r in rows if r["shape"] == "Qwen2.5-7B" and r["preset"] == "GSM8K"
                        and not r["checkpointing"])
    assert gsm8k_7b_off["order"] == 2 and gsm8k_7b_off["estimate"].total > 80 * GIB
    assert gsm8k_7b_off["config"]["num_generations"] == 8 and gsm8k_7b_off["config"]["max_completion_length"] == 512


def test_the_profile_table_accounts_for_the_whole_step():
    profile = check.StepProfile()
    profile.totals = {"generation": 5.0, "log-probs, reference/old (no grad)": 1.0, "rewards": 0.5,
                      "generate-and-score": 7.0, "prepare inputs": 7.2, "loss forward": 1.5,
                      "log-probs, policy (in the loss)": 1.2, "training step": 11.0, "optimizer": 0.3, "logging": 0.2}
    profile.steps = [6.0, 6.0]
    table = dict(profile.table())
    assert table["step (wall, synchronised)"] == 6.0
    assert table["backward"] == pytest.approx((11.0 - 7.2 - 1.5) / 2)
    top_level = [v for k, v in table.items() if not k.startswith("  ") and not k.startswith("step")]
    assert sum(top_level) + (7.2 - 7.0) / 2 == pytest.approx(6.0)


def test_an_out_of_memory_is_a_row_not_a_crash(tmp_path, monkeypatch):
    import torch

    import pipeline.train

    def run_out_of_memory(run_dir):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(pipeline.train, "run_training", run_out_of_memory)
    result = check.train_here(tmp_path / "run", {"model": "x"}, seconds=30)
    assert result["state"] == "OOM" and result["step_seconds"] == []
    assert check.steady([9.0, 2.0, 4.0]) == 3.0 and check.steady([5.0]) == 5.0 and check.steady([]) is None


def test_size_rows_can_be_narrowed_to_the_rows_still_to_measure(tmp_path):
    ctx = SimpleNamespace(shapes=check.SHAPES, size_shapes=["Qwen2.5-7B"], precision="bf16", engine_field={},
                          smoke=False, work=tmp_path, size_steps=2, card_total=80 * GIB,
                          size_presets=["GSM8K"], size_checkpointing=(False,))
    rows = check.size_rows(ctx)
    assert [(r["shape"], r["preset"], r["checkpointing"]) for r in rows] == [("Qwen2.5-7B", "GSM8K", False)]


def test_the_examples_in_the_checks_docstrings_hold():
    """bench/ is outside the suite's doctest paths: its examples (the op profile's summary among them) run here."""
    import doctest

    result = doctest.testmod(check)
    assert result.attempted >= 3 and result.failed == 0


def test_the_compiled_arm_restores_the_trainer_and_accelerate_as_it_found_them():
    import accelerate.utils
    import torch

    import pipeline.train as trainer_module

    before = (trainer_module.grpo_args, accelerate.utils.TorchDynamoPlugin, torch._dynamo.config.recompile_limit)
    with check.compiled_training_passes():
        assert trainer_module.grpo_args is not before[0]
        assert accelerate.utils.TorchDynamoPlugin().use_regional_compilation
        assert torch._dynamo.config.recompile_limit >= 64
    assert (trainer_module.grpo_args, accelerate.utils.TorchDynamoPlugin,
            torch._dynamo.config.recompile_limit) == before
