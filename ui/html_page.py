"""The pieces of the app's self-contained HTML pages (a run's report, a comparison of runs): the page around the
app's own styles, step charts as inline SVG, and the file written whole or not at all. Pure (pandas, no gradio)."""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from ui import charts

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
                   width: int = 480, height: int = 230, y_limits: list[float] | None = None,
                   colors: dict[str, str] | None = None) -> str:
    """A step chart as inline SVG: one coloured line per series of a Train-tab frame (step, value, series), dashed
    grey lines at the steered steps, a legend under it. A series of one point is drawn as a dot. `colors`: a colour
    per series name, for charts that must agree (else the palette in the order the series come).

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
        color = (colors or {}).get(str(name)) or charts.SERIES_COLORS[i % len(charts.SERIES_COLORS)]
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


def page(title: str, sections: list[str]) -> str:
    """A whole page: `sections` (HTML) under `title`, with the app's styles inline and nothing to load or run."""
    css = (ROOT / "assets" / "studio.css").read_text(encoding="utf-8") + PAGE_CSS
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{css}</style></head><body>{''.join(sections)}</body></html>")


def write(text: str, out: str | Path) -> Path:
    """`text` written to `out` through a temporary file beside it, so a reader never finds half a page."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out
