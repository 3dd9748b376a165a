"""What the Train tab shows besides its charts and probes, computed from run-directory data: the progress bar,
health warnings, the group inspector, the reward bench's table, the evaluation and the learnability scan.
Pure functions (pandas, no gradio), tested directly. Charts are in ui/charts.py, probes in ui/probes_view.py."""

from __future__ import annotations

import html
import time

import pandas as pd

from pipeline.rewards.advantages import STD_EPS, group_stats
from pipeline.run_folder.jobstate import ACTIVE_STATES
from pipeline.training.health import health_warnings
from pipeline.training.paired_gain import gain_sentence, paired_gain
from ui.charts import _finite, monitor_label
from ui.probes_view import fmt_score, task_key
from ui.prompt_names import prompt_tail, short_prompt
from ui import token_views
from ui.clock import clock_html, clock_state, ended_seconds, fmt_seconds
from ui.page_title import NOTIFY_TIP


STATE_COLORS = {"running": "#2563eb", "queued": "#6b7280", "new": "#9ca3af", "finished": "#16a34a",
                "stopped": "#d97706", "failed": "#dc2626", "damaged": "#7c2d12"}


def gone_html(run_name: str) -> str:
    return (f"<div class='gs-empty' data-state='gone'>Run <b>{html.escape(run_name)}</b> is no longer on disk: its "
            "folder was deleted. Pick another run in <b>Runs</b>, or start a new one.</div>")


def refused_run_html(problem: str) -> str:
    """The live view's header for a run name that can't name a run (runs.run_name_problem)."""
    return f"<div class='gs-empty' data-state='refused'>{html.escape(problem)}</div>"


def generation_label(status: dict) -> str | None:
    """How the run samples its completions, for the header: said when static decoding is on, and when it was
    wanted but can't run (with the reason); nothing for eager sampling that was asked for (the CPU default).

    >>> generation_label({"generation": "static"})
    'static decoding'
    >>> generation_label({"generation": "eager", "generation_note": "the fast engine is off"})
    'eager decoding: the fast engine is off'
    >>> generation_label({"generation": "eager"}), generation_label({})
    (None, None)
    """
    if status.get("generation") == "static":
        return "static decoding"
    if status.get("generation_note"):
        return f"eager decoding: {status['generation_note']}"
    return None


def progress_html(run_name: str | None, status: dict, rows: list[dict], max_steps: int | None,
                  problems: list[str] | None = None, now: float | None = None) -> str:
    """The run header: state, device, step and time (a clock that moves between steps while it runs, ui/clock.py),
    what the trainer does outside a step, and a bar. `now` is the app's time as it draws (the test's own in tests)."""
    if not run_name:
        return ("<div class='gs-empty'>No run selected yet. Set up a run on the left and press <b>Start</b>; "
                "its charts, groups and log appear here while it trains.</div>")
    state = status.get("state", "?")
    step = rows[-1]["step"] if rows else 0
    total = max_steps or status.get("max_steps") or 0
    pct = 100 * step / total if total else 0
    # While it runs, a clock that moves; once it has ended, the time it took, as the runs table gives it.
    clock = clock_state(status, rows, total, time.time() if now is None else now)
    timing = clock_html(clock, elapsed=ended_seconds(status, rows))
    color = STATE_COLORS.get(state, "#6b7280")
    detail = phase_text(status, has_steps=bool(rows))
    error = (f"<div class='gs-error'><b>Error:</b> {html.escape(str(status.get('error')))}</div>"
             if state in ("failed", "damaged") and status.get("error") else "")
    if problems:
        error += (f"<div class='gs-error'><b>Damaged run files:</b> {html.escape(' '.join(problems))} "
                  "What could be read is shown.</div>")
    ranks = int(status.get("world_size") or 1)
    where = " · ".join(html.escape(str(v)) for v in (
        status.get("device"), status.get("precision"), f"{ranks} processes" if ranks > 1 else None,
        generation_label(status)) if v)
    where = f" <span class='gs-where'>{where}</span>" if where else ""
    if status.get("device_warning"):  # e.g. a GPU box whose torch is a CPU build
        error += (f"<div class='gs-warn gs-device-warning'><b>⚠ On the CPU.</b> "
                  f"{html.escape(status['device_warning'])}</div>")
    # While the run is under way, *Notify me*: a browser notification when it ends (ui/page_title.py keeps its label).
    bell = (f"<button type='button' class='gs-notify' title='{html.escape(NOTIFY_TIP)}'>Notify me</button>"
            if state in ACTIVE_STATES else "")
    return (
        f"<div class='gs-progress' data-state='{state}' data-step='{step}' data-total='{total}' "
        f"data-run='{html.escape(run_name)}'>"
        f"<div class='gs-progress-head'><span class='gs-badge' style='background:{color}'>{state}</span> "
        f"<b>{html.escape(run_name)}</b>{where} &nbsp; step <b class='gs-step'>{step}</b> / {total} &nbsp; "
        f"{timing}{detail}{bell}</div>"
        f"<div class='gs-bar'><div style='width:{pct:.1f}%;background:{color}'></div></div>{error}</div>"
    )


