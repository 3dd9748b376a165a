"""The Train tab's held-out probes (completions over time, from evals.jsonl): the probe chart's frame, the
step picker's choices and the answers panel with its word diffs. Pure functions (pandas, no gradio), tested
directly."""

from __future__ import annotations

import difflib
import html
import re

import pandas as pd

from pipeline.training.paired_gain import paired_gain
from ui.charts import _finite, reward_frame
from ui.prompt_names import short_prompt


def fmt_score(value) -> str:
    return "-" if value is None else f"{value:.3g}"


TERMINAL_STATES = ("finished", "stopped", "failed")


def probe_frame(evals: list[dict]) -> pd.DataFrame | None:
    """Held-out (probe) reward: the weighted total and each reward's mean, per probe step."""
    return reward_frame([{"step": e["step"], "reward": e.get("reward"),
                          "rewards": {n: {"mean": v} for n, v in (e.get("rewards") or {}).items()}}
                         for e in evals])


def _words(text: str) -> list[str]:
    """Words and punctuation runs, each keeping the whitespace after it (so line breaks survive the diff).

    >>> _words("Bike lanes, open.\\nDone")
    ['Bike ', 'lanes', ', ', 'open', '.\\n', 'Done']
    """
    return re.findall(r"[\w'-]+\s*|[^\w\s]+\s*|\s+", text or "")


def word_diff_html(old: str, new: str) -> str:
    """`new` as HTML with the words added since `old` in <ins> and the removed ones struck in <del>.

    >>> word_diff_html("the cat sat.", "the dog sat down.")
    'the <del>cat </del><ins>dog </ins>sat <ins>down</ins>.'
    >>> word_diff_html("a <b>", "a <b>")
    'a &lt;b&gt;'
    """
    a, b = _words(old), _words(new)
    matcher = difflib.SequenceMatcher(None, [w.strip() for w in a], [w.strip() for w in b], autojunk=False)
    out = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out.append(html.escape("".join(b[j1:j2])))
            continue
        if op in ("delete", "replace"):
            removed = "".join(a[i1:i2])
            out.append(f"<del>{html.escape(removed.rstrip())}{' ' if removed[-1:].isspace() else ''}</del>")
        if op in ("insert", "replace"):
            out.append(f"<ins>{html.escape(''.join(b[j1:j2]))}</ins>")
    return "".join(out)


def _end_label(step: int, last: bool, max_steps: int | None, state: str | None) -> str:
    if step == 0:
        return " · base"
    if (max_steps and step >= max_steps) or (last and state in TERMINAL_STATES):
        return " · end"
    return ""


def probe_choices(evals: list[dict], max_steps: int | None = None, state: str | None = None) -> list[tuple[str, str]]:
    """(label, value) for the probe-step picker: 'latest' (follows new probes), then every probe step.

    >>> probe_choices([{"step": 0}, {"step": 5}, {"step": 7}], max_steps=20, state="stopped")
    [('latest', 'latest'), ('0 · base', '0'), ('5', '5'), ('7 · end', '7')]
    """
    steps = [e["step"] for e in evals]
    return [("latest", "latest")] + [(f"{s}{_end_label(s, i == len(steps) - 1, max_steps, state)}", str(s))
                                     for i, s in enumerate(steps)]


def _picked(evals: list[dict], pick) -> int:
    """Index of the chosen probe step; 'latest', an unknown step or nothing means the newest."""
    for i, e in enumerate(evals):
        if str(e["step"]) == str(pick):
            return i
    return len(evals) - 1


def task_key(task: dict | None) -> str | None:
    if not task:
        return None
    return "summary_score" if task.get("kind") == "summary" else "accuracy"


def _signed(value) -> str:
    return "" if not _finite(value) else f"{value:+.3g}"


def _points_vs(value, first, step) -> str:
    """A share's change since the first probe, in percentage points.

    >>> _points_vs(0.75, 0.5, 0)
    ' (+25 points vs step 0)'
    """
    return f" ({(value - first) * 100:+.0f} points vs step {step})"


