"""Steering a run while it trains: which settings may change mid-run, checking a change by Start's rules,
the request and record files, and the values in force. Pure Python (no torch, no gradio); the trainer's
side is pipeline/training/steer_trainer.py; `python -m pipeline.steer` is its command line.

    python -m pipeline.steer --run-dir DIR --set learning_rate=1e-5 --set temperature=0.8 --weight NAME=0
    python -m pipeline.steer --run-dir DIR --show

A request is one line in the run's steer_requests.jsonl ({id, time, changes}); the trainer reads new ones
at the start of each step, checks them against the values in force, and records what it applied (or why
it refused) in steering.jsonl, which only the trainer writes.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from pipeline.run_folder import run_files, runs
from pipeline.setup.config import ConfigError, RunConfig
from pipeline.run_folder.jsonio import append_jsonl, read_jsonl
from pipeline.rewards.scoring import metric_names

# What may change mid-run, besides each reward's weight ("weight/<reward name>").
STEERABLE = ("learning_rate", "temperature", "beta")
WEIGHT = "weight/"

# A request file larger than this is refused (a request is about 100 bytes: some ten thousand of them).
MAX_REQUESTS_BYTES = 1 << 20

# Why the other settings hold for the whole run. A setting not named here: GENERIC_FIXED.
FIXED = {
    "model": "the LoRA is trained on this model's weights",
    "dataset": "the prompts are loaded and split once, when the trainer starts",
    "rewards": "the reward functions are built when the trainer starts (a weight can change; add or remove "
               "rewards in a new run)",
    "num_generations": "the sampler and the advantages are laid out for G completions per prompt",
    "batch_size": "the data loader and the group layout are built for this batch",
    "gradient_accumulation_steps": "the data loader and the group layout are built for it",
    "steps_per_generation": "the data loader and the group layout are built for it",
    "num_iterations": "each sampled batch is reused this many times, set up at the start",
    "lora_r": "the optimizer's LoRA matrices are sized by it",
    "lora_alpha": "the LoRA scale is fixed when the adapter is built",
    "lora_dropout": "the LoRA layers are built with it",
    "lora_target_modules": "the optimizer's LoRA matrices sit on these layers",
    "max_steps": "set by Start, or by a Resume with more steps",
    "max_completion_length": "the sampler and its cache are sized by it",
    "max_prompt_tokens": "every prompt was checked against it at the start",
    "precision": "the model is loaded in it",
    "load_in_4bit": "the model is loaded in it",
    "use_vllm": "the generation engine is started with the run",
    "fast_engine": "the generation engine is chosen at the start",
    "generation_engine": "the generation engine is chosen at the start",
    "gradient_checkpointing": "the model is prepared for it at the start",
    "seed": "the data order and sampling are seeded at the start",
    "lr_scheduler": "the schedule is built at the start (the learning rate itself can change)",
}
GENERIC_FIXED = "read once, when the trainer starts"


class SteerRefused(ValueError):
    """A change that can't be applied to this run. The message says why, in Start's words where Start would
    refuse the same value."""


def fixed_reason(setting: str) -> str | None:
    """Why `setting` can't change while the run trains; None when it can.

    >>> fixed_reason("lora_alpha")
    'fixed: the LoRA scale is fixed when the adapter is built'
    >>> fixed_reason("temperature") is None, fixed_reason("weight/length_target") is None
    (True, True)
    """
    if setting in STEERABLE or setting.startswith(WEIGHT):
        return None
    return f"fixed: {FIXED.get(setting, GENERIC_FIXED)}"


def fixed_settings() -> dict[str, str]:
    """Every RunConfig setting that can't change mid-run, with its reason (for the Train tab to show)."""
    return {f.name: fixed_reason(f.name) for f in dataclasses.fields(RunConfig) if f.name not in STEERABLE}


