"""Train form <-> RunConfig. The one place the UI's raw values become a typed config.

No gradio import: this is tested as plain Python.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from pipeline.config import ConfigError, DatasetSpec, RewardSpec, RunConfig
from pipeline.models import BUNDLED_LABEL
from pipeline.config import BUNDLED_MODEL_ID
from pipeline.rewards import reward_registry

SOURCES = {
    "TL;DR (bundled)": "tldr",
    "Arithmetic (bundled)": "arithmetic",
    "Upload CSV/JSONL": "file",
    "Hub dataset": "hub",
}
SOURCE_LABELS = {v: k for k, v in SOURCES.items()}

# Hyperparameters shown in the form, in order; each becomes one component with the field's help text.
HYPER_FIELDS = [
    "num_generations", "batch_size", "max_steps", "learning_rate", "beta", "epsilon",
    "max_completion_length", "max_prompt_tokens", "temperature", "top_p", "loss_type", "scale_rewards",
    "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "seed", "save_steps", "keep_checkpoints", "precision",
    "gradient_checkpointing", "reward_errors", "reward_timeout_s", "probe_every", "probe_prompts",
    "warmup_steps", "mask_truncated_completions", "fast_engine",
    # GRPO options and the GPU path
    "num_iterations", "epsilon_high", "importance_sampling_level", "steps_per_generation", "lr_scheduler",
    "top_k", "min_p", "repetition_penalty", "load_in_4bit", "use_vllm", "vllm_gpu_memory_utilization",
    "vllm_enable_sleep_mode", "vllm_max_model_length", "vllm_tensor_parallel_size", "report_to",
]
REWARD_COLUMNS = ["use", "reward", "weight", "params (JSON)"]


def reward_rows(config: RunConfig | None = None, allow_custom: bool = False) -> list[list[Any]]:
    """Rows for the rewards table: every registered reward, on/off, weight and parameters."""
    active = {s.name: s for s in (config or RunConfig()).rewards}
    rows = []
    for d in reward_registry.describe():
        if d["custom_code"] and not allow_custom:
            continue
        spec = active.get(d["name"])
        params = {k: p["default"] for k, p in d["params"].items()}
        if spec:
            params.update(spec.params)
        on = bool(spec)
        weight = spec.weight if spec else 1.0
        rows.append([on, d["name"], float(weight), json.dumps(params) if params else ""])
    return rows


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on", "✓")
    return bool(value)


def rewards_from_rows(rows: list[list[Any]]) -> list[RewardSpec]:
    specs = []
    for row in rows or []:
        if len(row) < 4 or not _truthy(row[0]) or not str(row[1]).strip():
            continue
        name, weight, params_text = str(row[1]).strip(), row[2], str(row[3] or "").strip()
        try:
            params = json.loads(params_text) if params_text else {}
        except json.JSONDecodeError as exc:
            raise ConfigError(f"Reward '{name}': parameters are not valid JSON ({exc.msg}). "
                              'Example: {"target": 50}') from None
        if not isinstance(params, dict):
            raise ConfigError(f"Reward '{name}': parameters must be a JSON object like {{\"target\": 50}}.")
        try:
            weight = float(weight)
        except (TypeError, ValueError):
            raise ConfigError(f"Reward '{name}': weight must be a number.") from None
        specs.append(RewardSpec(name=name, weight=weight, params=params))
    return specs


def model_from_form(choice: str | None, custom: str | None) -> str:
    custom = (custom or "").strip()
    if custom:
        return custom
    if not choice or choice == BUNDLED_LABEL:
        return BUNDLED_MODEL_ID
    return choice


def form_to_config(model_choice: str | None, model_custom: str | None, source_label: str, file_path: str | None,
                   prompt_column: str | None, answer_column: str | None, system_prompt: str | None,
                   hub_id: str | None, hub_split: str | None, rewards_table: list[list[Any]],
                   *hyper_values: Any) -> RunConfig:
    """Build the typed config from the form's values. Raises ConfigError with a plain message."""
    if len(hyper_values) != len(HYPER_FIELDS):
        raise ConfigError(f"Expected {len(HYPER_FIELDS)} hyperparameters, got {len(hyper_values)}.")
    source = SOURCES.get(source_label, source_label)
    dataset = DatasetSpec(
        source=source,
        path=str(file_path or "") if source == "file" else "",
        prompt_column=(prompt_column or "prompt") if source in ("file", "hub") else "prompt",
        answer_column=(answer_column or "") if source in ("file", "hub") else "",
        system_prompt=system_prompt or "",
        hub_id=(hub_id or "").strip() if source == "hub" else "",
        hub_split=(hub_split or "train").strip(),
    )
    defaults = RunConfig()
    values: dict[str, Any] = {}
    for name, raw in zip(HYPER_FIELDS, hyper_values):
        default = getattr(defaults, name)
        if raw is None or raw == "":
            values[name] = default
            continue
        try:
            if isinstance(default, bool):
                values[name] = _truthy(raw)
            elif isinstance(default, int):
                as_float = float(raw)
                if as_float != int(as_float):
                    raise ValueError
                values[name] = int(as_float)
            elif isinstance(default, float):
                values[name] = float(raw)
            else:
                values[name] = str(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"'{name}' must be a {type(default).__name__}, got {raw!r}.") from None
    return RunConfig(model=model_from_form(model_choice, model_custom), dataset=dataset,
                     rewards=rewards_from_rows(rewards_table), **values)


def config_to_form(config: RunConfig) -> dict[str, Any]:
    """Values to fill the form from a config (presets, 'load settings from a run')."""
    d = asdict(config)
    return {name: d[name] for name in HYPER_FIELDS}
