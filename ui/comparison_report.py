"""Several runs as one HTML file to keep or send: a row per run (how far it got, its train reward, its held-out
reward before and after), the settings they differ in, each overlay curve with a line per run (one colour per run on
every chart), and their answers to every held-out prompt side by side. Self-contained like a run's report
(ui/report.py: inline SVG and CSS, no script, no link out). Pure functions (pandas, no gradio)."""

from __future__ import annotations

import datetime
import html
from pathlib import Path

from pipeline.run_folder import run_files, runs, stages
from pipeline.setup import steering
from ui import answers_view, charts, compare_view, html_page, probes_view, prompt_names, steer_view, views
from ui.html_page import line_chart_svg

# What names the file in the exports folder, after the first run's name: it goes with that run's exports.
SUFFIX = "-comparison.html"


def without_default_params(config: dict) -> dict:
    """The config with each reward's parameters that are at their defaults left out: a run queued from a terminal
    (rewards without parameters) and one started from the form (every parameter written) read the same when they
    score the same.

    >>> without_default_params({"rewards": [{"name": "length_target", "params": {"target": 80, "unit": "chars"}}]})
    {'rewards': [{'name': 'length_target', 'params': {'target': 80}}]}
    """
    from pipeline.rewards import reward_registry

    defaults = {d["name"]: {k: p["default"] for k, p in d["params"].items()} for d in reward_registry.describe()}
    rewards = [{**spec, "params": {k: v for k, v in (spec.get("params") or {}).items()
                                   if k not in defaults[spec["name"]] or v != defaults[spec["name"]][k]}}
               if isinstance(spec, dict) and spec.get("name") in defaults else spec
               for spec in config.get("rewards") or []]
    return {**config, "rewards": rewards} if "rewards" in config else config


def run_configs(paths: dict[str, Path]) -> dict[str, dict]:
    """Each run's settings as it trained them (config.json and the launches' overrides; a reward's parameters at their
    defaults left out; a next stage's model named by the run and step it came from), with what was steered while it
    trained as one more setting ("step: setting old→new"), for compare_view.settings_diff_html."""
    configs = {name: without_default_params(runs.effective_config(path)) for name, path in paths.items()}
    for name, cfg in configs.items():
        if cfg:
            cfg[compare_view.STEERED] = steer_view.changes_text(steering.applied_changes(paths[name]))
            if "model" in cfg:  # a next stage's model, a folder of its own, by where it came from: two stages
                cfg["model"] = stages.model_label(cfg["model"])  # of one run read the same
    return configs


def reward_names(configs: dict[str, dict | None]) -> list[str]:
    """Each reward any of the runs scores (config.json's rewards, weight 0 included), once, in the order met."""
    names: list[str] = []
    for cfg in configs.values():
        for reward in (cfg or {}).get("rewards") or []:
            if isinstance(reward, dict) and reward.get("name") and str(reward["name"]) not in names:
                names.append(str(reward["name"]))
    return names


def curves_html(metrics: dict[str, list[dict]], evals: dict[str, list[dict]], rewards: list[str]) -> str:
    """Every overlay curve the runs logged (train and held-out reward, KL, length, entropy, each reward's mean), a
    line per run, in the same colour on every chart."""
    colors = {name: charts.SERIES_COLORS[i % len(charts.SERIES_COLORS)] for i, name in enumerate(metrics)}
    steps = [r["step"] for rows in (*metrics.values(), *evals.values()) for r in rows
             if isinstance(r.get("step"), int)]
    last = max(steps or [1])
    figures = []
    for curve in charts.compare_choices(rewards):
        reward = curve.removeprefix(charts.REWARD_CURVE) if curve.startswith(charts.REWARD_CURVE) else None
        source, key, y_title = charts.COMPARE_CURVES.get(curve, ("metrics", "rewards", "reward (mean)"))
        frame = charts.compare_frame(evals if source == "evals" else metrics, key, reward)
        if frame is None or frame.empty:
            continue
        svg = line_chart_svg(frame, y_title, last, colors=colors)
        figures.append(f"<figure><figcaption>{html.escape(charts.compare_title(curve))}</figcaption>{svg}</figure>")
    if not figures:
        return "<p>None of these runs has logged a step yet.</p>"
    return f"<div class='gs-report-charts'>{''.join(figures)}</div>"


def evaluation_text(result, stale: bool = False) -> str:
    """A run's last *Evaluate base vs tuned* (eval.json) in one cell: mean total base → tuned, on how many prompts,
    the gap closed and the interval of the mean gain; empty without one, marked when the run trained after it.

    >>> evaluation_text({"n": 16, "base": {"reward_mean": 172.9}, "tuned": {"reward_mean": 254.3},
    ...                  "gap_closed": 0.64, "paired": {"mean": 81.4, "low": 44.0, "high": 116.0, "level": 0.9}})
    '172.9 → 254.3 on 16 prompts, gap closed 64%, gain 90% interval +44 to +116'
    >>> evaluation_text(None), evaluation_text({"n": 4}, stale=True)
    ('', '')
    """
    try:
        text = (f"{result['base']['reward_mean']:.4g} → {result['tuned']['reward_mean']:.4g} on {result['n']} "
                "prompts")
    except (KeyError, TypeError, ValueError):
        return ""
    if isinstance(result.get("gap_closed"), (int, float)):
        text += f", gap closed {result['gap_closed']:.0%}"
    gain = result.get("paired") or {}
    if isinstance(gain.get("low"), (int, float)) and isinstance(gain.get("high"), (int, float)):
        text += f", gain {gain.get('level', 0.9):.0%} interval {gain['low']:+.3g} to {gain['high']:+.3g}"
    return text + (" (trained further since)" if stale else "")


