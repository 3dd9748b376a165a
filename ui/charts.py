"""The Train tab's line charts, computed from metrics.jsonl rows: which charts there are (CHARTS), their
frames (step, value, series) and the whole-step x axis. Pure functions (pandas, no gradio), tested directly."""

from __future__ import annotations

import math

import pandas as pd

# The curves the Runs panel can overlay: label -> (the run file's rows it reads, their key, the y-axis title).
# "evals" are the held-out probes (step 0 is the base model): the curve that says whether a run generalised.
COMPARE_CURVES = {
    "Train reward": ("metrics", "reward", "total reward"),
    "Held-out reward": ("evals", "reward", "held-out total reward"),
    "KL": ("metrics", "kl", "KL"),
    "Completion length": ("metrics", "completion_length", "tokens"),
    "Token entropy": ("metrics", "entropy", "nats per token"),
}
DEFAULT_COMPARE = "Train reward"
# One reward function's mean per step, a curve for each reward the ticked runs scored ("Reward: length_target"):
# what a sweep of reward weights moved, reward by reward.
REWARD_CURVE = "Reward: "


def compare_choices(reward_names) -> list[str]:
    """The overlay's curves: the fixed ones, then one per reward function named.

    >>> compare_choices(["length_target"])[-2:]
    ['Token entropy', 'Reward: length_target']
    """
    return [*COMPARE_CURVES, *(REWARD_CURVE + name for name in reward_names)]


def compare_title(curve: str) -> str:
    return f"{curve} by run"


# The Train tab's two wide charts, and the Runs panel's overlay as the page opens.
REWARD_TITLE = "Train reward: total and per function (mean)"
PROBE_TITLE = "Held-out reward (probe prompts, greedy)"
COMPARE_TITLE = compare_title(DEFAULT_COMPARE)
# chart name -> (title, list of (series label, metrics key)); the Train tab lays them out two a row, in order.
CHARTS = {
    "reward_std": ("Reward std (across the batch)", [("reward std", "reward_std")]),
    # "Why is my reward std 0?" (ms-swift #4512): a group whose G completions all score the same teaches nothing.
    "frac_reward_zero_std": ("Share of groups with zero reward std (no signal)",
                             [("share of groups", "frac_reward_zero_std")]),
    "kl": ("KL to reference", [("kl", "kl")]),
    "entropy": ("Token entropy", [("entropy", "entropy")]),
    "completion_length": ("Mean completion length (tokens)", [("length", "completion_length")]),
    "loss": ("Loss (near 0 by design; see below)", [("loss", "loss")]),
}
# Charts whose axis has fixed ends: a share stays on 0-1.
CHART_Y_LIMITS = {"frac_reward_zero_std": [0, 1]}
# Each chart's y-axis title, the unit of what it draws (the plots' own default would read "value" on every chart).
CHART_Y_TITLES = {"reward": "reward", "probe": "reward", "compare": COMPARE_CURVES[DEFAULT_COMPARE][2],
                  "reward_std": "std", "frac_reward_zero_std": "share", "kl": "KL", "entropy": "nats per token",
                  "completion_length": "tokens", "loss": "loss"}
# What an empty chart says under its icon, before its first point (or in a run that logged none): its title, then
# when it fills. By element id; the app's page style writes them in (empty_chart_css).
FIRST_STEP = "Drawn from the first step on."
EMPTY_CHART_NOTES = {
    "reward-plot": (REWARD_TITLE, FIRST_STEP),
    "probe-plot": (PROBE_TITLE, "Its first point is the base model, answered before step 1."),
    **{f"plot-{key}": (title, FIRST_STEP) for key, (title, _) in CHARTS.items()},
    "plot-kl": (CHARTS["kl"][0], FIRST_STEP + " Not logged when beta is 0."),
    "compare-plot": ("Runs overlay", "The runs ticked have nothing logged for this curve yet."),
}


def css_text(text: str) -> str:
    r"""A CSS string literal: quotes and backslashes escaped, a line break written as CSS's "\A".

    >>> print(css_text('Say "hi"\\there\nnext'))
    "Say \"hi\"\\there\A next"
    """
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\A ")
    return f'"{escaped}"'