def phase_text(status: dict, has_steps: bool) -> str:
    """What the trainer is doing outside a step (its `phase`: loading, a probe, the merge), for the run header
    while the run runs.

    >>> phase_text({"state": "running", "phase": "loading the model"}, has_steps=False)
    "<span class='gs-phase'>· loading the model...</span>"
    >>> phase_text({"state": "queued"}, has_steps=False)
    "<span class='gs-phase'>· starting the trainer...</span>"
    >>> phase_text({"state": "finished", "phase": "loading the model"}, has_steps=True)
    ''
    """
    state = status.get("state")
    if state not in ACTIVE_STATES:
        return ""
    phase = status.get("phase")
    if not phase and not has_steps:  # before the trainer says (a run from an older version says nothing)
        phase = "starting the trainer" if state == "queued" else "loading the model and the first group"
    return f"<span class='gs-phase'>· {html.escape(phase)}...</span>" if phase else ""


def health_html(rows: list[dict], evals: list[dict] | None = None, config: dict | None = None) -> str:
    warnings = health_warnings(rows, evals, config)
    extra = rows[-1].get("warnings") if rows else None
    if not warnings and not extra:
        return "<div class='gs-ok'>No warning signs so far.</div>" if rows else ""
    parts = [f"<div class='gs-warn'><b>⚠ {html.escape(w.title)}.</b> {html.escape(w.detail)} "
             f"<i>Try: {html.escape(w.fix)}</i></div>" if w.level == "warn" else
             f"<div class='gs-note'><b>ℹ {html.escape(w.title)}.</b> {html.escape(w.detail)} "
             f"<i>{html.escape(w.fix)}</i></div>" for w in warnings]
    parts += [f"<div class='gs-warn'><b>⚠ Reward problem.</b> {html.escape(m)}</div>" for m in (extra or [])[:3]]
    return "".join(parts)


def _adv_bar(adv: float, scale: float) -> str:
    width = min(50.0, 50.0 * abs(adv) / scale) if scale else 0
    side = "left:50%" if adv >= 0 else f"left:{50 - width:.1f}%"
    cls = "pos" if adv >= 0 else "neg"
    return f"<div class='gs-advbar'><div class='{cls}' style='{side};width:{width:.1f}%'></div></div>"


