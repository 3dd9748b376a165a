"""The Runs panel's held-out answers side by side: for the ticked runs, one held-out prompt's answer from each run's
last probe (or its last evaluation), best scored first, marked against the base model's answer, and a table of how
each run did on the prompts they all answered. Pure functions over each run's evals.jsonl rows, or eval.json made
into rows like them (no gradio; run_answer_rows reads them from a run folder), tested directly."""

from __future__ import annotations

import hashlib
import html
from pathlib import Path

from pipeline.run_folder import run_files, runs
from ui.charts import _finite
from ui.probes_view import fmt_score, task_key, word_diff_html
from ui.prompt_names import short_prompt

ANSWERS_EMPTY = ("<div class='gs-empty'>Tick two or more runs above to read their answers to the same held-out "
                 "prompt side by side: each run's last probe, best scored first, with the words it changed from the "
                 "base model's answer marked.</div>")
NO_PROBES = ("<div class='gs-empty'>None of the ticked runs has answered a held-out prompt yet. Probes answer them "
             "at step 0 and every few steps (Probe every N steps, under All settings); a run with probes off has "
             "none.</div>")


# Where the answers come from: each run's last probe (a few held-out prompts, written as it trained), or its last
# Evaluate base vs tuned (every held-out prompt it was asked, once it has been evaluated).
PROBES, EVALUATION = "Last probe", "Evaluation"
ANSWER_SOURCES = {PROBES: "a few held-out prompts, answered as it trained",
                  EVALUATION: "every held-out prompt of its last Evaluate base vs tuned"}


def evaluation_rows(result, step: int) -> list[dict]:
    """A run's eval.json as two probe-like rows, the base model's answers at step 0 and the tuned model's at `step`
    (the run's last step), each with its totals and task metric; none for a result without answers.

    >>> rows = evaluation_rows({"samples": [{"prompt": "P", "base": "long", "tuned": "short", "base_total": 1.0,
    ...                                      "tuned_total": 2.0}], "tuned": {"task": {"kind": "summary"}}}, 11)
    >>> [(r["step"], r["samples"][0]["completion"], r["samples"][0]["total"]) for r in rows], rows[1]["task"]
    ([(0, 'long', 1.0), (11, 'short', 2.0)], {'kind': 'summary'})
    >>> evaluation_rows(None, 3), evaluation_rows({"samples": "torn"}, 3)
    ([], [])
    """
    samples = result.get("samples") if isinstance(result, dict) else None
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        return []
    rows = []
    for side, at in (("base", 0), ("tuned", step)):
        rows.append({"step": at, "task": (result.get(side) or {}).get("task"),
                     "samples": [{"prompt": s.get("prompt", ""), "completion": s.get(side, ""),
                                  "total": s.get(f"{side}_total")} for s in samples]})
    return rows


def run_answer_rows(path: Path, source: str) -> list[dict] | None:
    """A run's answers to compare: its probes (evals.jsonl), or its last evaluation as probe-like rows (None when it
    has not been evaluated)."""
    if source != EVALUATION:
        return runs.read_evals(path)
    steps = [r["step"] for r in runs.read_metrics(path) if isinstance(r.get("step"), int)]
    rows = evaluation_rows(runs.read_json(path / run_files.EVAL_RESULT), max(steps or [0]))
    return rows or None


def prompt_key(prompt: str) -> str:
    """A short, stable id for a prompt's text (the picker's value).

    >>> prompt_key("TL;DR: a post"), len(prompt_key("x" * 5000))
    ('020c336fef', 10)
    """
    return hashlib.sha1(prompt.encode()).hexdigest()[:10]


def _prompt_counts(evals_by_run: dict[str, list[dict]]) -> dict[str, int]:
    """Every prompt a ticked run answered, with how many runs answered it, in the order the runs answered them."""
    count: dict[str, int] = {}
    for evals in evals_by_run.values():
        for prompt in dict.fromkeys(s.get("prompt", "") for e in evals for s in e.get("samples") or []):
            count[prompt] = count.get(prompt, 0) + 1
    return count


def shared_prompts(evals_by_run: dict[str, list[dict]]) -> list[str]:
    """Every prompt that a ticked run answered, those that most runs answered first, then in the order the runs
    answered them."""
    count = _prompt_counts(evals_by_run)
    return sorted(count, key=lambda p: -count[p])  # sorted() keeps the order among equal counts


