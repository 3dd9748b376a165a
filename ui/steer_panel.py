"""The Train tab's "Steer this run" panel: the run on screen's reward weights, temperature, learning rate and beta,
prefilled with the values in force, an Apply that sends only what changed, the answers, and the settings that stay
fixed with why. Its own view in the page's one poll (ui/watch.py, part "steering"), so a recorded change redraws
the panel without touching the charts' event. What it shows and sends is ui/steer_view.py (pure)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from ui import steer_view, watch
from ui.tab import acting

REFRESH_ID = "steer-refresh"
PANEL_ID = "steer-panel"
# The panel's outputs by name, in the order its refresh returns them.
OUTPUTS = ("steer_note", *(s for s, _ in steer_view.NUMBERS), *(f"weight_{i}" for i in range(steer_view.MAX_WEIGHTS)),
           "steer_apply", "steer_answers", "steer_fixed", "steer_command", "steer_shown")


def build() -> dict[str, Any]:
    """Lay the panel out in the enclosing column; returns its components by name (OUTPUTS, plus the Apply's
    message and the hidden refresh button)."""
    parts: dict[str, Any] = {}
    with gr.Accordion("Steer this run", open=True, elem_id=PANEL_ID):
        parts["steer_note"] = gr.Markdown(steer_view.panel(None)["note"], elem_id="steer-note")
        with gr.Row():
            for setting, label in steer_view.NUMBERS:
                parts[setting] = gr.Number(label=label, interactive=False, elem_id=f"steer-{setting}")
        with gr.Row(elem_id="steer-weights"):
            for i in range(steer_view.MAX_WEIGHTS):
                parts[f"weight_{i}"] = gr.Number(label=f"weight {i + 1}", visible=False, min_width=120,
                                                 elem_id=f"steer-weight-{i}")
        gr.Markdown("A reward's weight scales its part of the total that GRPO normalizes; 0 keeps scoring and "
                    "charting it without training on it (a monitor), and it can get its weight back later.")
        with gr.Row():
            parts["steer_apply"] = gr.Button("Apply", variant="primary", interactive=False, elem_id="steer-apply",
                                             scale=0)
            parts["steer_message"] = gr.Markdown(elem_id="steer-message")
        parts["steer_answers"] = gr.Markdown(elem_id="steer-answers")
        with gr.Accordion("Fixed for the whole run, and why", open=False):
            parts["steer_fixed"] = gr.Markdown(steer_view.fixed_markdown(None), elem_id="steer-fixed")
        with gr.Accordion("Settings in force, and steering from a terminal", open=False):
            parts["steer_command"] = gr.Code(language="shell", lines=6, elem_id="steer-command")
        parts["steer_shown"] = gr.State({})  # the values the fields were filled with: Apply sends what differs
    parts["steer_refresh"] = gr.Button("Refresh the steer panel", elem_id=REFRESH_ID, elem_classes=["gs-hidden"])
    return parts


def steer_panel_view(run_name: str | None) -> dict[str, Any]:
    """The panel for the run on screen, as {output name: update} (OUTPUTS)."""
    view = steer_view.panel(run_name)
    enabled = view["enabled"]
    out: dict[str, Any] = {
        "steer_note": view["note"],
        **{setting: gr.Number(value=view[setting], interactive=enabled) for setting, _ in steer_view.NUMBERS},
        "steer_apply": gr.Button(interactive=enabled),
        "steer_answers": view["answers"], "steer_fixed": view["fixed"], "steer_command": view["command"],
        "steer_shown": view["shown"],
    }
    for i in range(steer_view.MAX_WEIGHTS):
        if i < len(view["weights"]):
            name, weight = view["weights"][i]
            out[f"weight_{i}"] = gr.Number(value=weight, label=f"weight: {name}", visible=True, interactive=enabled)
        else:
            out[f"weight_{i}"] = gr.Number(value=None, visible=False)
    return out


def apply_changes(run_name: str | None, shown: dict, allow_custom: bool, operators, *values,
                  request: gr.Request = None) -> str:
    """Apply: the fields as typed (the three numbers, then the weights in the order shown), sent as a change
    request when the user may steer this run."""
    numbers = dict(zip((s for s, _ in steer_view.NUMBERS), values))
    weights = values[len(steer_view.NUMBERS):]
    typed = {**numbers, "weights": dict(zip((shown or {}).get("weights", {}), weights))}
    return steer_view.steer(run_name, shown or {}, typed, acting(request, operators), allow_custom)


def wire(parts: dict[str, Any], run_select, allow, ops) -> str:
    """The panel's events: Apply, and its redraw when the page's poll sees the "steering" part move (the run on
    screen changed, a request was written or answered, the trainer's state changed). Returns the poll's script."""
    outputs = [parts[name] for name in OUTPUTS]
    fields = [parts[s] for s, _ in steer_view.NUMBERS] + [parts[f"weight_{i}"] for i in range(steer_view.MAX_WEIGHTS)]

    def by_name(run_name):
        view = steer_panel_view(run_name)
        return [view[name] for name in OUTPUTS]

    parts["steer_apply"].click(apply_changes, [run_select, parts["steer_shown"], allow, ops, *fields],
                               parts["steer_message"], api_name="steer_run", concurrency_limit=1,
                               concurrency_id="steer")
    parts["steer_refresh"].click(by_name, run_select, outputs, show_progress="hidden", trigger_mode="always_last",
                                 api_visibility="private")
    run_select.change(lambda: "", None, parts["steer_message"], show_progress="hidden")
    return watch.follow(PANEL_ID, REFRESH_ID, ("steering",))