def advantage_formula(record: dict, mean: float, std: float) -> str:
    """The advantage formula of a group, with its numbers, for the run's scale_rewards (records written
    before it was recorded used the group's std).

    >>> advantage_formula({"scale_rewards": "batch", "batch_std": 2.5}, 1.0, 0.5)
    'A = (total − group mean) / (batch std + 0.0001) &nbsp; group mean = 1.000, batch std = 2.500'
    >>> advantage_formula({"scale_rewards": "none"}, 1.0, 0.5)
    'A = total − group mean &nbsp; group mean = 1.000 (not divided by a std)'
    """
    mode = record.get("scale_rewards") or "group"
    if mode == "batch":
        batch_std = record.get("batch_std")
        return (f"A = (total − group mean) / (batch std + {STD_EPS:g}) &nbsp; group mean = {mean:.3f}, "
                f"batch std = {batch_std if _finite(batch_std) else 0:.3f}")
    if mode == "none":
        return f"A = total − group mean &nbsp; group mean = {mean:.3f} (not divided by a std)"
    return f"A = (total − mean) / (std + {STD_EPS:g}) &nbsp; mean = {mean:.3f}, std = {std if _finite(std) else 0:.3f}"


def groups_html(record: dict | None, tokens: dict | None = None, mode: str = token_views.TEXT) -> str:
    """Each prompt's G completions sorted by advantage, with per-reward scores and the formula's numbers; in a
    shaded mode (ui/token_views.py) each completion token by token, from the step's token record `tokens`."""
    if not record:
        return ("<div class='gs-empty'>The group inspector fills in after the first step: for each prompt, "
                "its G completions, their rewards, and the advantage GRPO gave each one.</div>")
    out = [f"<div class='gs-groups' data-step='{record['step']}'>"]
    token_groups = (tokens or {}).get("groups") if mode in token_views.SCALES else None
    if mode in token_views.SCALES:
        out.append(token_views.legend_html(mode) if token_groups else token_views.missing_note(mode, record["step"]))
    for gi, group in enumerate(record.get("groups", []), 1):
        items = group["completions"]
        entries = token_groups[gi - 1] if token_groups and gi - 1 < len(token_groups) else []
        items = [{**c, "tokens": entries[i] if i < len(entries) else None} for i, c in enumerate(items)]
        totals = [c.get("total") for c in items]
        mean, std = group_stats(totals)
        names = list(items[0]["rewards"]) if items else []
        weights = record.get("weights") or {}
        scale = max([abs(c["advantage"]) for c in items if _finite(c.get("advantage"))] + [1e-9])
        prompt = group["prompt"]
        out.append(
            f"<details class='gs-group' open><summary>Prompt {gi}: {html.escape(prompt_tail(prompt))}</summary>"
            f"<div class='gs-formula'>{advantage_formula(record, mean, std)}</div>"
            f"<table class='gs-table'><tr><th>advantage</th><th></th>"
            f"<th>total</th>" + "".join(f"<th>{_breakable(monitor_label(n, weights))}</th>" for n in names)
            + "<th>completion</th></tr>")
        for c in sorted(items, key=lambda c: -(c.get("advantage") or 0)):
            adv = c.get("advantage") or 0.0
            cls = "pos" if adv > 0 else "neg" if adv < 0 else "zero"
            cells = "".join(f"<td>{fmt_score(c['rewards'][n])}</td>" for n in names)
            total = fmt_score(c.get("total"))
            out.append(f"<tr class='gs-{cls}'><td class='gs-adv'>{adv:+.2f}</td><td>{_adv_bar(adv, scale)}</td>"
                       f"<td>{total}</td>{cells}<td class='gs-text'>{_completion_cell(c, mode)}</td></tr>")
        out.append("</table></details>")
    out.append("</div>")
    return "".join(out)


def _breakable(name: str) -> str:
    """A reward name as escaped HTML that may wrap after each underscore, so its column stays narrow and the
    completion column keeps the room."""
    return html.escape(name).replace("_", "_<wbr>")


def _completion_cell(item: dict, mode: str) -> str:
    """A completion as escaped text, or token by token when the mode is shaded and its record is there."""
    if mode in token_views.SCALES and isinstance(item.get("tokens"), dict):
        return f"<span class='gs-tokens'>{token_views.token_spans(item['tokens'], mode)}</span>"
    return html.escape(item["completion"])