def empty_chart_css(notes: dict[str, tuple[str, str]] = EMPTY_CHART_NOTES) -> str:
    r"""Page style that writes each chart's title, and when it fills, under its empty box's icon: eight blank boxes
    before the first step otherwise give no hint of what each will show.

    >>> print(empty_chart_css({"plot-kl": ("KL", "Soon.")}).splitlines()[-1])
    #plot-kl .empty::after { content: "KL\A Soon."; }
    """
    rules = [".gs-steps .empty { flex-direction: column; }",
             ".gs-steps .empty::after { display: block; margin-top: 10px; max-width: 90%; text-align: center; "
             "white-space: pre-line; font-size: var(--text-sm); color: #6b7280; }"]
    rules += [f"#{elem_id} .empty::after {{ content: {css_text(title + chr(10) + when)}; }}"
              for elem_id, (title, when) in notes.items()]
    return "\n".join(rules)


# Axis labels as short as their value allows (d3's "~r"): a chart with one point labels it "36.5025", not
# "36.502480", and whole steps read "1", "2", not "1.0", "2.0". Every line plot of the app takes these; the class
# lets STEP_TICKS_JS find them.
STEP_CHART = {"x_axis_format": "~r", "y_axis_format": "~r", "elem_classes": ["gs-steps"]}

# A wide chart over a dozen steps gets a tick every half step from Vega ("0.5", "1.5"): there is no half step, and
# the plot offers no tick-step setting. This page script hides the x-axis labels and ticks that are not whole
# numbers, in every step chart, each time one is drawn. It watches the page's changes (one observer) and touches
# only the charts a change was in.
STEP_TICKS_JS = """() => {
  if (window.gsStepTicks) return;
  const whole = /^-?[0-9]+$/;
  const tidy = (chart) => {
    for (const axis of chart.querySelectorAll('g[aria-label^="X-axis"]')) {
      const labels = [...axis.querySelectorAll('.role-axis-label text')];
      const ticks = [...axis.querySelectorAll('.role-axis-tick line')];
      const between = labels.map((label) => !whole.test(label.textContent.trim()));
      labels.forEach((label, i) => { label.style.visibility = between[i] ? 'hidden' : ''; });
      if (ticks.length === labels.length) {
        ticks.forEach((tick, i) => { tick.style.visibility = between[i] ? 'hidden' : ''; });
      }
    }
  };
  let pending = new Set();
  window.gsStepTicks = new MutationObserver((records) => {
    for (const record of records) {
      const node = record.target.nodeType === 1 ? record.target : record.target.parentElement;
      const chart = node && node.closest('.gs-steps');
      if (chart) pending.add(chart);
    }
    if (!pending.size) return;
    requestAnimationFrame(() => { const charts = pending; pending = new Set(); charts.forEach(tidy); });
  });
  window.gsStepTicks.observe(document.body, {childList: true, subtree: true, characterData: true});
  document.querySelectorAll('.gs-steps').forEach(tidy);
}"""
# Shown under the charts, next to the loss chart ("why is my loss 0?": TRL #3452, Unsloth #2291).
LOSS_NOTE = ("**Why is the loss near 0?** By design. Each completion's advantage is its reward minus its group's "
             "mean, so within a group the advantages add up to zero, and the loss they weight sits near 0 (off 0 "
             "only because completions differ in length, plus beta × KL, which starts at 0). A flat loss does not "
             "mean nothing is learned: watch the **Train reward** chart, and the share of groups with zero std "
             "(those groups teach nothing).")


def monitor_label(name: str, weights: dict | None) -> str:
    """A reward's name, marked when its weight is 0 (a monitor: charted, not trained on).

    >>> monitor_label("strict_format", {"strict_format": 0.0}), monitor_label("x", None)
    ('strict_format (monitor, weight 0)', 'x')
    """
    return f"{name} (monitor, weight 0)" if (weights or {}).get(name, 1.0) == 0 else name
COLUMNS = ["step", "value", "series"]


def _frame(data: list[tuple]) -> pd.DataFrame | None:
    # None (not an empty frame) until there is data: a plot first drawn from an empty frame keeps an
    # empty colour legend and never shows its lines.
    return pd.DataFrame(data, columns=COLUMNS) if data else None


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