def probes_off(cfg: dict | None) -> bool:
    """Whether the run's settings turn probing off (probe every N steps = 0, or no probe prompts).

    >>> probes_off({"probe_every": 0}), probes_off({"probe_prompts": 0}), probes_off({}), probes_off(None)
    (True, True, False, False)
    """
    cfg = cfg or {}
    return cfg.get("probe_every", 5) == 0 or cfg.get("probe_prompts", 4) == 0


def probes_empty_html(cfg: dict | None, state: str | None = None) -> str:
    """What the completions panel says before there is anything to show."""
    cfg = cfg or {}
    every, n = cfg.get("probe_every", 5), cfg.get("probe_prompts", 4)
    if probes_off(cfg):
        return ("<div class='gs-empty'>Probes are off for this run (probe every N steps = 0). Set it above 0 to "
                "watch answers to held-out prompts change while the model trains.</div>")
    about = (f"Probes answer {n} held-out prompts (never trained on, the same ones every time) greedily every "
             f"{every} steps and at the end; step 0 is the base model, before any update. Each answer is "
             "scored with the run's rewards, and the words that changed since the previous probe are marked.")
    if state in TERMINAL_STATES:
        return (f"<div class='gs-empty'>This run wrote no probes (it has no held-out prompts, or it ended before "
                f"the first one). {about}</div>")
    wait = " The first probe (step 0) runs as soon as the model has loaded." if state in ("queued", "running") else ""
    return f"<div class='gs-empty'>{about}{wait}</div>"


def probes_html(evals: list[dict], pick=None, cfg: dict | None = None, state: str | None = None) -> str:
    """Completions over time: every probe prompt's greedy answer at the chosen probe step, its scores,
    what changed since the previous probe step, and its totals at every probe step."""
    if not evals:
        return probes_empty_html(cfg, state)
    cfg = cfg or {}
    i = _picked(evals, pick)
    cur, prev, base = evals[i], (evals[i - 1] if i > 0 else None), evals[0]
    key = task_key(cur.get("task"))
    step = cur["step"]
    label = f"step {step}{_end_label(step, i == len(evals) - 1, cfg.get('max_steps'), state)}"

    head = [f"<b>{html.escape(label)}</b>"]
    if _finite(cur.get("reward")):
        vs = (f" ({_signed(cur['reward'] - base['reward'])} vs step {base['step']})"
              if i > 0 and _finite(base.get("reward")) else "")
        head.append(f"held-out reward <b>{fmt_score(cur['reward'])}</b>{vs}")
    if key:
        value, first = cur["task"].get(key), (base.get("task") or {}).get(key)
        shown = i > 0 and _finite(value) and _finite(first)
        if key == "accuracy" and _finite(value):  # a share of the prompts: percent, and its change in points
            vs = _points_vs(value, first, base["step"]) if shown else ""
            head.append(f"accuracy <b>{value:.0%}</b>{vs}")
        else:
            vs = f" ({_signed(value - first)} vs step {base['step']})" if shown else ""
            head.append(f"{key} <b>{fmt_score(value)}</b>{vs}")
    fmt, fmt0 = (cur.get("task") or {}).get("format_compliance"), (base.get("task") or {}).get("format_compliance")
    if _finite(fmt):  # answers with a number inside <answer></answer> (tasks with reference answers)
        vs = _points_vs(fmt, fmt0, base["step"]) if i > 0 and _finite(fmt0) else ""
        head.append(f"<span class='gs-format'>format compliance <b>{fmt:.0%}</b>{vs}</span>")
    made_up = (cur.get("task") or {}).get("invented_details")
    made_up0 = (base.get("task") or {}).get("invented_details")
    if _finite(made_up):  # movie questions: answers stating a detail the films given lack (lower is better)
        vs = _points_vs(made_up, made_up0, base["step"]) if i > 0 and _finite(made_up0) else ""
        head.append(f"invented details <b>{made_up:.0%}</b>{vs}")
    recall = (cur.get("task") or {}).get("retrieval_recall")
    if _finite(recall):  # movie questions: the right film among the retrieved plots, the ceiling on accuracy
        head.append(f"film retrieved <b>{recall:.0%}</b>")
    if _finite(cur.get("seconds")):
        head.append(f"probe took {cur['seconds']:.1f} s")
    legend = (f"Compared with step {prev['step']}: <ins>new words</ins> <del>removed words</del>" if prev else
              "Step 0 is the base model: later steps mark what changed since the previous probe.")
    out = [f"<div class='gs-probes' data-step='{step}' data-steps='{','.join(str(e['step']) for e in evals)}'>",
           f"<div class='gs-probe-head'>{' &nbsp;·&nbsp; '.join(f'<span>{h}</span>' for h in head)}</div>",
           f"<div class='gs-probe-legend'>{legend}</div>"]

    for j, sample in enumerate(cur.get("samples") or []):
        prompt = sample.get("prompt", "")
        short = short_prompt(prompt, 150)
        scores = [f"total <b>{fmt_score(sample.get('total'))}</b>"]
        old = (prev.get("samples") or [])[j] if prev and j < len(prev.get("samples") or []) else None
        if old is not None and _finite(sample.get("total")) and _finite(old.get("total")):
            scores[0] += f" ({_signed(sample['total'] - old['total'])} since step {prev['step']})"
        scores += [f"{html.escape(n)} {fmt_score(v)}" for n, v in (sample.get("rewards") or {}).items()]
        per = (cur.get("task") or {}).get("per_prompt") or []
        if key and j < len(per):
            scores.append(f"{key} {fmt_score(per[j])}")
        text = sample.get("completion", "")
        if old is None:
            body = html.escape(text)
        elif old.get("completion", "") == text:
            body = html.escape(text) + f" <span class='gs-same'>(unchanged since step {prev['step']})</span>"
        else:
            body = word_diff_html(old.get("completion", ""), text)
        out.append(
            f"<div class='gs-probe'><details class='gs-probe-prompt'><summary>Prompt {j + 1}: "
            f"{html.escape(short)}</summary><div class='gs-text'>{html.escape(prompt)}</div></details>"
            f"<div class='gs-probe-scores'>{' &nbsp;·&nbsp; '.join(scores)}</div>"
            f"<div class='gs-probe-text'>{body or '<i>(empty answer)</i>'}</div>"
            f"{_probe_history(evals, j, i, key)}</div>")
    out.append("</div>")
    return "".join(out)


