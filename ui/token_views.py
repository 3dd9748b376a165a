"""The group inspector's token view: a completion drawn token by token, each token shaded by the policy's
log-probability of it or by the entropy of the policy's distribution where it was sampled, the exact values on
hover. HTML only, no Gradio: ui/views.py puts it in the groups table, ui/train.py picks the mode.
"""

from __future__ import annotations

import html
import math

TEXT, LOGP, ENTROPY = "Text", "Log-prob", "Entropy"
MODES = (TEXT, LOGP, ENTROPY)

# What each shaded mode shades by: the record's key, the value at which the shade is full, its colour (r, g, b),
# and the legend's words. Fixed ends, so that one step can be compared with another. A log-prob of -5 is a
# token the policy gave under 1% (e^-5); an entropy of 6 nats is as unsure as an even pick among 400 tokens
# (a small model sampling at temperature 1 often sits at 2 to 5).
SCALES = {
    LOGP: ("logp", -5.0, (234, 88, 12), "high log-prob: expected", "low log-prob: surprising"),
    ENTROPY: ("entropy", 6.0, (79, 70, 229), "low entropy: sure", "high entropy: unsure"),
}
MAX_ALPHA = 0.75  # the fullest shade still leaves dark text readable


def shade(mode: str, value: float | None) -> float:
    """How strongly a token is shaded, 0 (none) to 1 (full), for its value in `mode`.

    >>> shade(LOGP, 0.0), shade(LOGP, -2.5), shade(LOGP, -9.0), shade(ENTROPY, 3.0), shade(ENTROPY, None)
    (0.0, 0.5, 1.0, 0.5, 0.0)
    """
    if value is None or not math.isfinite(value) or mode not in SCALES:
        return 0.0
    full = SCALES[mode][1]
    return max(0.0, min(1.0, value / full))


def _colour(mode: str, strength: float) -> str:
    r, g, b = SCALES[mode][2]
    return f"rgba({r},{g},{b},{strength * MAX_ALPHA:.2f})"


def _value(values: list, k: int) -> float | None:
    value = values[k] if k < len(values) else None
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _hover(token: str, logp: float | None, entropy: float | None, special: bool) -> str:
    """The title of a token: the token as text (quoted, so spaces show), its log-prob with the probability, and
    the entropy."""
    parts = [("special token " if special else "token ") + repr(token)]
    parts.append("log-prob —" if logp is None else f"log-prob {logp:.4f} (p = {math.exp(logp):.4f})")
    parts.append("entropy —" if entropy is None else f"entropy {entropy:.4f}")
    return " · ".join(parts)


def _shown(token: str) -> str:
    """A token as drawn: a line break shows as ↵ before it, so a newline token has something to shade."""
    return token.replace("\n", "↵\n")


def token_spans(entry: dict, mode: str) -> str:
    """A completion token by token: one span per token, shaded by its value in `mode`, every value on hover.
    All text is escaped (completions are untrusted).

    >>> token_spans({"tokens": ["<b>", " x"], "logp": [-2.5, 0.0], "entropy": [1.0, 0.1]}, LOGP)[:95]
    "<span class='gs-tok' style='background:rgba(234,88,12,0.38)' title='token &#x27;&lt;b&gt;&#x27;"
    """
    tokens = entry.get("tokens") or []
    logps, entropies = entry.get("logp") or [], entry.get("entropy") or []
    special = set(entry.get("special") or [])
    key = SCALES[mode][0] if mode in SCALES else None
    out = []
    for k, token in enumerate(tokens):
        token = str(token)
        logp, entropy = _value(logps, k), _value(entropies, k)
        strength = shade(mode, logp if key == "logp" else entropy)
        cls = "gs-tok gs-tok-special" if k in special else "gs-tok"
        title = html.escape(_hover(token, logp, entropy, k in special), quote=True)
        out.append(f"<span class='{cls}' style='background:{_colour(mode, strength)}' title='{title}'>"
                   f"{html.escape(_shown(token), quote=True)}</span>")
    return "".join(out)


def legend_html(mode: str) -> str:
    """The colour scale of a shaded mode, with its two ends in words; empty in text mode."""
    if mode not in SCALES:
        return ""
    _, full, _, low_words, high_words = SCALES[mode]
    steps = "".join(f"<span class='gs-tok-swatch' style='background:{_colour(mode, i / 4)}'></span>"
                    for i in range(5))
    if mode == LOGP:
        ends = f"0 ({low_words})", f"{full:g} or lower ({high_words})"
    else:
        ends = f"0 ({low_words})", f"{full:g} nats or more ({high_words})"
    return (f"<div class='gs-tok-legend'>Shaded by {mode.lower()}: {html.escape(ends[0])} {steps} "
            f"{html.escape(ends[1])}. Hover a token for its values.</div>")


def missing_note(mode: str, step) -> str:
    """Said above the groups when a shaded mode has no token record for the step shown."""
    if mode not in SCALES:
        return ""
    return (f"<div class='gs-tok-legend'>No token record for step {html.escape(str(step))}: it is written just "
            "after the step's groups, or the run was started before the token view existed, or the step was left "
            "out to keep the record's size bounded. Completions show as text.</div>")