# Where a chart whose first point is step 0 (the held-out probes: the base model) starts, so that point is drawn
# clear of the axis rather than cut in half by it.
BEFORE_STEP_0 = -0.5


def step_axis(max_steps: int | None, steps: list[int] = (), start: float = 0) -> list[float]:
    """x-axis limits for a chart over training steps: from `start` (0, so a first point at step 1 is not
    on the edge; BEFORE_STEP_0 for a chart that starts at step 0) to the run's planned last step, and at least
    9 steps wide, so the plot's ticks fall on whole steps (a 1-2 step domain is ticked 1.0, 1.1, ...) and the
    line fills the axis as the run goes.

    >>> step_axis(16), step_axis(2), step_axis(None, [0, 5]), step_axis(4, [1, 2, 14]), step_axis(11, [0], -0.5)
    ([0, 16], [0, 9], [0, 9], [0, 14], [-0.5, 11])
    """
    hi = max([int(max_steps or 0), *steps, int(start) + 9])
    return [start, hi]


def reward_frame(rows: list[dict]) -> pd.DataFrame:
    """Total reward and each reward function's mean, long format for a colour-coded line plot."""
    data = []
    for r in rows:
        if _finite(r.get("reward")):
            data.append((r["step"], r["reward"], "total (weighted)"))
        for name, stats in (r.get("rewards") or {}).items():
            if _finite((stats or {}).get("mean")):
                data.append((r["step"], stats["mean"], monitor_label(name, r.get("reward_weights"))))
    return _frame(data)


def metric_frame(rows: list[dict], chart: str) -> pd.DataFrame:
    _, series = CHARTS[chart]
    data = [(r["step"], r[key], label) for r in rows for label, key in series if _finite(r.get(key))]
    return _frame(data)


def compare_frame(runs_rows: dict[str, list[dict]], key: str = "reward", reward: str | None = None) -> pd.DataFrame:
    """One value (`key`, or reward function `reward`'s mean) of several runs on one chart, a series per run.

    >>> compare_frame({"a": [{"step": 1, "kl": 0.1}, {"step": 2}], "b": [{"step": 1, "kl": 0.3}]}, "kl").values.tolist()
    [[1, 0.1, 'a'], [1, 0.3, 'b']]
    >>> compare_frame({"a": [{"step": 1, "rewards": {"x": {"mean": 2.0}}}, {"step": 2}]}, reward="x").values.tolist()
    [[1, 2.0, 'a']]
    """
    def value(row):
        return ((row.get("rewards") or {}).get(reward) or {}).get("mean") if reward else row.get(key)

    data = [(r["step"], value(r), name) for name, rows in runs_rows.items() for r in rows if _finite(value(r))]
    return _frame(data)


# ---- steering markers: a vertical line at the step of each change a run's trainer applied ------------------

SHORT_SETTING = {"learning_rate": "lr", "temperature": "temp", "beta": "beta"}
MARKER_PREFIX = "steered at "  # a marker's series name: "steered at 4: temp 0.9→0.7"


