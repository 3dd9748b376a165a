"""What the Train tab shows, computed from run-directory data: chart frames, the progress bar,
health warnings and the group inspector. Pure functions (pandas, no gradio), tested directly."""

from __future__ import annotations

import html
import math

import pandas as pd

from pipeline.advantages import STD_EPS, group_stats
from pipeline.health import health_warnings

# chart name -> (title, list of (series label, metrics key))
CHARTS = {
    "reward_std": ("Reward std (within groups)", [("reward std", "reward_std")]),
    "kl": ("KL to reference", [("kl", "kl")]),
    "loss": ("Loss", [("loss", "loss")]),
    "completion_length": ("Mean completion length (tokens)", [("length", "completion_length")]),
    "entropy": ("Token entropy", [("entropy", "entropy")]),
}
COLUMNS = ["step", "value", "series"]


def _frame(data: list[tuple]) -> pd.DataFrame | None:
    # None (not an empty frame) until there is data: a plot first drawn from an empty frame keeps an
    # empty colour legend and never shows its lines.
    return pd.DataFrame(data, columns=COLUMNS) if data else None


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def reward_frame(rows: list[dict]) -> pd.DataFrame:
    """Total reward and each reward function's mean, long format for a colour-coded line plot."""
    data = []
    for r in rows:
        if _finite(r.get("reward")):
            data.append((r["step"], r["reward"], "total (weighted)"))
        for name, stats in (r.get("rewards") or {}).items():
            if _finite((stats or {}).get("mean")):
                data.append((r["step"], stats["mean"], name))
    return _frame(data)


def metric_frame(rows: list[dict], chart: str) -> pd.DataFrame:
    _, series = CHARTS[chart]
    data = [(r["step"], r[key], label) for r in rows for label, key in series if _finite(r.get(key))]
    return _frame(data)


def compare_frame(runs_rows: dict[str, list[dict]]) -> pd.DataFrame:
    """Total reward of several runs on one chart."""
    data = [(r["step"], r["reward"], name) for name, rows in runs_rows.items() for r in rows if _finite(r.get("reward"))]
    return _frame(data)


def _fmt_seconds(s) -> str:
    if not _finite(s):
        return "-"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


STATE_COLORS = {"running": "#2563eb", "queued": "#6b7280", "new": "#9ca3af", "finished": "#16a34a", "stopped": "#d97706",
                "failed": "#dc2626"}


def progress_html(run_name: str | None, status: dict, rows: list[dict], max_steps: int | None) -> str:
    if not run_name:
        return ("<div class='gs-empty'>No run selected yet. Set up a run on the left and press <b>Start</b>; "
                "its charts, groups and log appear here while it trains.</div>")
    state = status.get("state", "?")
    step = rows[-1]["step"] if rows else 0
    total = max_steps or status.get("max_steps") or 0
    pct = 100 * step / total if total else 0
    last = rows[-1] if rows else {}
    elapsed = last.get("elapsed")
    eta = last.get("eta_seconds") if state == "running" else 0
    color = STATE_COLORS.get(state, "#6b7280")
    detail = "loading the model and the first group..." if state in ("queued", "running") and not rows else ""
    error = (f"<div class='gs-error'><b>Error:</b> {html.escape(str(status.get('error')))}</div>"
             if state == "failed" and status.get("error") else "")
    return (
        f"<div class='gs-progress' data-state='{state}' data-step='{step}'>"
        f"<div class='gs-progress-head'><span class='gs-badge' style='background:{color}'>{state}</span> "
        f"<b>{html.escape(run_name)}</b> &nbsp; step <b class='gs-step'>{step}</b> / {total} &nbsp; "
        f"elapsed {_fmt_seconds(elapsed)} &nbsp; ETA {_fmt_seconds(eta)} {detail}</div>"
        f"<div class='gs-bar'><div style='width:{pct:.1f}%;background:{color}'></div></div>{error}</div>"
    )