def prompt_choices(evals_by_run: dict[str, list[dict]]) -> list[tuple[str, str]]:
    """(label, value) for the prompt picker: a prompt's first words and how many of the ticked runs answered it.

    >>> evals = {"a": [{"step": 0, "samples": [{"prompt": "Bike lanes open on Main Street. TL;DR:"}]}],
    ...          "b": [{"step": 0, "samples": [{"prompt": "Bike lanes open on Main Street. TL;DR:"},
    ...                                        {"prompt": "A short one"}]}]}
    >>> [label for label, _ in prompt_choices(evals)]
    ['1. Bike lanes open on Main Street. TL;DR:', '2. A short one (1 of 2 runs)']
    """
    count, runs = _prompt_counts(evals_by_run), len(evals_by_run)
    return [(f"{i}. {short_prompt(prompt)}" + (f" ({count[prompt]} of {runs} runs)" if count[prompt] < runs else ""),
             prompt_key(prompt)) for i, prompt in enumerate(shared_prompts(evals_by_run), 1)]


def _answer(evals: list[dict], prompt: str, last: bool) -> tuple[dict, dict, int] | None:
    """(the probe row, its sample for `prompt`, the sample's index) at the run's last probe that answered `prompt`
    (`last`), or at its first (the base model, when that probe is step 0)."""
    rows = reversed(evals) if last else evals
    for row in rows:
        for j, sample in enumerate(row.get("samples") or []):
            if sample.get("prompt") == prompt:
                return row, sample, j
    return None


def _task_score(row: dict, j: int) -> tuple[str, float] | None:
    """The prompt's task metric at that probe (summary score, or 1/0 for a right/wrong answer), when it has one."""
    key = task_key(row.get("task"))
    per = (row.get("task") or {}).get("per_prompt") or []
    return (key, per[j]) if key and j < len(per) and _finite(per[j]) else None


def _task_text(score: tuple[str, float] | None) -> str:
    if score is None:
        return ""
    key, value = score
    if key == "accuracy":
        return "right" if value >= 1 else "wrong"
    return f"{key} {fmt_score(value)}"


def _scores(sample: dict, base: dict | None, row: dict, j: int) -> str:
    total = f"total <b>{fmt_score(sample.get('total'))}</b>"
    if base is not None and _finite(sample.get("total")) and _finite(base.get("total")):
        total += f" ({sample['total'] - base['total']:+.3g} vs its base)"
    parts = [total] + [f"{html.escape(n)} {fmt_score(v)}" for n, v in (sample.get("rewards") or {}).items()]
    task = _task_text(_task_score(row, j))
    return " &nbsp;·&nbsp; ".join(parts + ([task] if task else []))


def summary_html(evals_by_run: dict[str, list[dict]], source: str = PROBES) -> str:
    """A row per run over the prompts every ticked run answered: its last probe's step, its mean total there, that
    mean at step 0, and on how many of them it scored highest (ties count for each run that tied)."""
    lasts = {name: evals[-1] for name, evals in evals_by_run.items() if evals}
    if len(lasts) < 2:
        return ""
    totals: dict[str, dict[str, float]] = {}
    bases: dict[str, dict[str, float]] = {}
    for name, evals in evals_by_run.items():
        if not evals:
            continue
        totals[name] = {s.get("prompt"): s.get("total") for s in lasts[name].get("samples") or []
                        if _finite(s.get("total"))}
        first = evals[0] if evals[0].get("step") == 0 else {}
        bases[name] = {s.get("prompt"): s.get("total") for s in first.get("samples") or [] if _finite(s.get("total"))}
    common = set.intersection(*(set(t) for t in totals.values()))
    if not common:
        return ("<div class='gs-answers-note'>The ticked runs answered no held-out prompt in common (their prompts or "
                "seeds differ): each prompt below shows the runs that answered it.</div>")
    best = {p: max(t[p] for t in totals.values()) for p in common}
    rows = []
    for name in sorted(totals, key=lambda n: -sum(totals[n][p] for p in common)):
        mean = sum(totals[name][p] for p in common) / len(common)
        base = (f"{fmt_score(sum(bases[name][p] for p in common) / len(common))}"
                if common <= set(bases[name]) else "-")
        wins = sum(totals[name][p] >= best[p] - 1e-9 for p in common)
        rows.append(f"<tr><td class='gs-answers-run'>{html.escape(name)}</td><td>{lasts[name]['step']}</td>"
                    f"<td>{base}</td><td><b>{fmt_score(mean)}</b></td><td>{wins} of {len(common)}</td></tr>")
    at, how = ("last probe", "at its last probe") if source == PROBES else ("evaluated", "from its last evaluation")
    return (f"<table class='gs-outcome-table gs-answers-summary'><tr><th>run</th><th>{at} step</th>"
            f"<th>mean total, step 0</th><th>mean total, {at}</th><th>highest on</th></tr>{''.join(rows)}"
            f"</table><div class='gs-answers-note'>Over the {_prompts(len(common))} every ticked run answered; each "
            f"run's answers are greedy, {how}.</div>")


