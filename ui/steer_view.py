"""What the Train tab's "Steer this run" panel shows and sends, pure (no Gradio): the fields prefilled with the
values in force, the request made of only the fields a user changed, the answers in words, the settings that
stay fixed, and the changes as the run header and the Runs table list them. The rules and the files are
pipeline/setup/steering.py; the panel's layout and events are ui/steer_panel.py."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from pipeline import runner
from pipeline.run_folder import owners, runs
from pipeline.setup import steering
from pipeline.setup.config import ConfigError, RunConfig
from ui.charts import change_label

# The panel's number fields besides the weights, in the order shown: (setting, label).
NUMBERS = (("temperature", "Temperature"), ("learning_rate", "Learning rate"), ("beta", "beta (KL weight)"))
# One weight field per reward, up to this many; a run with more rewards steers the rest from the command line.
MAX_WEIGHTS = 8
# A run in these states can be steered: now while it trains, at its first step when it is resumed.
STEERABLE_STATES = ("queued", "running", "stopped", "failed", "finished")
# How many of the latest answers the panel lists.
SHOWN_ANSWERS = 5


def next_step_text(state: str | None, logged: int) -> str:
    """When a change asked for now applies, for a run in `state` whose last logged step is `logged`: a running
    trainer is busy with the step after it, so the change waits for the one after that.

    >>> next_step_text("running", 3), next_step_text("running", 0)
    ('at step 5, the next to start (step 4 is training now)', 'at the first step to start (step 1, or 2 if step 1 is under way)')
    >>> next_step_text("stopped", 3)
    'when the run is resumed, from its first step'
    """
    if state == "finished":
        return "if the run is resumed to a later step, from its first new step"
    if state not in ("queued", "running"):
        return "when the run is resumed, from its first step"
    if logged == 0:
        return "at the first step to start (step 1, or 2 if step 1 is under way)"
    return f"at step {logged + 2}, the next to start (step {logged + 1} is training now)"


def _state_note(state: str | None, step: int) -> tuple[bool, str]:
    """Whether the panel takes changes for a run in `state`, and what it says about when they apply."""
    if state in ("queued", "running"):
        return True, ("Changes apply when the next step starts, on every process. Change only what you want; the "
                      "other fields stay as they are.")
    if state in ("stopped", "failed"):
        return True, f"This run is {state}: a change applies when it is resumed, from its first step."
    if state == "finished":
        return True, ("This run has finished: a change applies if you train it further (Runs panel: *Resume to step* "
                      "past its last step, then Resume), from its first new step.")
    return False, "This run can't be steered: its settings can't be read (see the header)."


def _current_step(run_dir: Path) -> int:
    metrics = runs.read_metrics(run_dir)
    return int(metrics[-1].get("step") or 0) if metrics else 0


def _value_text(value: Any, width: int = 48) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[:width - 1] + "…"


def fixed_markdown(cfg: RunConfig | None) -> str:
    """The settings that can't change mid-run: this run's value and why it is fixed."""
    values = cfg.to_dict() if cfg is not None else {}
    lines = ["| setting | this run | why it stays |", "|---|---|---|"]
    for setting, reason in steering.fixed_settings().items():
        why = reason.removeprefix("fixed: ")
        lines.append(f"| `{setting}` | `{_value_text(values.get(setting, '?'))}` | {why} |")
    return "\n".join(lines)


def answers_markdown(run_dir: Path) -> str:
    """The requests still waiting, then the latest answers (applied, refused, nothing to change), newest first."""
    lines = []
    for waiting in steering.pending_requests(run_dir):
        try:
            wanted = steering.flatten(waiting.get("changes"))
        except steering.SteerRefused:
            wanted = {}
        what = ", ".join(change_label({"setting": s, "new": v}) for s, v in wanted.items())
        lines.append(f"⏳ Waiting: {what or 'an empty request'}. Applies at the run's next step.")
    answered: dict[str, list[dict]] = {}
    for row in steering.read_record(run_dir):
        answered.setdefault(str(row.get("id")), []).append(row)
    for rows in list(answered.values())[::-1][:SHOWN_ANSWERS]:
        step = rows[0].get("step")
        if "refused" in rows[0]:
            lines.append(f"❌ Refused at step {step}: {rows[0]['refused']}")
        elif rows[0].get("unchanged"):
            lines.append(f"✓ Nothing to change at step {step}: those values were in force.")
        else:
            lines.append(f"✓ Applied at step {step}: {', '.join(change_label(r) for r in rows)}")
    return "\n\n".join(lines)


def command_text(run_dir: Path, cfg: RunConfig) -> str:
    """The equivalent commands for this run and the settings it trains with now (what Resume uses)."""
    here = runs.runs_dir() / run_dir.name
    first = (steering.reward_names(cfg) or ["REWARD"])[0]
    resume = runner.command_preview(runner.command("train", here, resume=True, python=".venv/bin/python"))
    return (f"# Steer {run_dir.name} from a terminal (the same checks as this panel):\n"
            f".venv/bin/python -m pipeline.steer --run-dir {here} --set temperature=VALUE --weight {first}=WEIGHT\n"
            f".venv/bin/python -m pipeline.steer --run-dir {here} --show   # the changes so far and the values now\n"
            f"# Resume trains with the settings in force:\n{resume}\n\n"
            f"# Settings in force: config.json, each start's overrides, then every change applied\n{cfg.to_json()}")


def panel(run_name: str | None) -> dict[str, Any]:
    """Everything the panel shows for the run on screen: whether it takes changes ("enabled") and why ("note"),
    the fields' values ("temperature", "learning_rate", "beta", "weights": [(name, weight)]), the answers so far
    ("answers"), the fixed settings ("fixed"), the equivalent commands ("command") and "shown", the values the
    fields were filled with (Apply sends what differs from them)."""
    run_dir = runs.resolve_run(run_name) if run_name else None
    empty = {"enabled": False, "weights": [], "answers": "", "fixed": fixed_markdown(None), "command": "",
             "shown": {}, **{setting: None for setting, _ in NUMBERS}}
    if run_dir is None:
        return {**empty, "note": "Pick a run, or start one: while it trains you can change its reward weights, "
                                 "temperature, learning rate and beta here."}
    try:  # the fields show what the run trains with from its next step: the values in force, then the requests
        cfg = steering.config_requested(run_dir)
    except (ConfigError, ValueError, TypeError, OSError):
        return {**empty, "note": _state_note("damaged", 0)[1]}
    enabled, note = _state_note(runs.read_status(run_dir).get("state"), _current_step(run_dir))
    weights = list(zip(steering.reward_names(cfg), (float(r.weight) for r in cfg.rewards)))
    if len(weights) > MAX_WEIGHTS:
        note += (f" The weights of the rewards after the first {MAX_WEIGHTS} can be changed with the command "
                 "below.")
    shown = {**{setting: getattr(cfg, setting) for setting, _ in NUMBERS}, "weights": dict(weights[:MAX_WEIGHTS])}
    return {"enabled": enabled, "note": note, **{setting: shown[setting] for setting, _ in NUMBERS},
            "weights": weights[:MAX_WEIGHTS], "answers": answers_markdown(run_dir), "fixed": fixed_markdown(cfg),
            "command": command_text(run_dir, steering.config_in_force(run_dir)), "shown": shown}


def _differs(old: Any, new: Any) -> bool:
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(new, bool):
        return not math.isclose(float(old), float(new), rel_tol=1e-9, abs_tol=0.0)
    return old != new


def changed_only(shown: dict, typed: dict) -> dict:
    """The request for what the user changed: each field whose value differs from the one it was filled with.
    `typed` has the same keys as `shown` ("weights": {name: weight}).

    >>> changed_only({"temperature": 0.9, "beta": 0.0, "weights": {"a": 1.0, "b": 1.0}},
    ...              {"temperature": 0.9, "beta": 0.04, "weights": {"a": 1.0, "b": 0}})
    {'beta': 0.04, 'weights': {'b': 0}}
    """
    out = {setting: typed[setting] for setting in shown
           if setting != "weights" and setting in typed and _differs(shown[setting], typed[setting])}
    weights = {name: typed.get("weights", {}).get(name, w) for name, w in shown.get("weights", {}).items()}
    weights = {name: w for name, w in weights.items() if _differs(shown["weights"][name], w)}
    return {**out, "weights": weights} if weights else out


def steer(run_name: str | None, shown: dict, typed: dict, actor: owners.Actor | None = None,
          allow_custom_rewards: bool = False) -> str:
    """Apply's answer: send the changed fields to the run (pipeline/setup/steering.py: request) and say when they
    apply, or why not: no run, another user's run, a run that can't be steered, an empty field, nothing
    changed, or Start's own words for a value it would refuse."""
    run_dir = runs.resolve_run(run_name) if run_name else None
    if run_dir is None:
        return "Pick a run to steer."
    refusal = owners.refusal(run_dir, actor, "steer it")
    if refusal:
        return f"❌ {refusal}"
    state = runs.read_status(run_dir).get("state")
    if state not in STEERABLE_STATES:
        return f"❌ {_state_note(state, 0)[1]}"
    empty = [label for setting, label in NUMBERS if setting in shown and typed.get(setting) is None]
    empty += [f"the weight of {name}" for name, w in typed.get("weights", {}).items() if w is None]
    if empty:
        return f"❌ Give {', '.join(empty)} a value (the field is empty)."
    changes = changed_only(shown, typed)
    if not changes:
        return "Nothing to apply: change a field first."
    try:
        steering.request(run_dir, changes, allow_custom_rewards)
    except (steering.SteerRefused, ConfigError) as exc:
        return f"❌ {exc}"
    asked = ", ".join(change_label({"setting": s, "old": _old(shown, s), "new": v})
                      for s, v in steering.flatten(changes).items())
    return f"✓ Requested {asked}. Applies {next_step_text(state, _current_step(run_dir))}."


def _old(shown: dict, setting: str) -> Any:
    if setting.startswith(steering.WEIGHT):
        return shown.get("weights", {}).get(setting[len(steering.WEIGHT):])
    return shown.get(setting)


def changes_html(changes: list[dict]) -> str:
    """The run header's list of the changes applied (step, setting, old → new); empty for an unsteered run."""
    if not changes:
        return ""
    items = "".join(f"<li>step {html.escape(str(c.get('step')))}: {html.escape(change_label(c))}</li>"
                    for c in changes)
    return f"<div class='gs-steered'><b>Steered:</b><ul>{items}</ul></div>"


def changes_text(changes: list[dict]) -> str | None:
    """A run's changes in one cell of the Runs table.

    >>> changes_text([{"step": 3, "setting": "beta", "old": 0.0, "new": 0.04}]), changes_text([])
    ('3: beta 0→0.04', None)
    """
    return "; ".join(f"{c.get('step')}: {change_label(c)}" for c in changes) or None
