"""A run as one HTML file to keep or send: what it trained, its curves, its held-out answers before and after, a
group of its last step, and its settings. Self-contained (inline SVG charts and CSS, no script, no link out), built
from the run folder's files with the same views the Train tab draws. Pure functions (pandas, no gradio)."""

from __future__ import annotations

import datetime
import html
from pathlib import Path

from markdown_it import MarkdownIt

from pipeline.run_folder import run_files, runs, stages
from pipeline.setup import steering
from pipeline.setup.config import ConfigError, RunConfig
from ui import charts, compare_view, html_page, probes_view, views
from ui.html_page import line_chart_svg

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
    model = stages.model_label(config.get("model")) or ""  # a next stage's: the run and step it started from
    sections = [f"<h1>{html.escape(name)}</h1>",
                f"<div class='gs-report-where'>{html.escape(str(model))} · prompts: "
                f"{html.escape(str((config.get('dataset') or {}).get('source', '')))}{took}</div>",
                views.progress_html(name, status, rows, max_steps),
                probes_view.outcome_html(evals, state, next_steps=False,
                                         started_from=stages.started_from(config.get("model"))),
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
    return html_page.page(f"{name} · GRPO Studio report", sections)


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """The report written to `out`, by default to the exports folder as `<run>-report.html` (an export of the run:
    it goes with the run when the run is deleted with its exports)."""
    run_dir = Path(run_dir)
    out = Path(out) if out else runs.exports_dir() / f"{run_dir.name}-report.html"
    return html_page.write(report_html(run_dir), out)


def main(argv: list[str] | None = None) -> int:
    """`python -m ui.report --run-dir DIR [--out FILE]`: a run's report from a terminal, as the Runs panel makes it;
    with --run-dir given twice or more, the comparison of those runs (ui/comparison_report.py)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ui.report",
                                 description="Write a run's report, or a comparison of runs: one HTML page.")
    ap.add_argument("--run-dir", required=True, action="append",
                    help="The run folder; give it twice or more to compare those runs on one page.")
    ap.add_argument("--out", help="Where to write it (default: the exports folder, as <run>-report.html, or "
                                  "<first run>-comparison.html).")
    args = ap.parse_args(argv)
    run_dirs = [Path(d) for d in args.run_dir]
    for run_dir in run_dirs:
        if runs.read_json(run_dir / run_files.CONFIG) is None and not (run_dir / run_files.METRICS).exists():
            print(f"{run_dir} is not a run folder: it has no {run_files.CONFIG} or {run_files.METRICS}.")
            return 2
    if len(run_dirs) > 1:
        from ui import comparison_report

        print(f"Wrote {comparison_report.write_comparison(run_dirs, args.out)}")
        return 0
    print(f"Wrote {write_report(run_dirs[0], args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