def short_number(value) -> str:
    """A setting's value, short enough for a chart legend.

    >>> short_number(5e-05), short_number(0.0003), short_number(1.0), short_number(0), short_number("x")
    ('5e-5', '0.0003', '1', '0', 'x')
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    text = f"{value:.3g}"
    mantissa, sep, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if sep else text


def change_label(change: dict) -> str:
    """One applied change (a steering.jsonl row) as a short label.

    >>> change_label({"setting": "learning_rate", "old": 5e-05, "new": 0.0001})
    'lr 5e-5→0.0001'
    >>> change_label({"setting": "weight/length_target", "old": 1.0, "new": 0})
    'w(length_target) 1→0'
    >>> change_label({"setting": "temperature", "new": 0.7})
    'temp → 0.7'
    """
    setting = str(change.get("setting"))
    name = f"w({setting[len('weight/'):]})" if setting.startswith("weight/") else SHORT_SETTING.get(setting, setting)
    if "old" not in change:  # asked for, not applied yet
        return f"{name} → {short_number(change.get('new'))}"
    return f"{name} {short_number(change.get('old'))}→{short_number(change.get('new'))}"


def change_markers(changes: list[dict]) -> list[tuple[int, str]]:
    """The markers a run's applied changes put on its charts: (step, label), one per step, the changes of a step
    joined. A row without a whole step (a damaged line) marks nothing.

    A legend entry holds about MARKER_LABEL_CHARS characters; a longer list of changes keeps its first and counts
    the rest (the Steer panel lists every change).

    >>> change_markers([{"step": 4, "setting": "temperature", "old": 0.9, "new": 0.7},
    ...                 {"step": 4, "setting": "beta", "old": 0.0, "new": 0.04}, {"setting": "beta"}])
    [(4, 'steered at 4: temp 0.9→0.7, beta 0→0.04')]
    >>> change_markers([{"step": 6, "setting": f"weight/{n}", "old": 1.0, "new": 2.0}
    ...                 for n in ("length_target", "token_diversity", "post_similarity")])
    [(6, 'steered at 6: w(length_target) 1→2 +2 more')]
    """
    by_step: dict[int, list[str]] = {}
    for change in changes:
        step = change.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            by_step.setdefault(step, []).append(change_label(change))
    return [(step, marker_label(step, labels)) for step, labels in sorted(by_step.items())]


MARKER_LABEL_CHARS = 56  # about what a legend entry can hold before the row runs out


def marker_label(step: int, labels: list[str]) -> str:
    """A marker's series name, within MARKER_LABEL_CHARS where the changes allow.

    >>> marker_label(3, ["w(a_very_long_reward_function_name_indeed_and_more) 1→0"])
    'steered at 3: w(a_very_long_reward_function_name_i…) 1→0'
    """
    head = f"{MARKER_PREFIX}{step}: "
    full = head + ", ".join(labels)
    if len(full) <= MARKER_LABEL_CHARS:
        return full
    first = labels[0]
    more = f" +{len(labels) - 1} more" if len(labels) > 1 else ""
    room = MARKER_LABEL_CHARS - len(head) - len(more)
    if len(first) > room and first.startswith("w(") and ") " in first:  # shorten the reward's name, keep the values
        name, values = first[2:].split(") ", 1)
        keep = max(room - len(values) - 5, 8)  # "w(", "…" and ") " around the name
        first = f"w({name[:keep]}…) {values}" if len(name) > keep else first
    return head + first + more


def with_markers(frame: pd.DataFrame | None, markers: list[tuple[int, str]],
                 y_lim: list[float] | None = None) -> pd.DataFrame | None:
    """A chart's frame with one more series per marker: two points at the marker's step, from the bottom of the
    chart's values to the top (or of its fixed y limits), drawn as a vertical line labelled in the legend.
    A chart with no data yet stays empty."""
    if frame is None or not markers:
        return frame
    lo, hi = (y_lim if y_lim else (float(frame["value"].min()), float(frame["value"].max())))
    if hi <= lo:  # a flat chart: a short line around its one value
        pad = 0.05 * max(abs(lo), 1e-3)
        lo, hi = lo - pad, hi + pad
    rules = [(step, y, label) for step, label in markers for y in (lo, hi)]
    return pd.concat([frame, pd.DataFrame(rules, columns=COLUMNS)], ignore_index=True)


# Vega-Lite's default category colours, in its order, for the data series; the markers are drawn in greys.
SERIES_COLORS = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
                 "#bab0ac")
MARKER_COLORS = ("#374151", "#9ca3af")


def series_colors(frame: pd.DataFrame | None) -> dict[str, str] | None:
    """A colour for every series of a chart's frame, markers in grey. The plot builds its colour legend when
    this map changes, so a series that appears mid-run (a marker, a reward that became a monitor) gets its
    colour and its legend entry; with the same series the map stays the same and the plot only takes the data.

    >>> series_colors(pd.DataFrame([(1, 0.5, "total"), (2, 0, "steered at 2: beta 0→0.1")], columns=COLUMNS))
    {'total': '#4c78a8', 'steered at 2: beta 0→0.1': '#374151'}
    """
    if frame is None:
        return None
    colors: dict[str, str] = {}
    data = markers = 0
    for name in dict.fromkeys(frame["series"]):
        if str(name).startswith(MARKER_PREFIX):
            colors[name] = MARKER_COLORS[markers % len(MARKER_COLORS)]
            markers += 1
        else:
            colors[name] = SERIES_COLORS[data % len(SERIES_COLORS)]
            data += 1
    return colors