def _prompts(n: int) -> str:
    return "held-out prompt" if n == 1 else f"{n} held-out prompts"


def prompt_answers_html(evals_by_run: dict[str, list[dict]], prompt: str, head: str | None = None,
                        source: str = PROBES) -> str:
    """The ticked runs' answers to `prompt`: the base model's answer (once, when every run that has one gave the
    same), then each run's at its last probe (or evaluation: `source`), best total first, its new words marked
    against its base answer. `head`: the line that opens the whole prompt (the Runs panel's default keeps it folded
    under a summary)."""
    found = {name: (_answer(evals, prompt, True), _answer(evals, prompt, False))
             for name, evals in evals_by_run.items()}
    answered = {name: pair for name, pair in found.items() if pair[0] is not None}
    base_texts = {pair[1][1].get("completion", "") for pair in answered.values() if pair[1][0].get("step") == 0}
    shared_base = next(iter(base_texts)) if len(base_texts) == 1 else None
    head = head or "Answers to the prompt picked, best total first (the whole prompt)"
    out = [f"<details class='gs-probe-prompt'><summary>{head}</summary><div class='gs-text'>{html.escape(prompt)}"
           "</div></details>"]
    if shared_base is not None:
        out.append(f"<div class='gs-probe gs-answer-base'><div class='gs-probe-scores'><b>Base model</b>, step 0 "
                   f"(every ticked run's starting answer)</div><div class='gs-probe-text'>"
                   f"{html.escape(shared_base) or '<i>(empty answer)</i>'}</div></div>")
    order = sorted(answered, key=lambda n: -(answered[n][0][1].get("total")
                                             if _finite(answered[n][0][1].get("total")) else float("-inf")))
    for rank, name in enumerate(order, 1):
        (row, sample, j), (first, base_sample, _) = answered[name]
        base = base_sample if first.get("step") == 0 and first is not row else None
        text = sample.get("completion", "")
        if base is None:
            body = html.escape(text) + (" <span class='gs-same'>(the base model's answer: no probe since step 0)"
                                        "</span>" if row.get("step") == 0 else "")
        elif base.get("completion", "") == text:
            body = html.escape(text) + " <span class='gs-same'>(the same as its base answer)</span>"
        else:
            body = word_diff_html(base.get("completion", ""), text)
        own_base = ("" if shared_base is not None or base is None else
                    f"<details class='gs-probe-history'><summary>its base answer (step 0)</summary>"
                    f"<div class='gs-text'>{html.escape(base.get('completion', ''))}</div></details>")
        out.append(f"<div class='gs-probe gs-answer' data-run='{html.escape(name)}'><div class='gs-probe-scores'>"
                   f"<b>{rank}. {html.escape(name)}</b>, step {row.get('step')} &nbsp;·&nbsp; "
                   f"{_scores(sample, base, row, j)}</div><div class='gs-probe-text'>"
                   f"{body or '<i>(empty answer)</i>'}</div>{own_base}</div>")
    missing = [name for name in evals_by_run if name not in answered]
    if missing:
        out.append(f"<div class='gs-answers-note'>Not among the held-out prompts of {html.escape(', '.join(missing))}"
                   + (" (other prompts or seed, or probes off).</div>" if source == PROBES else
                      " (other prompts or seed, or fewer prompts evaluated).</div>"))
    return "".join(out)


LEGEND = "<div class='gs-probe-legend'>Against the base answer: <ins>new words</ins> <del>removed words</del></div>"


def answers_html(evals_by_run: dict[str, list[dict]], picked: str | None = None, source: str = PROBES) -> str:
    """The ticked runs' answers to the picked held-out prompt (prompt_key; the first one when it is none of theirs),
    under a table of how each run did on every prompt they all answered."""
    if len(evals_by_run) < 2:
        return ANSWERS_EMPTY
    prompts = shared_prompts(evals_by_run)
    if not prompts:
        return NO_PROBES
    prompt = next((p for p in prompts if prompt_key(p) == picked), prompts[0])
    return (f"<div class='gs-answers' data-prompt='{prompt_key(prompt)}'>{summary_html(evals_by_run, source)}"
            f"{prompt_answers_html(evals_by_run, prompt, source=source)}{LEGEND}</div>")