def bench_table(per_reward: dict[str, list], totals: list, advantages: list[float],
                in_run: list | None = None) -> pd.DataFrame:
    """Reward test bench result: one row per candidate completion, its advantage and total first (what GRPO does
    with it, as the group inspector shows it), then each reward's score, so the table stays readable without
    scrolling sideways however many rewards are ticked. `in_run`: the advantages a run logged for these
    completions, beside the bench's.

    >>> list(bench_table({"length_target": [1.0, 0.0]}, [1.0, 0.0], [0.7071, -0.7071]).columns)
    ['#', 'advantage', 'total', 'length_target']
    >>> list(bench_table({}, [1.0, 0.0], [0.7, -0.7], in_run=[0.5, None]).columns)
    ['#', 'advantage', 'advantage in the run', 'total']
    """
    data = {"#": list(range(1, len(totals) + 1)), "advantage": [round(a, 4) for a in advantages]}
    if in_run is not None and len(in_run) == len(totals):
        data["advantage in the run"] = [round(a, 4) if isinstance(a, (int, float)) else None for a in in_run]
    data["total"] = [None if t is None else round(t, 4) for t in totals]
    for name, vals in per_reward.items():
        data[name] = [None if v is None else round(v, 4) for v in vals]
    return pd.DataFrame(data)


def bench_summary(totals: list, scale: str = "group", batch_std: float | None = None, batch_size: int = 0,
                  groups: int = 1) -> str:
    """The group's mean and std, and the advantage formula with the divisor in use (TRL's scale_rewards).

    >>> bench_summary([1.0, 0.0], "none")
    'Group of 2: mean **0.5000**, std **0.7071** (sample std, as TRL). A = total − mean (not divided).'
    >>> print(bench_summary([1.0, 0.0], "batch", batch_std=2.0, batch_size=8, groups=4))
    Group of 2: mean **0.5000**, std **0.7071** (sample std, as TRL). A = (total − mean) / (batch std + 0.0001), \
the batch std **2.0000** being that of all 8 totals of the step's 4 groups, scored with these rewards.
    """
    vals = [t for t in totals if t is not None]
    if not vals:
        return "No completion could be scored."
    mean, std = group_stats(vals)
    spread = "" if len(vals) > 1 and std > 1e-9 else (
        " All totals are equal, so every advantage is 0: this group would teach the model nothing.")
    shown_std = std if _finite(std) else 0
    head = f"Group of {len(totals)}: mean **{mean:.4f}**, std **{shown_std:.4f}** (sample std, as TRL)."
    if scale == "none":
        formula = "A = total − mean (not divided)."
    elif scale == "batch" and groups > 1:
        formula = (f"A = (total − mean) / (batch std + {STD_EPS:g}), the batch std **{batch_std:.4f}** being that "
                   f"of all {batch_size} totals of the step's {groups} groups, scored with these rewards.")
    elif scale == "batch":
        formula = (f"A = (total − mean) / (batch std + {STD_EPS:g}); the batch is this group alone (load a group "
                   "from a run to bring its step's other groups), so its std is the group's.")
    else:
        formula = f"A = (total − mean) / (std + {STD_EPS:g})."
    return f"{head} {formula}{spread}"


# ---- evaluation (base vs tuned) ---------------------------------------------------------------------

EVAL_UNFINISHED = ("queued", "running", "failed", "stopped")  # states with no eval.json to show
EVAL_STALE = ("⚠️ The run has trained since this evaluation: these numbers are for its model before. Press "
              "**Evaluate base vs tuned** again for the model it has now.")