def runs_rows_html(paths: dict[str, Path]) -> str:
    """A row per run, as the Runs table has it (state, steps, last train reward, held-out probes before → after,
    time), and its last evaluation on every held-out prompt where it has one."""
    rows, evaluated = [], False
    for name, path in paths.items():
        row = runs.run_summary(path)
        final = row.get("final_reward")
        took = views.fmt_seconds(row["duration_s"]) if row.get("duration_s") is not None else ""
        evaluation = evaluation_text(runs.read_json(path / run_files.EVAL_RESULT), runs.trained_since_evaluation(path))
        evaluated = evaluated or bool(evaluation)
        cells = [row.get("state") or "", f"{row.get('step') or 0} / {row.get('max_steps') or '?'}",
                 probes_view.fmt_score(final) if final is not None else "",
                 probes_view.held_out_text(runs.read_evals(path)), took, evaluation]
        rows.append([f"<td class='gs-answers-run'>{html.escape(name)}</td>",
                     *(f"<td>{html.escape(str(c))}</td>" for c in cells)])
    heads = ["run", "state", "step", "train reward", "held-out probes", "time", "evaluated, base → tuned"]
    keep = len(heads) if evaluated else len(heads) - 1  # the evaluation column only when some run has one
    return ("<table class='gs-outcome-table gs-answers-summary'><tr>" + "".join(f"<th>{h}</th>" for h in heads[:keep])
            + "</tr>" + "".join(f"<tr>{''.join(r[:keep])}</tr>" for r in rows) + "</table>")


def answers_section(evals: dict[str, list[dict]], source: str) -> list[str]:
    """The runs' answers side by side, from their probes or their evaluations (`source`): the summary table, then
    each prompt they all answered (answers_view.shared_prompts: every run's own, with a note, when they share none);
    [] when none answered any."""
    prompts = answers_view.shared_prompts(evals)
    if not prompts:
        return []
    return [answers_view.summary_html(evals, source),
            *(f"<h3>Prompt {i}: {html.escape(prompt_names.short_prompt(prompt, 90))}</h3>"
              + answers_view.prompt_answers_html(evals, prompt, head="The whole prompt", source=source)
              for i, prompt in enumerate(prompts, 1)),
            answers_view.LEGEND]


def comparison_html(run_dirs: list[str | Path], now: datetime.datetime | None = None) -> str:
    """The comparison of the runs in `run_dirs` (two or more), as their files stand on disk now."""
    paths = {Path(p).name: Path(p) for p in run_dirs}
    configs = run_configs(paths)
    metrics = {name: runs.read_metrics(path) for name, path in paths.items()}
    evals = {name: runs.read_evals(path) for name, path in paths.items()}
    offsets = stages.step_offsets(paths)  # a next stage's curves go on from the run it came from, when it is here
    title = f"{len(paths)} runs compared"
    sections = [f"<h1>{html.escape(title)}</h1>", runs_rows_html(paths),
                compare_view.settings_diff_html(configs),
                "<h2>Curves</h2>", curves_html(stages.shifted(metrics, offsets), stages.shifted(evals, offsets),
                                               reward_names(configs)),
                "<h2>Held-out answers side by side</h2>",
                *(answers_section(evals, answers_view.PROBES) or [
                    "<p>None of these runs has answered a held-out prompt (probes off, or no probe yet).</p>"])]
    evaluated = {name: rows for name, path in paths.items()
                 if (rows := answers_view.run_answer_rows(path, answers_view.EVALUATION))}
    # Every held-out prompt their evaluations answered, where two or more runs were evaluated on the same prompts.
    if len(evaluated) >= 2 and (answered := answers_section(evaluated, answers_view.EVALUATION)):
        sections += ["<h2>Evaluation answers side by side</h2>", *answered]
    stamp = (now or datetime.datetime.now()).strftime("%Y-%m-%d %H:%M")
    sections.append(f"<footer>Written by GRPO Studio on {stamp} from the files in the runs' folders: "
                    f"{html.escape(', '.join(paths))}. Each run's own report has its groups and every setting."
                    "</footer>")
    return html_page.page(f"{title} · GRPO Studio", sections)


def write_comparison(run_dirs: list[str | Path], out: str | Path | None = None) -> Path:
    """The comparison written to `out`, by default to the exports folder as `<first run>-comparison.html` (an
    export of the first run: it goes with that run when the run is deleted with its exports)."""
    return html_page.write(comparison_html(run_dirs), out or runs.exports_dir() / f"{Path(run_dirs[0]).name}{SUFFIX}")


def problem(run_dirs: list[Path]) -> str | None:
    """Why these runs can't be compared in a file, or None.

    >>> problem([Path("a")])
    'Tick two or more runs to compare them in one file.'
    """
    if len(run_dirs) < 2:
        return "Tick two or more runs to compare them in one file."
    empty = [p.name for p in run_dirs if not (p / run_files.METRICS).exists() and not (p / run_files.EVALS).exists()]
    if len(empty) == len(run_dirs):
        return "None of the ticked runs has a step yet: a comparison can be made after their first steps."
    return None