def _probe_history(evals: list[dict], j: int, chosen: int, key: str | None) -> str:
    """One prompt's total at every probe step (the chosen one in bold), with every answer one click away."""
    cells, rows = [], []
    for k, e in enumerate(evals):
        samples = e.get("samples") or []
        if j >= len(samples):
            continue
        s = samples[j]
        total = fmt_score(s.get("total"))
        cells.append(f"<b>{e['step']}: {total}</b>" if k == chosen else f"{e['step']}: {total}")
        per = (e.get("task") or {}).get("per_prompt") or []
        task = f"<td>{fmt_score(per[j])}</td>" if key and j < len(per) else ("<td></td>" if key else "")
        rows.append(f"<tr><td>{e['step']}</td><td>{total}</td>{task}"
                    f"<td class='gs-text'>{html.escape(s.get('completion', ''))}</td></tr>")
    task_head = f"<th>{key}</th>" if key else ""
    return (f"<details class='gs-probe-history'><summary>total by step: {' → '.join(cells)}</summary>"
            f"<table class='gs-table'><tr><th>step</th><th>total</th>{task_head}<th>answer</th></tr>"
            f"{''.join(rows)}</table></details>")


def _change_cell(before, after) -> str:
    """The change between two scores, marked up or down (higher is better for every reward and task metric)."""
    if not (_finite(before) and _finite(after)):
        return "<td>-</td>"
    delta = after - before
    if abs(delta) < 1e-9:
        return "<td class='gs-same'>±0</td>"
    mark, cls = ("▲", "gs-up") if delta > 0 else ("▼", "gs-down")
    return f"<td class='{cls}'>{mark} {delta:+.3g}</td>"