def eval_result_markdown(name: str, result: dict) -> str:
    """eval.json as a table, a row for the mean total and one for each reward (base, tuned, change: as the run
    header's before-and-after table, and narrow however many rewards a run scores), then the delta and the gap
    closed."""
    base, tuned = result["base"], result["tuned"]
    lines = [f"**{name}** on {result['n']} held-out prompts (greedy):", "", "| | base | tuned | change |",
             "|---|---|---|---|"]
    rows = [("mean total", base["reward_mean"], tuned["reward_mean"]),
            *((reward, value, tuned["rewards"].get(reward)) for reward, value in base["rewards"].items())]
    for label, before, after in rows:
        cells = ["-" if v is None else f"{v:.3f}" for v in (before, after)]
        change = "-" if before is None or after is None else f"{after - before:+.3f}"
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {change} |")
    lines.append(f"\nDelta (tuned - base): **{result['delta']:+.3f}**")
    if result.get("gap_closed") is not None:
        lines.append(f" · gap closed: **{result['gap_closed']:.1%}**")
    # Written by the evaluator; worked out here for an eval.json from before it was.
    gain = result.get("paired") or paired_gain(result["base"].get("totals") or [], result["tuned"].get("totals") or [])
    if gain:
        lines += ["", gain_sentence(gain, bold="**")]
    lines += task_result_lines(result)
    return "\n".join(lines)


def task_result_lines(result: dict) -> list[str]:
    """eval.json's task metric (not a reward), base -> tuned, with format compliance and, for movie
    questions, the answers with invented details and how often the right film was retrieved at all (the most
    accuracy can reach).

    >>> task = {"kind": "movie", "accuracy": 0.2, "format_compliance": 0.5, "retrieval_recall": 0.98,
    ...         "invented_details": 0.25}
    >>> tuned = task | {"accuracy": 0.5, "invented_details": 0.125}
    >>> print("\\n".join(task_result_lines({"base": {"task": task}, "tuned": {"task": tuned}})))
    <BLANKLINE>
    Task metric (not a reward): accuracy **20.0% -> 50.0%** · format compliance 50% -> 50% · answers with details the films given lack 25% -> 12% · the right film was among the retrieved plots for 98% of the questions (accuracy can't pass this)
    """
    base, tuned = result["base"].get("task") or {}, result["tuned"].get("task") or {}
    key = task_key(base)
    if not key or not _finite(base.get(key)) or not _finite(tuned.get(key)):
        return []
    value = (lambda v: f"{v:.1%}") if key == "accuracy" else (lambda v: f"{v:.3f}")
    parts = [f"Task metric (not a reward): {key} **{value(base[key])} -> {value(tuned[key])}**"]
    if _finite(base.get("format_compliance")) and _finite(tuned.get("format_compliance")):
        parts.append(f"format compliance {base['format_compliance']:.0%} -> {tuned['format_compliance']:.0%}")
    if _finite(base.get("invented_details")) and _finite(tuned.get("invented_details")):
        parts.append(f"answers with details the films given lack {base['invented_details']:.0%} -> "
                     f"{tuned['invented_details']:.0%}")
    if _finite(base.get("retrieval_recall")):
        parts.append(f"the right film was among the retrieved plots for {base['retrieval_recall']:.0%} of the "
                     "questions (accuracy can't pass this)")
    return ["", " · ".join(parts)]


def eval_markdown(name: str, status: dict | None, result: dict | Exception | None) -> str:
    """The Runs panel's evaluation line: its state from eval_status.json while it runs or when it ended
    early, else eval.json's table (`result`; the exception when eval.json could not be read).

    >>> eval_markdown("run-1", {"state": "running", "phase": "tuned", "done": 3, "total": 8}, None)
    '⏳ Evaluating **run-1**: tuned · 3/8 answers'
    """
    label = f"**{name}**"
    state = (status or {}).get("state")
    if state == "queued":
        return f"⏳ Evaluation of {label}: starting..."
    if state == "running":
        done, total = status.get("done") or 0, status.get("total")
        eta = status.get("eta_s")
        count = f" · {done}/{total} answers" if total else ""
        eta_text = f" · about {fmt_seconds(eta)} left" if eta is not None else ""
        return f"⏳ Evaluating {label}: {status.get('phase') or 'starting'}{count}{eta_text}"
    if state == "failed":
        return f"❌ Evaluation of {label} failed: {status.get('error') or 'see eval.log in the run folder'}"
    if state == "stopped":
        done = f"{status.get('done') or 0}/{status.get('total') or '?'}"
        return f"⏹ Evaluation of {label} was stopped ({done} answers)."
    try:
        if isinstance(result, Exception):
            raise result
        return eval_result_markdown(name, result)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"❌ {label}'s eval.json can't be read ({exc}): press Evaluate to run it again."