def reward_names(cfg: RunConfig) -> list[str]:
    """The rewards' names as the trainer names them (a repeated reward gets _2, _3: its metric key).

    >>> from pipeline.setup.config import RewardSpec
    >>> reward_names(RunConfig(rewards=[RewardSpec("a"), RewardSpec("b"), RewardSpec("a")]))
    ['a', 'b', 'a_2']
    """
    return metric_names(cfg.rewards)


def flatten(changes: Any) -> dict[str, Any]:
    """A request's changes as {setting: value}; weights may come as {"weights": {name: w}} or "weight/<name>".

    >>> flatten({"learning_rate": 1e-5, "weights": {"length_target": 0}})
    {'learning_rate': 1e-05, 'weight/length_target': 0}
    """
    if not isinstance(changes, dict) or not changes:
        raise SteerRefused("A change request needs at least one setting and its new value, e.g. "
                           '{"learning_rate": 1e-5} or {"weights": {"length_target": 0}}.')
    out = {}
    for key, value in changes.items():
        if key == "weights":
            if not isinstance(value, dict):
                raise SteerRefused('"weights" must map reward names to weights, e.g. {"length_target": 0}.')
            out.update({f"{WEIGHT}{name}": w for name, w in value.items()})
        else:
            out[str(key)] = value
    if not out:
        raise SteerRefused("A change request needs at least one setting and its new value.")
    return out


def get_value(cfg: RunConfig, setting: str) -> Any:
    if setting.startswith(WEIGHT):
        return cfg.rewards[reward_names(cfg).index(setting[len(WEIGHT):])].weight
    return getattr(cfg, setting)


def _set_value(cfg: RunConfig, setting: str, value: Any) -> None:
    if setting.startswith(WEIGHT):
        cfg.rewards[reward_names(cfg).index(setting[len(WEIGHT):])].weight = value
    else:
        setattr(cfg, setting, value)


