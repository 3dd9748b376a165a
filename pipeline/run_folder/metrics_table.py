"""A run's numbers as one table, a row per step, for a notebook or a spreadsheet: metrics.jsonl's figures (each
reward's mean and std, the weights in force) beside the held-out probes of evals.jsonl (step 0 is the base model).
Pure Python: rows in, CSV text out."""

from __future__ import annotations

import csv
import io
from typing import Any

# Columns first when present, in this order; the rest follow in the order the rows first hold them, and the
# held-out probes' columns come last.
LEADING = ("step", "reward", "reward_std", "kl", "loss", "entropy", "completion_length", "clipped_ratio",
           "frac_reward_zero_std", "learning_rate", "temperature", "beta")


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (int, float, str, bool))


def flat_metrics(row: dict) -> dict[str, Any]:
    """One metrics.jsonl line on one level: `<reward>/mean`, `<reward>/std`, `weight/<reward>`; warnings joined.

    >>> flat_metrics({"step": 2, "reward": 1.5, "rewards": {"fmt": {"mean": 0.5, "std": 0.1}},
    ...               "reward_weights": {"fmt": 1.0}, "warnings": ["slow"]})
    {'step': 2, 'reward': 1.5, 'fmt/mean': 0.5, 'fmt/std': 0.1, 'weight/fmt': 1.0, 'warnings': 'slow'}
    """
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key == "rewards" and isinstance(value, dict):
            for name, stats in value.items():
                for stat, number in (stats or {}).items() if isinstance(stats, dict) else ():
                    out[f"{name}/{stat}"] = number
        elif key == "reward_weights" and isinstance(value, dict):
            out.update({f"weight/{name}": weight for name, weight in value.items()})
        elif key == "warnings" and isinstance(value, list):
            out[key] = "; ".join(map(str, value))
        elif _scalar(value):
            out[key] = value
    return out


def flat_probe(line: dict) -> dict[str, Any]:
    """One evals.jsonl line's numbers, prefixed `heldout/` (its answers stay in the run folder).

    >>> flat_probe({"step": 0, "reward": 2.0, "rewards": {"fmt": 1.0}, "task": {"accuracy": 0.5}, "samples": []})
    {'heldout/reward': 2.0, 'heldout/fmt': 1.0, 'heldout/accuracy': 0.5}
    """
    out: dict[str, Any] = {}
    if _scalar(line.get("reward")):
        out["heldout/reward"] = line.get("reward")
    for group in ("rewards", "task"):
        for name, value in (line.get(group) or {}).items():
            if _scalar(value):
                out[f"heldout/{name}"] = value
    return out


def metrics_csv(metrics: list[dict], evals: list[dict] | None = None) -> str:
    """The CSV text: a row per step that has a metrics line or a probe (step 0: the base model's probe alone),
    sorted by step; an empty cell where a step has no such figure.

    >>> print(metrics_csv([{"step": 1, "reward": 0.5, "kl": 0.01}], [{"step": 0, "reward": 1.0}]), end="")
    step,reward,kl,heldout/reward
    0,,,1.0
    1,0.5,0.01,
    """
    by_step: dict[int, dict[str, Any]] = {}
    for row in metrics:
        if isinstance(row.get("step"), int):
            by_step.setdefault(row["step"], {}).update(flat_metrics(row))
    for line in evals or []:
        if isinstance(line.get("step"), int):
            by_step.setdefault(line["step"], {"step": line["step"]}).update(flat_probe(line))
    rows = [by_step[step] for step in sorted(by_step)]
    seen = list(dict.fromkeys(key for row in rows for key in row))
    rest = [key for key in seen if key not in LEADING]
    columns = ([key for key in LEADING if key in seen] + [key for key in rest if not key.startswith("heldout/")]
               + [key for key in rest if key.startswith("heldout/")])  # the probes' columns last
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: "" if row.get(key) is None else row[key] for key in columns})
    return out.getvalue()
