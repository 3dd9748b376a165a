"""A run as one HTML file to keep or send: what it trained, its curves, its held-out answers before and after, a
group of its last step, and its settings. Self-contained (inline SVG charts and CSS, no script, no link out), built
from the run folder's files with the same views the Train tab draws. Pure functions (pandas, no gradio)."""

from __future__ import annotations

import datetime
import html
import math
from pathlib import Path

import pandas as pd
from markdown_it import MarkdownIt

from pipeline.run_folder import run_files, runs
from pipeline.setup import steering
from pipeline.setup.config import ConfigError, RunConfig
from ui import charts, compare_view, probes_view, steer_view, views

ROOT = Path(__file__).resolve().parent.parent

# The page around the app's own styles (assets/studio.css): a readable column, charts two by two.
PAGE_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2937; margin: 0 auto;
       max-width: 1040px; padding: 24px; line-height: 1.45; }
h1 { font-size: 1.6em; margin: 0 0 4px; } h2 { font-size: 1.2em; margin: 28px 0 8px; }
.gs-report-eval table { border-collapse: collapse; }
.gs-report-eval th, .gs-report-eval td { border: 1px solid #d1d5db; padding: 3px 10px; }
.gs-report-where { color: #4b5563; }
.gs-report-charts { display: grid; grid-template-columns: repeat(2, 1fr); gap: 12px; }
.gs-report-charts figure { margin: 0; border: 1px solid #e5e7eb; border-radius: 6px; padding: 6px; }
.gs-report-charts figure.gs-wide { grid-column: span 2; }
.gs-report-charts figcaption { font-weight: 600; font-size: 0.9em; text-align: center; }
.gs-report-settings td, .gs-report-settings th { text-align: left; padding: 2px 12px 2px 0; vertical-align: top; }
.gs-report-settings th { font-weight: 500; color: #4b5563; }
footer { margin-top: 32px; color: #6b7280; font-size: 0.85em; }
"""


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round axis values that cover lo..hi.

    >>> _nice_ticks(0.0, 1.0)
    [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    >>> _nice_ticks(-91.5, 261.0)
    [-100, 0, 100, 200, 300]
    >>> _nice_ticks(3.0, 3.0)
    [2.0, 2.5, 3.0, 3.5, 4.0]
    """
    if hi <= lo:
        lo, hi = lo - 1, hi + 1
    raw = (hi - lo) / count
    size = 10 ** math.floor(math.log10(raw))
    step = next(m * size for m in (1, 2, 2.5, 5, 10) if m * size >= raw)
    first = math.floor(lo / step) * step
    return [round(first + i * step, 10) for i in range(int(math.ceil((hi - first) / step - 1e-9)) + 1)]


def _label(value: float) -> str:
    """An axis label as short as its value allows.

    >>> [_label(v) for v in (2.0, 0.25, 1e-05, 250.0, -0.5)]
    ['2', '0.25', '1e-05', '250', '-0.5']
    """
    return f"{value:.4g}"


def line_chart_svg(frame: pd.DataFrame | None, y_title: str, max_step: int, markers: list[tuple[int, str]] = (),
                   width: int = 480, height: int = 230, y_limits: list[float] | None = None) -> str:
    """A step chart as inline SVG: one coloured line per series of a Train-tab frame (step, value, series), dashed
    grey lines at the steered steps, a legend under it. A series of one point is drawn as a dot.

    >>> frame = pd.DataFrame([(1, 0.5, "total"), (2, 0.75, "total")], columns=charts.COLUMNS)
    >>> svg = line_chart_svg(frame, "reward", 3, [(2, "steered at 2: beta 0→0.1")])
    >>> svg.count("<polyline"), "stroke-dasharray" in svg, "steered at 2" in svg
    (1, True, True)
    >>> "No points" in line_chart_svg(None, "reward", 3)
    True
    """
    if frame is None or frame.empty:
        return f"<svg width='{width}' height='60' role='img'><text x='10' y='30' fill='#6b7280'>No points " \
               f"logged.</text></svg>"
    left, right, top, bottom = 52, 12, 10, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [float(v) for v in frame["value"]]
    lo, hi = y_limits or (min(values), max(values))
    ticks = _nice_ticks(lo, hi)
    lo, hi = min(ticks[0], lo), max(ticks[-1], hi)
    x_hi = max(max_step, int(frame["step"].max()), 1)

    def x(step: float) -> float:
        return left + plot_w * step / x_hi

    def y(value: float) -> float:
        return top + plot_h * (1 - (value - lo) / (hi - lo))

    parts = [f"<svg viewBox='0 0 {width} {height}' width='100%' role='img' "
             f"font-size='12' font-family='sans-serif'>"]
    for tick in ticks:  # horizontal grid and the y labels
        parts.append(f"<line x1='{left}' x2='{width - right}' y1='{y(tick):.1f}' y2='{y(tick):.1f}' "
                     f"stroke='#e5e7eb'/><text x='{left - 6}' y='{y(tick) + 4:.1f}' text-anchor='end' "
                     f"fill='#4b5563'>{_label(tick)}</text>")
    every = max(1, math.ceil(x_hi / 10))
    for step in range(0, x_hi + 1, every):  # whole steps only
        parts.append(f"<text x='{x(step):.1f}' y='{height - bottom + 14}' text-anchor='middle' "
                     f"fill='#4b5563'>{step}</text>")
    parts.append(f"<text x='{left + plot_w / 2:.1f}' y='{height - 4}' text-anchor='middle' fill='#4b5563'>step"
                 f"</text><text transform='translate(12 {top + plot_h / 2:.1f}) rotate(-90)' text-anchor='middle' "
                 f"fill='#4b5563'>{html.escape(y_title)}</text>")
    for step, label in markers:
        parts.append(f"<line x1='{x(step):.1f}' x2='{x(step):.1f}' y1='{top}' y2='{top + plot_h}' "
                     f"stroke='{charts.MARKER_COLORS[0]}' stroke-dasharray='4 3'><title>{html.escape(label)}"
                     f"</title></line>")
    legend = []
    for i, (name, rows) in enumerate(frame.groupby("series", sort=False)):
        color = charts.SERIES_COLORS[i % len(charts.SERIES_COLORS)]
        points = [(x(s), y(float(v))) for s, v in zip(rows["step"], rows["value"])]
        if len(points) == 1:
            parts.append(f"<circle cx='{points[0][0]:.1f}' cy='{points[0][1]:.1f}' r='3' fill='{color}'/>")
        else:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            parts.append(f"<polyline points='{path}' fill='none' stroke='{color}' stroke-width='2'>"
                         f"<title>{html.escape(str(name))}</title></polyline>")
        legend.append(f"<span style='color:{color}'>■</span> {html.escape(str(name))}")
    legend += [f"<span style='color:{charts.MARKER_COLORS[0]}'>┆</span> {html.escape(label)}" for _, label in markers]
    parts.append("</svg>")
    return "".join(parts) + f"<div style='font-size:0.8em'>{' &nbsp; '.join(legend)}</div>"


def _figure(title: str, svg: str, wide: bool = False) -> str:
    return f"<figure class='{'gs-wide' if wide else ''}'><figcaption>{html.escape(title)}</figcaption>{svg}</figure>"


def charts_html(rows: list[dict], evals: list[dict], changes: list[dict], max_steps: int) -> str:
    """The Train tab's charts, drawn once: train reward (total and per function), held-out reward, then the
    step metrics the run logged, each with its steering markers."""
    markers = charts.change_markers(changes)
    last = max([max_steps, *[r["step"] for r in rows], *[e["step"] for e in evals]] or [1])
    wide = {"width": 960, "height": 260}
    figures = [_figure(charts.REWARD_TITLE, line_chart_svg(charts.reward_frame(rows), "reward", last, markers,
                                                           **wide), wide=True)]
    if evals:
        figures.append(_figure(charts.PROBE_TITLE, line_chart_svg(probes_view.probe_frame(evals), "reward", last,
                                                                  markers, **wide), wide=True))
    for key, (title, _) in charts.CHARTS.items():
        frame = charts.metric_frame(rows, key)
        if frame is not None and not frame.empty:
            svg = line_chart_svg(frame, charts.CHART_Y_TITLES[key], last, markers,
                                 y_limits=charts.CHART_Y_LIMITS.get(key))
            figures.append(_figure(title.replace("; see below", ""), svg))  # the app's note on loss is not here
    return f"<div class='gs-report-charts'>{''.join(figures)}</div>"


# Shown whatever their value: what a reader asks first about a GRPO run.
KEY_SETTINGS = ("model", "dataset.source", "num_generations", "batch_size", "max_steps", "learning_rate",
                "max_completion_length", "temperature", "beta", "seed")


def full_config(config: dict) -> dict:
    """The run's settings with the defaults filled in (a config.json may be a short diff of them); as written when
    they do not read as a config (a run from another version keeps its report)."""
    try:
        return RunConfig.from_dict(config).to_dict()
    except (ConfigError, TypeError, ValueError):
        return config


def settings_html(config: dict) -> str:
    """The key settings, then every other one that differs from its default, in a two-column table.

    >>> table = settings_html({"model": "m", "learning_rate": 0.0003, "lora_r": 64})
    >>> "<th>model</th><td>m</td>" in table, "lora_r" in table, "Every other setting" in table
    (True, True, True)
    """
    cells, default = compare_view.flat_settings(config), compare_view.flat_settings(RunConfig().to_dict())
    shown = {key: cells[key] for key in KEY_SETTINGS if key in cells}
    shown.update({key: cell for key, cell in cells.items()
                  if key not in shown and (key.startswith("reward: ") or default.get(key) != cell)})
    return ("<table class='gs-report-settings'>" + "".join(
        f"<tr><th>{html.escape(key)}</th><td>{html.escape(value)}</td></tr>" for key, value in shown.items())
        + "</table><p>Every other setting is at its default (<code>pipeline/setup/config.py</code>).</p>")


def evaluation_html(run_dir: Path) -> str:
    """The run's last *Evaluate base vs tuned* (eval.json), worded as the Runs panel words it, with its note when
    the run trained after it; empty when there is none, or it can't be read. Markdown rendered with raw HTML off,
    so nothing in it becomes markup."""
    result = runs.read_json(run_dir / run_files.EVAL_RESULT)
    if not isinstance(result, dict):
        return ""
    try:
        text = views.eval_result_markdown(run_dir.name, result)
    except (KeyError, TypeError, ValueError):
        return ""
    if runs.trained_since_evaluation(run_dir):
        text += "\n\n" + views.EVAL_STALE
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    return f"<h2>Evaluation: base vs tuned</h2><div class='gs-report-eval'>{body}</div>"


def report_html(run_dir: str | Path, now: datetime.datetime | None = None) -> str:
    """The whole report of the run in `run_dir`, as it stands on disk now (a running run's so far)."""
    run_dir = Path(run_dir)
    snap = runs.snapshot(run_dir)
    status, rows, evals, groups = snap.status or {}, snap.metrics, snap.evals, snap.groups
    readable = snap.written_config is not None
    config = full_config(snap.config) if readable else {}
    changes = steering.applied_changes(run_dir)
    state = status.get("state")
    max_steps = next((v for v in (config.get("max_steps"), status.get("max_steps")) if isinstance(v, int)), 0)
    name = run_dir.name

    started, ended = status.get("started_at"), status.get("ended_at")
    took = f" · ran {views.fmt_seconds(ended - started)}" if isinstance(started, (int, float)) and isinstance(
        ended, (int, float)) and ended >= started else ""
    sections = [f"<h1>{html.escape(name)}</h1>",
                f"<div class='gs-report-where'>{html.escape(str(config.get('model', '')))} · prompts: "
                f"{html.escape(str((config.get('dataset') or {}).get('source', '')))}{took}</div>",
                views.progress_html(name, status, rows, max_steps),
                probes_view.outcome_html(evals, state, next_steps=False),
                views.health_html(rows, evals, config)]
    sections += ["<h2>Curves</h2>", charts_html(rows, evals, changes, max_steps)]
    if changes:
        items = "".join(f"<li>step {c.get('step')}: {html.escape(charts.change_label(c))}</li>" for c in changes)
        sections.append(f"<h2>Steered while it trained</h2><ul>{items}</ul>")
    sections.append(evaluation_html(run_dir))
    if len(evals) > 1:
        sections += ["<h2>Held-out answers: the base model, then the tuned one</h2>",
                     probes_view.probes_html([evals[0], evals[-1]], pick=evals[-1]["step"], cfg=config,
                                             state=state)]
    if groups:
        sections += [f"<h2>A group of step {groups[-1]['step']}: G completions, their rewards and advantages</h2>",
                     views.groups_html(groups[-1])]
    sections += ["<h2>Settings</h2>", settings_html(config) if readable else
                 f"<p>The run's {run_files.CONFIG} could not be read: its settings are not known.</p>"]
    stamp = (now or datetime.datetime.now()).strftime("%Y-%m-%d %H:%M")
    sections.append(f"<footer>Written by GRPO Studio on {stamp} from the files in the run's folder. The training "
                    "completions, every step's numbers and the held-out answers of every probe are in that "
                    "folder.</footer>")
    css = (ROOT / "assets" / "studio.css").read_text(encoding="utf-8") + PAGE_CSS
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(name)} · GRPO Studio "
            f"report</title><style>{css}</style></head><body>{''.join(sections)}</body></html>")


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """The report written to `out`, by default to the exports folder as `<run>-report.html` (an export of the run:
    it goes with the run when the run is deleted with its exports)."""
    run_dir = Path(run_dir)
    out = Path(out) if out else runs.exports_dir() / f"{run_dir.name}-report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(report_html(run_dir), encoding="utf-8")
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m ui.report --run-dir DIR [--out FILE]`: a run's report from a terminal, as the Runs panel makes it."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ui.report", description="Write a run's report: one HTML page.")
    ap.add_argument("--run-dir", required=True, help="The run folder.")
    ap.add_argument("--out", help="Where to write it (default: the exports folder, as <run>-report.html).")
    args = ap.parse_args(argv)
    run_dir = Path(args.run_dir)
    if runs.read_json(run_dir / run_files.CONFIG) is None and not (run_dir / run_files.METRICS).exists():
        print(f"{run_dir} is not a run folder: it has no {run_files.CONFIG} or {run_files.METRICS}.")
        return 2
    print(f"Wrote {write_report(run_dir, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
