"""The Runs panel's settings comparison: for the runs ticked in the overlay, the settings that differ between
them, one row each, so a curve that moved can be read against what was changed. Pure: configs in, HTML out."""

from __future__ import annotations

import html
import json
from typing import Any

# Settings never worth a row: the run's own bookkeeping, or lists too long to read in a cell (counted instead).
_SKIP = frozenset({"label"})
_COUNTED = frozenset({"signal_prompts"})

# The row for the changes steered into a run while it trained ("step: setting old→new"), beside its settings.
STEERED = "steered while training"

COMPARE_EMPTY = ("<div class='gs-empty gs-compare-settings'>Tick two or more runs: the settings that differ "
                 "between them are listed here, beside their curves.</div>")


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _reward_cell(spec: dict) -> str:
    params = ", ".join(f"{k}={_cell(v)}" for k, v in sorted((spec.get("params") or {}).items()) if k != "code")
    code = " (own code)" if "code" in (spec.get("params") or {}) else ""
    return f"×{_cell(spec.get('weight'))}" + (f" · {params}" if params else "") + code


def flat_settings(config: dict) -> dict[str, str]:
    """A run's config as one level of readable cells: `dataset.source`, one `reward: <name>` row per reward
    (its weight and parameters), the rest as they are.

    >>> flat = flat_settings({"learning_rate": 0.0003, "dataset": {"source": "tldr", "path": None},
    ...                       "rewards": [{"name": "length_target", "weight": 1.0, "params": {"target": 50}}],
    ...                       "signal_prompts": ["a", "b"]})
    >>> for key, cell in flat.items():
    ...     print(f"{key}: {cell}")
    learning_rate: 0.0003
    dataset.source: tldr
    dataset.path: —
    reward: length_target: ×1 · target=50
    signal_prompts: 2 prompts
    """
    out: dict[str, str] = {}
    for key, value in config.items():
        if key in _SKIP:
            continue
        if key in _COUNTED:
            out[key] = f"{len(value)} prompts" if value else "—"
        elif key == "rewards" and isinstance(value, list):
            for spec in value:
                if isinstance(spec, dict) and spec.get("name"):
                    out[f"reward: {spec['name']}"] = _reward_cell(spec)
        elif isinstance(value, dict):
            out.update({f"{key}.{sub}": _cell(v) for sub, v in value.items()})
        else:
            out[key] = _cell(value)
    return out


def differing_settings(configs: dict[str, dict]) -> list[tuple[str, list[str]]]:
    """(setting, a cell per run) for each setting whose value is not the same in every run, in the order the
    settings first appear; a reward only some runs use reads "off" in the others.

    >>> differing_settings({"a": {"seed": 1, "beta": 0.04}, "b": {"seed": 2, "beta": 0.04}})
    [('seed', ['1', '2'])]
    """
    flats = [flat_settings(cfg) for cfg in configs.values()]
    keys = list(dict.fromkeys(k for flat in flats for k in flat))
    rows = []
    for key in keys:
        missing = "off" if key.startswith("reward: ") else "—"
        cells = [flat.get(key, missing) for flat in flats]
        if len(set(cells)) > 1:
            rows.append((key, cells))
    return rows


def settings_diff_html(configs: dict[str, dict]) -> str:
    """The comparison for the ticked runs (name -> effective config): a table of what differs, or a line saying
    they share every setting. Fewer than two runs: what to do."""
    if len(configs) < 2:
        return COMPARE_EMPTY
    unreadable = [name for name, cfg in configs.items() if not cfg]
    note = (f"<div class='gs-compare-note'>No readable config.json in {html.escape(', '.join(unreadable))}.</div>"
            if unreadable else "")
    rows = differing_settings({name: cfg for name, cfg in configs.items() if cfg})
    if not rows:
        return (f"<div class='gs-compare-settings'><b>Settings that differ:</b> none. These runs started with the "
                f"same settings, seed included, and were steered alike: their curves match step for step.{note}</div>")
    head = "".join(f"<th>{html.escape(name)}</th>" for name, cfg in configs.items() if cfg)
    body = "".join(f"<tr><td><code>{html.escape(key)}</code></td>"
                   + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>" for key, cells in rows)
    return (f"<div class='gs-compare-settings'><b>Settings that differ</b> ({len(rows)})"
            f"<table class='gs-table'><tr><th>setting</th>{head}</tr>{body}</table>{note}</div>")
