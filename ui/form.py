"""Train form <-> RunConfig. The one place the UI's raw values become a typed config.

The form is keyed by name: RunConfig field names for the settings, DatasetSpec field names for the prompts,
plus "model_custom", "rewards" (the table) and "signal_prompts" (the prompts the learnability scan kept, held
by the page). The settings shown are the RunConfig fields marked for the form in their metadata
(`pipeline.setup.fields._form`), in dataclass order, so a new field there needs no edit here.
No gradio import: this is tested as plain Python.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from pipeline.setup.config import BUNDLED_MODEL_ID, ConfigError, DatasetSpec, RewardSpec, RunConfig
from pipeline.models.loading import BUNDLED_LABEL, CATALOG
from pipeline.rewards import reward_registry

SOURCES = {
    "TL;DR (bundled)": "tldr",
    "Arithmetic (bundled)": "arithmetic",
    "Movie questions (bundled)": "movies",
    "Upload CSV/JSONL": "file",
    "Hub dataset": "hub",
}
SOURCE_LABELS = {v: k for k, v in SOURCES.items()}
# What the Prompts radio shows where its value (the form's API value) says less than the choice does.
SOURCE_SHOWN = {"Upload CSV/JSONL": "Upload a file (CSV, TSV, JSONL, JSON)"}
# The prompt fields the form sets (DatasetSpec names); limit and eval_fraction keep their defaults.
DATASET_KEYS = ("source", "path", "prompt_column", "answer_column", "system_prompt", "hub_id", "hub_config",
                "hub_split")
REWARD_COLUMNS = ["use", "reward", "weight", "params (JSON)"]


def form_fields(cls: type[RunConfig] = RunConfig) -> list[dataclasses.Field]:
    """The settings the form shows, in dataclass order: the fields whose metadata marks them for the form."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("form")]


def form_keys(cls: type[RunConfig] = RunConfig) -> list[str]:
    """Every key of the form, in the order the Train tab lays it out (and the API takes it)."""
    return ["model", "model_custom", *DATASET_KEYS, "rewards", "signal_prompts", *(f.name for f in form_fields(cls))]


def number_bounds(field: dataclasses.Field) -> dict[str, Any]:
    """The inclusive bounds a number box can enforce, from the field's metadata (`minimum`, `maximum`). Open
    bounds (`above`, `below`) are left to RunConfig.problems(): a number box's are inclusive.

    >>> from pipeline.setup.config import RunConfig
    >>> fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    >>> number_bounds(fields["top_p"]), number_bounds(fields["save_steps"]), number_bounds(fields["seed"])
    ({'maximum': 1}, {'minimum': 1}, {})
    """
    return {key: field.metadata[key] for key in ("minimum", "maximum") if key in field.metadata}


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
        except RecursionError:
            raise ConfigError(f"Reward '{name}': parameters are nested too deeply. "
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


def _table_rows(table: Any) -> list[list[Any]]:
    """The rewards table's rows, from a pandas DataFrame (the UI), an API payload or a plain list."""
    if hasattr(table, "to_numpy"):
        return table.to_numpy().tolist()
    if isinstance(table, Mapping):
        return list(table.get("data") or [])
    return list(table or [])


def _typed(name: str, raw: Any, default: Any) -> Any:
    """A raw form value as the type of the field's default; empty means the default."""
    if raw is None or raw == "":
        return default
    try:
        if isinstance(default, bool):
            return _truthy(raw)
        if isinstance(default, int):
            as_float = float(raw)
            if as_float != int(as_float):
                raise ValueError
            return int(as_float)
        if isinstance(default, float):
            return float(raw)
        return str(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"'{name}' must be a {type(default).__name__}, got {raw!r}.") from None


def form_to_config(values: Mapping[str, Any], cls: type[RunConfig] = RunConfig) -> RunConfig:
    """Build the typed config from the form's values, keyed as `form_keys(cls)`. Raises ConfigError with a
    plain message (a key missing or unknown means the form and the config disagree: a wiring bug)."""
    keys = form_keys(cls)
    missing = [k for k in keys if k not in values]
    unknown = sorted(set(values) - set(keys))
    if missing or unknown:
        raise ConfigError("The Train form and the run config disagree (reload the page; if it stays, report it): "
                          + "; ".join(filter(None, [missing and f"no value for {', '.join(missing)}",
                                                    unknown and f"unknown {', '.join(unknown)}"])))
    source = SOURCES.get(values["source"], values["source"])
    columns = source in ("file", "hub")
    dataset = DatasetSpec(
        source=source,
        path=str(values["path"] or "") if source == "file" else "",
        prompt_column=(values["prompt_column"] or "prompt") if columns else "prompt",
        answer_column=(values["answer_column"] or "") if columns else "",
        system_prompt=values["system_prompt"] or "",
        hub_id=(values["hub_id"] or "").strip() if source == "hub" else "",
        hub_config=(values["hub_config"] or "").strip() if source == "hub" else "",
        hub_split=(values["hub_split"] or "train").strip(),
    )
    defaults = cls()
    settings = {f.name: _typed(f.name, values[f.name], getattr(defaults, f.name)) for f in form_fields(cls)}
    # The scan's prompts are recorded only when the run keeps them: a run that doesn't is unchanged.
    kept = [str(p) for p in values["signal_prompts"] or []] if settings.get("keep_signal_prompts") else []
    return cls(model=model_from_form(values["model"], values["model_custom"]), dataset=dataset,
               rewards=rewards_from_rows(_table_rows(values["rewards"])), signal_prompts=kept, **settings)


def config_to_form(config: RunConfig, allow_custom: bool = False) -> dict[str, Any]:
    """The form's values for a config, keyed and ordered as `form_keys` (presets, the API's Start inputs)."""
    ds = config.dataset
    # The dropdown offers the catalog only: any other model (a local folder, a hub id) goes in the text box.
    listed = config.model in {entry.id for entry in CATALOG}
    values = {"model": config.model if listed else BUNDLED_MODEL_ID, "model_custom": "" if listed else config.model,
              "source": SOURCE_LABELS.get(ds.source, ds.source),
              **{key: getattr(ds, key) for key in DATASET_KEYS if key != "source"},
              "rewards": reward_rows(config, allow_custom=allow_custom), "signal_prompts": list(config.signal_prompts)}
    values.update((f.name, getattr(config, f.name)) for f in form_fields(type(config)))
    return values
