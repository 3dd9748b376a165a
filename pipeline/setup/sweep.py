"""A sweep: the form's run once per value of one number setting ("learning rate: 1e-4, 3e-4, 1e-3"), or once per
pair of values of two (a grid), each a config of its own with a name that says its values, checked whole before any
is queued. No torch or gradio import.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from pipeline.run_folder.run_queue import MAX_WAITING as MAX_RUNS
from pipeline.setup.config import ConfigError, RunConfig

MAX_VALUES = 8  # a sweep of a few settings; more is a job for a script
SHORT = {"learning_rate": "lr", "num_generations": "G", "max_steps": "steps", "max_completion_length": "tokens"}


def sweepable() -> list[tuple[str, str]]:
    """The settings a sweep can vary: the form's number settings, as (label, field name), in the form's order.

    >>> ("Learning rate", "learning_rate") in sweepable() and all(name != "merge_at_end" for _, name in sweepable())
    True
    """
    out = []
    for f in dataclasses.fields(RunConfig):
        meta = f.metadata
        if meta.get("form") and "choices" not in meta and f.type in ("int", "float", int, float):
            out.append((meta.get("label", f.name), f.name))
    return out


def parse_values(name: str, text: str) -> list[int | float]:
    """The values typed for setting `name`, comma or space separated, as its type; ConfigError says what is wrong.

    >>> parse_values("learning_rate", "1e-4, 3e-4 1e-3")
    [0.0001, 0.0003, 0.001]
    >>> parse_values("num_generations", "4,8")
    [4, 8]
    >>> parse_values("num_generations", "4, 4.5")
    Traceback (most recent call last):
    ...
    pipeline.setup.config.ConfigError: Group size G takes whole numbers: '4.5' is not one.
    """
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    labels = dict((n, label) for label, n in sweepable())
    if name not in labels:
        raise ConfigError(f"A sweep varies one number setting: pick one of {', '.join(labels.values())}.")
    whole = fields[name].type in ("int", int)
    parts = [p for p in text.replace(",", " ").split() if p]
    if len(parts) < 2:
        raise ConfigError(f"Type two or more values of {labels[name]}, separated by commas, e.g. "
                          f"{'4, 8' if whole else '1e-4, 3e-4'}.")
    if len(parts) > MAX_VALUES:
        raise ConfigError(f"A sweep takes at most {MAX_VALUES} values; {len(parts)} were typed.")
    values: list[int | float] = []
    for part in parts:
        try:
            number = float(part)
        except ValueError:
            raise ConfigError(f"{labels[name]}: '{part}' is not a number.") from None
        if not math.isfinite(number):
            raise ConfigError(f"{labels[name]}: '{part}' is not a finite number.")
        if whole and number != int(number):
            raise ConfigError(f"{labels[name]} takes whole numbers: '{part}' is not one.")
        value = int(number) if whole else number
        if value in values:
            raise ConfigError(f"{labels[name]}: {part} is typed twice.")
        values.append(value)
    return values


def grid(cfg: RunConfig, axes: list[tuple[str, str]], prefix: str = "", allow_custom_rewards: bool = False
         ) -> list[tuple[str, RunConfig]]:
    """A sweep of one setting, or of two (every pair of their values: a grid), as (run name, config) pairs: the
    form's `cfg` with the values set, named after them. Each run is checked with all its values set, and
    ConfigError lists every one that can't run, so that nothing is queued unless all can.

    >>> [(label, c.learning_rate) for label, c in grid(RunConfig(), [("learning_rate", "1e-4 1e-3")], "tldr")]
    [('tldr lr 1e-4', 0.0001), ('tldr lr 1e-3', 0.001)]
    >>> [(label, c.learning_rate, c.beta) for label, c in grid(RunConfig(), [("learning_rate", "1e-4 1e-3"),
    ...                                                                      ("beta", "0, 0.04")])][1:3]
    [('lr 1e-4 beta 0.04', 0.0001, 0.04), ('lr 1e-3 beta 0', 0.001, 0.0)]
    """
    axes = [(name, text) for name, text in axes if name]
    if len({name for name, _ in axes}) < len(axes):
        raise ConfigError("A grid varies two different settings: pick another second setting.")
    # Each setting's values, and each as typed: "1e-4" names a run better than "0.0001".
    columns = [list(zip(parse_values(name, text), text.replace(",", " ").split())) for name, text in axes]
    count = math.prod(len(values) for values in columns)
    if count > MAX_RUNS:
        raise ConfigError(f"This grid makes {count} runs; the queue takes at most {MAX_RUNS}. Type fewer values.")
    out, problems = [], []
    for combo in itertools.product(*columns):
        one = dataclasses.replace(cfg, **{name: value for (name, _), (value, _) in zip(axes, combo)})
        label = " ".join(f"{SHORT.get(name, name)} {shown}" for (name, _), (_, shown) in zip(axes, combo))
        wrong = one.problems(allow_custom_rewards=allow_custom_rewards)
        if wrong:
            problems.append(f"{label}: {'; '.join(wrong)}")
        out.append(((f"{prefix} " if prefix else "") + label, one))
    if problems:
        raise ConfigError("This sweep can't be queued:\n- " + "\n- ".join(problems))
    return out