def health_html(rows: list[dict]) -> str:
    warnings = health_warnings(rows)
    extra = rows[-1].get("warnings") if rows else None
    if not warnings and not extra:
        return "<div class='gs-ok'>No warning signs so far.</div>" if rows else ""
    parts = [f"<div class='gs-warn'><b>⚠ {html.escape(w.title)}.</b> {html.escape(w.detail)} "
             f"<i>Try: {html.escape(w.fix)}</i></div>" for w in warnings]
    parts += [f"<div class='gs-warn'><b>⚠ Reward problem.</b> {html.escape(m)}</div>" for m in (extra or [])[:3]]
    return "".join(parts)


def _score(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _adv_bar(adv: float, scale: float) -> str:
    width = min(50.0, 50.0 * abs(adv) / scale) if scale else 0
    side = "left:50%" if adv >= 0 else f"left:{50 - width:.1f}%"
    cls = "pos" if adv >= 0 else "neg"
    return f"<div class='gs-advbar'><div class='{cls}' style='{side};width:{width:.1f}%'></div></div>"


def groups_html(record: dict | None) -> str:
    """Each prompt's G completions sorted by advantage, with per-reward scores and the formula's numbers."""
    if not record:
        return ("<div class='gs-empty'>The group inspector fills in after the first step: for each prompt, "
                "its G completions, their rewards, and the advantage GRPO gave each one.</div>")
    out = [f"<div class='gs-groups' data-step='{record['step']}'>"]
    for gi, group in enumerate(record.get("groups", []), 1):
        items = group["completions"]
        totals = [c.get("total") for c in items]
        mean, std = group_stats(totals)
        names = list(items[0]["rewards"]) if items else []
        scale = max([abs(c["advantage"]) for c in items if _finite(c.get("advantage"))] + [1e-9])
        prompt = group["prompt"]
        out.append(
            f"<details class='gs-group' open><summary>Prompt {gi}: {html.escape(prompt[-160:])}</summary>"
            f"<div class='gs-formula'>A = (total − mean) / (std + {STD_EPS:g}) &nbsp; mean = {mean:.3f}, "
            f"std = {std if _finite(std) else 0:.3f}</div><table class='gs-table'><tr><th>advantage</th><th></th>"
            f"<th>total</th>" + "".join(f"<th>{html.escape(n)}</th>" for n in names) + "<th>completion</th></tr>")
        for c in sorted(items, key=lambda c: -(c.get("advantage") or 0)):
            adv = c.get("advantage") or 0.0
            cls = "pos" if adv > 0 else "neg" if adv < 0 else "zero"
            cells = "".join(f"<td>{_score(c['rewards'][n])}</td>" for n in names)
            total = _score(c.get("total"))
            out.append(f"<tr class='gs-{cls}'><td class='gs-adv'>{adv:+.2f}</td><td>{_adv_bar(adv, scale)}</td>"
                       f"<td>{total}</td>{cells}<td class='gs-text'>{html.escape(c['completion'])}</td></tr>")
        out.append("</table></details>")
    out.append("</div>")
    return "".join(out)


def bench_table(per_reward: dict[str, list], totals: list, advantages: list[float]) -> pd.DataFrame:
    """Reward test bench result: one row per candidate completion."""
    data = {"#": list(range(1, len(totals) + 1))}
    for name, vals in per_reward.items():
        data[name] = [None if v is None else round(v, 4) for v in vals]
    data["total"] = [None if t is None else round(t, 4) for t in totals]
    data["advantage"] = [round(a, 4) for a in advantages]
    return pd.DataFrame(data)


def bench_summary(totals: list) -> str:
    vals = [t for t in totals if t is not None]
    if not vals:
        return "No completion could be scored."
    mean, std = group_stats(vals)
    spread = "" if len(vals) > 1 and std > 1e-9 else (
        " All totals are equal, so every advantage is 0: this group would teach the model nothing.")
    return (f"Group of {len(totals)}: mean **{mean:.4f}**, std **{(std if _finite(std) else 0):.4f}** "
            f"(sample std, as TRL). A = (total − mean) / (std + {STD_EPS:g}).{spread}")