def _number(setting: str, value: Any) -> Any:
    """Numbers as floats (a weight or rate typed as "1e-5" on a command line); anything else is left for
    Start's rules to name."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def check_changes(cfg: RunConfig, changes: Any, allow_custom_rewards: bool = False) -> list[dict]:
    """The changes a request makes to `cfg` (the values in force), as [{setting, old, new}] (a value equal to
    the one in force is left out), or SteerRefused with why: a fixed setting with its reason, an unknown
    reward, or what Start's pre-flight (`RunConfig.problems`) says about the changed config that it did
    not already say about the config in force."""
    wanted = flatten(changes)
    names = reward_names(cfg)
    for setting in wanted:
        if setting.startswith(WEIGHT) and setting[len(WEIGHT):] not in names:
            raise SteerRefused(f"This run has no reward named '{setting[len(WEIGHT):]}'. Its rewards: "
                               f"{', '.join(names)}.")
        if setting not in {f.name for f in dataclasses.fields(RunConfig)} and not setting.startswith(WEIGHT):
            raise SteerRefused(f"Unknown setting '{setting}'. What can change while a run trains: "
                               f"{', '.join(STEERABLE)} and each reward's weight.")
        reason = fixed_reason(setting)
        if reason:
            raise SteerRefused(f"{setting} can't change while the run trains ({reason}).")
    changed = apply_changes(cfg, [{"setting": s, "new": _number(s, v)} for s, v in wanted.items()])
    before = set(cfg.problems(allow_custom_rewards=allow_custom_rewards))
    new_problems = [p for p in changed.problems(allow_custom_rewards=allow_custom_rewards) if p not in before]
    if new_problems:
        raise SteerRefused(" ".join(new_problems))
    beta_problem = _beta_problem(cfg, changed)
    if beta_problem:
        raise SteerRefused(beta_problem)
    out = []
    for setting in wanted:
        old, new = get_value(cfg, setting), get_value(changed, setting)
        if old != new:
            out.append({"setting": setting, "old": old, "new": new})
    return out


def _beta_problem(cfg: RunConfig, changed: RunConfig) -> str | None:
    """Turning KL on needs the reference model's log-probabilities of the batch being trained on. TRL works
    them out when it samples a batch, and only while beta is above 0: a batch sampled with beta 0 and
    trained on over several steps has none."""
    if cfg.beta != 0 or changed.beta == 0:
        return None
    spans_steps = cfg.num_iterations > 1 or (cfg.steps_per_generation or cfg.gradient_accumulation_steps) \
        > cfg.gradient_accumulation_steps
    if spans_steps:
        return ("beta can't be raised from 0 in this run: each sampled batch is trained on over several steps "
                "(iterations per batch or steps per generation above 1), and a batch sampled without KL has no "
                "reference log-probabilities to compare with. Start a new run with beta above 0.")
    return None


def apply_changes(cfg: RunConfig, changes: list[dict]) -> RunConfig:
    """A copy of `cfg` with each change's new value ({setting, new}, in order); changes to a reward this
    config lacks are skipped."""
    out = copy.deepcopy(cfg)
    names = reward_names(out)
    for change in changes:
        setting = change.get("setting")
        if not isinstance(setting, str) or (setting.startswith(WEIGHT) and setting[len(WEIGHT):] not in names):
            continue
        if setting.startswith(WEIGHT) or setting in STEERABLE:
            _set_value(out, setting, change.get("new"))
    return out


# ---- the files ------------------------------------------------------------------------------


def read_record(run_dir: str | Path) -> list[dict]:
    """steering.jsonl, oldest first: applied changes ({id, step, setting, old, new, time}), refusals
    ({id, step, refused, time}) and requests that changed nothing ({id, step, unchanged: true, time})."""
    return read_jsonl(Path(run_dir) / run_files.STEERING)


def applied_changes(run_dir: str | Path) -> list[dict]:
    """The changes the trainer applied, oldest first: what a chart marks at its step."""
    return [row for row in read_record(run_dir) if "setting" in row]


def read_requests(run_dir: str | Path) -> list[dict]:
    """steer_requests.jsonl, oldest first, each with an id (a line written without one is named by its
    place in the file). A torn last line is skipped until it is whole."""
    out = []
    for i, row in enumerate(read_jsonl(Path(run_dir) / run_files.STEER_REQUESTS)):
        out.append({**row, "id": str(row.get("id") or f"line-{i + 1}")})
    return out


def pending_requests(run_dir: str | Path, done: set[str] | None = None) -> list[dict]:
    """The requests the trainer has not answered yet (by id), oldest first."""
    done = done if done is not None else {str(row.get("id")) for row in read_record(run_dir)}
    return [row for row in read_requests(run_dir) if row["id"] not in done]


def config_in_force(run_dir: str | Path) -> RunConfig:
    """The run's settings now: config.json, the overrides of each start (launches.jsonl), then every change
    the trainer applied (steering.jsonl), in order. Resume trains with these."""
    if runs.read_json(Path(run_dir) / run_files.CONFIG) is None:  # `{}` is readable: every setting at its default
        raise ConfigError(f"{run_dir} has no readable {run_files.CONFIG}.")
    data = runs.effective_config(run_dir)
    return apply_changes(RunConfig.from_dict(data), applied_changes(run_dir))


def settings_in_force(run_dir: str | Path) -> dict:
    """What can be steered and its value now: {"learning_rate", "temperature", "beta", "weights": {name: w}},
    plus "fixed": {setting: why} for the rest (for a UI or Show command)."""
    cfg = config_in_force(run_dir)
    return {**{name: getattr(cfg, name) for name in STEERABLE},
            "weights": dict(zip(reward_names(cfg), (spec.weight for spec in cfg.rewards))),
            "fixed": fixed_settings()}


def config_requested(run_dir: str | Path, allow_custom_rewards: bool = False) -> RunConfig:
    """The values in force with the requests still waiting applied, as the trainer will apply them (in order,
    the ones it will refuse skipped): what the run trains with from its next step."""
    cfg = config_in_force(run_dir)
    for waiting in pending_requests(run_dir):
        try:
            cfg = apply_changes(cfg, check_changes(cfg, waiting.get("changes"), allow_custom_rewards))
        except SteerRefused:
            continue
    return cfg


def request(run_dir: str | Path, changes: dict, allow_custom_rewards: bool = False) -> dict:
    """Check `changes` against the values in force (with the requests still waiting applied first) and
    append them to steer_requests.jsonl for the trainer to apply at its next step. Returns the request line
    ({id, time, changes}); raises SteerRefused with the reason otherwise."""
    run_dir = Path(run_dir)
    cfg = config_requested(run_dir, allow_custom_rewards)
    if not check_changes(cfg, changes, allow_custom_rewards):
        raise SteerRefused("Nothing to change: those values are already in force.")
    path = run_dir / run_files.STEER_REQUESTS
    if path.exists() and path.stat().st_size > MAX_REQUESTS_BYTES:
        raise SteerRefused(f"This run has more change requests than it keeps ({MAX_REQUESTS_BYTES // 1024} KiB "
                           f"of {run_files.STEER_REQUESTS}); start a new run to steer further.")
    row = {"id": uuid.uuid4().hex[:12], "time": time.time(), "changes": flatten(changes)}
    append_jsonl(path, row)
    return row


def describe(change: dict) -> str:
    """One line for a change or a refusal.

    >>> describe({"step": 4, "setting": "learning_rate", "old": 0.0003, "new": 1e-05})
    'step 4: learning_rate 0.0003 -> 1e-05'
    >>> describe({"step": 5, "refused": "Temperature must be above 0."})
    'step 5: refused: Temperature must be above 0.'
    """
    if "refused" in change:
        return f"step {change.get('step')}: refused: {change['refused']}"
    if change.get("unchanged"):
        return f"step {change.get('step')}: nothing to change (the values asked for were in force)"
    return f"step {change.get('step')}: {change.get('setting')} {change.get('old')} -> {change.get('new')}"


# ---- the command line -----------------------------------------------------------------------


def _pairs(items: list[str], flag: str) -> dict[str, Any]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SteerRefused(f"{flag} takes NAME=VALUE (got {item!r}).")
        out[key.strip()] = _number(key, value.strip())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.steer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True, help="The run folder.")
    parser.add_argument("--set", action="append", default=[], metavar="SETTING=VALUE",
                        help=f"A new value for {', '.join(STEERABLE)} (repeatable).")
    parser.add_argument("--weight", action="append", default=[], metavar="REWARD=WEIGHT",
                        help="A reward's new weight; 0 makes it a monitor (repeatable).")
    parser.add_argument("--show", action="store_true", help="List the changes made so far and the values in force.")
    parser.add_argument("--allow-custom-rewards", action="store_true",
                        help="Check the run's custom_python reward as a start with this flag would.")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir).expanduser()
    try:
        if args.set or args.weight:
            changes: dict[str, Any] = _pairs(args.set, "--set")
            weights = _pairs(args.weight, "--weight")
            if weights:
                changes["weights"] = weights
            row = request(run_dir, changes, args.allow_custom_rewards)
            print(f"Requested {json.dumps(row['changes'])} (id {row['id']}): applied at the run's next step, "
                  "or when it is resumed.")
        if args.show or not (args.set or args.weight):
            for change in read_record(run_dir):
                print(describe(change))
            for waiting in pending_requests(run_dir):
                print(f"waiting: {json.dumps(waiting.get('changes'))} (id {waiting['id']})")
            force = settings_in_force(run_dir)
            print("In force: " + ", ".join(f"{k}={_short(force[k])}" for k in STEERABLE) + ", weights "
                  + ", ".join(f"{n}={_short(w)}" for n, w in force["weights"].items()))
    except (SteerRefused, ConfigError) as exc:
        print(f"Refused: {exc}", file=sys.stderr)
        return 2
    return 0


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) and math.isfinite(value) else str(value)