def push_markdown(name: str, status: dict | None) -> str | None:
    """A push job's state in words, from push_status.json; None when the run was never pushed.

    >>> push_markdown("run-1", {"state": "done", "url": "https://huggingface.co/me/m"})
    '✅ **run-1** pushed to https://huggingface.co/me/m'
    """
    state = (status or {}).get("state")
    label = f"**{name}**"
    if state is None:
        return None
    if state in ACTIVE_STATES:
        return f"⏫ Pushing {label} to `{status.get('repo') or '...'}`..."
    if state == "done":
        return f"✅ {label} pushed to {status.get('url')}"
    if state == "stopped":
        return f"⏹ The push of {label} was stopped."
    return f"⚠️ {status.get('error') or 'Push failed: see push.log in the run folder.'}"


# ---- learnability scan: which prompts carry signal (pipeline/training/learnability.py) -------------------

SCAN_REASONS = {"signal": "signal", "all_max": "all full marks", "all_zero": "none earned {rewards}",
                "constant": "all the same score", "unscored": "not scored"}


def scan_empty_html() -> str:
    return ("<div class='gs-empty' data-state='no-scan'>The learnability scan samples G completions for the first few "
            "training prompts with these settings, scores them with the ticked rewards, and shows how far apart "
            "each prompt's scores are. A prompt whose completions all score the same teaches GRPO nothing; the "
            "scan counts them and says what to change. Pick how many prompts, then press "
            "<b>Learnability scan</b>.</div>")


def _scan_reason(p) -> str:
    return SCAN_REASONS.get(p.kind, p.kind).format(rewards=", ".join(p.flat_rewards) or "a reward")