def outcome_html(evals: list[dict], state: str | None, next_steps: bool = True, started_from: str | None = None) -> str:
    """Once a run has finished or stopped: its held-out probes before (step 0, the base model) and after (the last
    probe), the total reward, the task metric and each reward side by side, and where to look next in the app
    (unless `next_steps` is False, as in a report). Empty before that, or without a probe past step 0. A next
    stage names the run its model came from (`started_from`, pipeline/run_folder/stages.py).

    >>> evals = [{"step": 0, "reward": 197.1, "rewards": {"length_target": -91.5}, "samples": [{}, {}],
    ...           "task": {"kind": "summary", "summary_score": 0.79}},
    ...          {"step": 11, "reward": 261.0, "rewards": {"length_target": -35.0}, "samples": [{}, {}],
    ...           "task": {"kind": "summary", "summary_score": 0.83}}]
    >>> outcome_html(evals, "running"), outcome_html(evals[:1], "finished")
    ('', '')
    >>> text = outcome_html(evals, "finished")
    >>> "on 2 held-out prompts" in text, "<td>197</td><td>261</td><td class='gs-up'>▲ +63.9</td>" in text
    (True, True)
    >>> evals[0]["samples"], evals[1]["samples"] = [{"total": 1.0}, {"total": 2.0}], [{"total": 3.0}, {"total": 2.0}]
    >>> re.search("Prompt by prompt.*?</div>", outcome_html(evals, "finished"))[0]
    'Prompt by prompt: higher on <b>1</b>, lower on <b>0</b>, the same on 1 of 2.</div>'
    """
    if state not in ("finished", "stopped") or len(evals) < 2 or evals[0].get("step") != 0:
        return ""
    base, tuned = evals[0], evals[-1]
    rows = [("total reward", base.get("reward"), tuned.get("reward"))]
    key = task_key(base.get("task"))
    if key:
        rows.append((key, (base.get("task") or {}).get(key), (tuned.get("task") or {}).get(key)))
    names = list(base.get("rewards") or {})
    rows += [(name, (base.get("rewards") or {}).get(name), (tuned.get("rewards") or {}).get(name)) for name in names]
    body = "".join(f"<tr><th>{html.escape(name)}</th><td>{fmt_score(before)}</td><td>{fmt_score(after)}</td>"
                   f"{_change_cell(before, after)}</tr>" for name, before, after in rows)
    prompts = len(tuned.get("samples") or [])
    base_model = (f"the model it started from ({html.escape(started_from)})" if started_from
                  else "the base model")
    return (f"<div class='gs-outcome'><div><b>Before and after</b>, on {prompts} held-out prompts the run never "
            f"trained on, answered greedily: {base_model} at step 0, the tuned one at step {tuned['step']}.</div>"
            f"<table class='gs-outcome-table'><tr><th></th><th>base</th><th>tuned</th><th>change</th></tr>{body}"
            f"</table>{_per_prompt(base, tuned)}{NEXT_STEPS if next_steps else ''}</div>")


def _per_prompt(base: dict, tuned: dict) -> str:
    """How many probe prompts the tuned model scored higher, lower or the same on (the same prompts, in the
    same order, at every probe; a pair whose prompts differ is left out)."""
    pairs = [(b.get("total"), t.get("total")) for b, t in zip(base.get("samples") or [], tuned.get("samples") or [])
             if b.get("prompt") == t.get("prompt")]
    gain = paired_gain([b for b, _ in pairs], [t for _, t in pairs])
    if not gain:
        return ""
    return (f"<div class='gs-per-prompt'>Prompt by prompt: higher on <b>{gain['better']}</b>, lower on "
            f"<b>{gain['worse']}</b>, the same on {gain['same']} of {gain['n']}.</div>")


NEXT_STEPS = ("<div class='gs-next'>Next: talk to it beside the base model in <b>Chat</b> (tick <i>Side by side</i>), "
              "or press <b>Evaluate base vs tuned</b> in the Runs panel to score it on every held-out prompt and see "
              "whether the gain is more than chance. To teach it something more (other rewards, other prompts), "
              "<b>Train a next stage from it</b> there.</div>")


def held_out_text(evals: list[dict]) -> str:
    """The held-out reward at step 0 (the base model) and at the last probe, for the runs table.

    >>> held_out_text([{"step": 0, "reward": 197.09}, {"step": 5, "reward": 230.0}, {"step": 11, "reward": 258.4}])
    '197 → 258'
    >>> held_out_text([{"step": 0, "reward": 0.5}]), held_out_text([])
    ('0.5 → …', '')
    """
    if not evals or evals[0].get("step") != 0:
        return ""
    after = fmt_score(evals[-1].get("reward")) if len(evals) > 1 else "…"
    return f"{fmt_score(evals[0].get('reward'))} → {after}"