def scan_chart_svg(report, width: int = 520, row: int = 20) -> str:
    """The spread of rewards per prompt: one row per prompt, its G totals as dots on one shared axis, joined by
    a bar from the lowest to the highest. Green rows carry signal; grey rows (a single dot) don't."""
    values = [v for p in report.prompts for v in p.scored]
    if not values:
        return "<div class='gs-empty'>No completion could be scored, so there is no spread to draw.</div>"
    low, high = min(values), max(values)
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    left, right, top = 40, 16, 8
    span = width - left - right

    def x(v: float) -> float:
        return left + (v - low) / (high - low) * span

    height = top + row * len(report.prompts) + 24
    # Scales down to the column's width (the viewBox keeps the proportions), never up past `width`.
    parts = [f"<svg class='gs-scan-chart' role='img' aria-label='Reward spread per prompt' width='100%' "
             f"style='max-width: {width}px' viewBox='0 0 {width} {height}' xmlns='http://www.w3.org/2000/svg'>"]
    for i, p in enumerate(report.prompts):
        y = top + row * i + row / 2
        colour = "#16a34a" if p.signal else "#9ca3af"
        tip = html.escape(f"Prompt {i + 1}: {_scan_reason(p)}; min {fmt_score(p.low)}, max {fmt_score(p.high)}, "
                          f"std {fmt_score(p.std)} — {short_prompt(p.prompt, 120)}")
        parts.append(f"<g class='gs-scan-row' data-signal='{str(p.signal).lower()}'><title>{tip}</title>"
                     f"<text x='{left - 6}' y='{y + 4:.1f}' text-anchor='end' font-size='11' fill='#374151'>"
                     f"P{i + 1}</text>"
                     f"<line x1='{left}' x2='{width - right}' y1='{y:.1f}' y2='{y:.1f}' stroke='#f3f4f6'/>")
        if p.scored:
            parts.append(f"<line x1='{x(p.low):.1f}' x2='{x(p.high):.1f}' y1='{y:.1f}' y2='{y:.1f}' "
                         f"stroke='{colour}' stroke-width='6' stroke-linecap='round' opacity='0.35'/>")
            parts += [f"<circle cx='{x(v):.1f}' cy='{y:.1f}' r='4' fill='{colour}'/>" for v in p.scored]
    axis = top + row * len(report.prompts) + 4
    parts.append(f"<line x1='{left}' x2='{width - right}' y1='{axis}' y2='{axis}' stroke='#9ca3af'/>")
    for v, anchor in ((low, "start"), ((low + high) / 2, "middle"), (high, "end")):
        parts.append(f"<text x='{x(v):.1f}' y='{axis + 14}' text-anchor='{anchor}' font-size='11' "
                     f"fill='#4b5563'>{v:.3g}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _flat_detail(zero: int, best: int) -> str:
    parts = [f"{zero} with none earning it" if zero else "", f"{best} all at full marks" if best else ""]
    parts = [p for p in parts if p]
    return f" ({', '.join(parts)})" if parts else ""


def scan_html(report) -> str:
    """The scan's result: the verdict and no-signal share, the spread chart, the fixes to try, each prompt's
    spread (std, min, max) and the prompts with no signal in full."""
    total, flat = len(report.prompts), report.no_signal
    if not total:
        return scan_empty_html()
    took = f" in {report.seconds:.0f} s" if report.seconds is not None else ""
    head_class = "gs-warn" if report.mostly_flat else "gs-scan-ok"
    out = [f"<div class='gs-scan' data-no-signal='{len(flat)}' data-prompts='{total}'>",
           f"<div class='{head_class} gs-scan-verdict'><b>{html.escape(report.verdict)}</b><br>"
           f"No signal: <b class='gs-scan-share'>{len(flat)} of {total}</b> prompts "
           f"({report.no_signal_share:.0%}), G = {report.group_size}, scanned{took}.</div>"]
    if report.advice:
        out.append("<div class='gs-scan-advice'><b>Try:</b><ul>"
                   + "".join(f"<li>{html.escape(a)}</li>" for a in report.advice) + "</ul></div>")
    if report.flat_by_reward:
        out.append("<div class='gs-scan-legend gs-scan-by-reward'>Prompts on which each trained reward scored all G "
                   "completions the same: " + ", ".join(
                       f"<b>{html.escape(name)}</b> {n} of {total}" + _flat_detail(zero, best)
                       for name, (n, zero, best) in report.flat_by_reward.items()) + ".</div>")
    if flat and len(flat) < total:
        out.append(f"<div class='gs-scan-keep'>To train only on the {total - len(flat)} prompt(s) with signal, tick "
                   "<i>Train only on prompts with signal</i> under All settings; scan more prompts to keep more.</div>")
    out.append("<div class='gs-scan-legend'>Reward spread per prompt: each dot is one completion's total "
               "(green: the scores differ, so the prompt teaches; grey: all equal, so it teaches nothing). "
               "Hover a row for its prompt.</div>")
    out.append(scan_chart_svg(report))
    out.append("<table class='gs-table gs-scan-table'><tr><th>#</th><th>std</th><th>min</th><th>max</th>"
               "<th>signal</th><th>prompt</th></tr>")
    for i, p in enumerate(report.prompts, 1):
        out.append(f"<tr class='{'gs-pos' if p.signal else 'gs-neg'}'><td>P{i}</td><td>{fmt_score(p.std)}</td>"
                   f"<td>{fmt_score(p.low)}</td><td>{fmt_score(p.high)}</td><td>{html.escape(_scan_reason(p))}</td>"
                   f"<td class='gs-text'>{html.escape(short_prompt(p.prompt, 100))}</td></tr>")
    out.append("</table>")
    if flat:
        out.append(f"<details class='gs-scan-flat'><summary>The {len(flat)} prompt(s) with no signal</summary><ol>")
        for p in flat:
            sample = html.escape(p.completions[0]) if p.completions else ""
            out.append(f"<li><div class='gs-text'>{html.escape(p.prompt)}</div><div class='gs-same'>"
                       f"{html.escape(_scan_reason(p))}; one completion: {sample}</div></li>")
        out.append("</ol></details>")
    out.append("</div>")
    return "".join(out)
