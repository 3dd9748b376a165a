"""Does the default run learn? Trains the default config (the Quick CPU demo), or a preset, once per
seed, then scores base vs tuned on the held-out prompts, as a new user's first run would go.

    .venv/bin/python bench/learning.py [--seeds 1 2 3] [--preset arithmetic] [--set FIELD=JSON ...] [--answers FILE]

For each seed: wall time from launching `python -m pipeline.train` to its exit (imports, model load,
probes, training, adapter save and merge included), gap_closed and the task metric from
`pipeline.evaluate`, and whether the train reward curve rose: mean of the last 5 steps minus the
mean of the first 5, against the step-to-step noise (the pooled standard deviation of those two
windows). For a task with reference answers (the arithmetic preset) it also reports the held-out
format compliance and accuracy, base -> tuned. Prints a table with the median over seeds and writes
bench/out/learning[-preset].json; commit the printed output under bench/results/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import save, scratch  # noqa: E402
from pipeline.run_folder import runs  # noqa: E402
from pipeline.setup.config import RunConfig  # noqa: E402
from pipeline.setup.presets import PRESETS, apply_preset  # noqa: E402
from pipeline.models.loading import ensure_bundled_model  # noqa: E402


def paired_text(gain: dict | None) -> str:
    """Prompt by prompt, base against tuned: how many went up and down, and the mean gain's interval."""
    if not gain:
        return ""
    interval = ("" if gain["low"] is None else
                f", {gain['level']:.0%} interval {gain['low']:+.2f} to {gain['high']:+.2f}")
    return f"; held-out prompts up {gain['better']}, down {gain['worse']}, same {gain['same']}{interval}"


def curve_rise(rewards: list[float], window: int = 5) -> tuple[float, float]:
    """(mean of the last `window` minus mean of the first `window`, pooled std of the two windows)."""
    first, last = rewards[:window], rewards[-window:]
    noise = ((statistics.pvariance(first) + statistics.pvariance(last)) / 2) ** 0.5
    return statistics.fmean(last) - statistics.fmean(first), noise


# Short names for --preset; the full preset names work too.
PRESET_ALIASES = {"default": "Quick CPU demo", "arithmetic": "Arithmetic: correctness + format",
                  "movies": "Movie questions"}


def bench_config(preset: str, overrides: dict, seed: int | None = None) -> RunConfig:
    """The preset's config with --set overrides (JSON values, as config.json holds them) and the seed."""
    base = apply_preset(RunConfig(), PRESET_ALIASES.get(preset, preset)).to_dict()
    return RunConfig.from_dict({**base, **overrides, **({"seed": seed} if seed is not None else {})})


def one_seed(seed: int, work: Path, cfg: RunConfig, eval_limit: int = 32) -> dict:
    run_dir = work / f"seed-{seed}"
    run_dir.mkdir()
    cfg = RunConfig.from_dict({**cfg.to_dict(), "seed": seed})
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "pipeline.train", "--run-dir", str(run_dir)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    train_s = time.time() - t0
    status = runs.read_status(run_dir)
    subprocess.run([sys.executable, "-m", "pipeline.evaluate", "--run-dir", str(run_dir), "--limit", str(eval_limit)],
                   cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ev = json.loads((run_dir / "eval.json").read_text())
    metrics = runs.read_metrics(run_dir)
    # Steps that train again on an earlier batch (iterations per batch above 1) sample nothing and log no reward.
    sampled = [r for r in metrics if r.get("reward") is not None]
    rewards = [r["reward"] for r in sampled]
    rise, noise = curve_rise(rewards)
    task_key = "summary_score" if (ev["base"].get("task") or {}).get("kind") == "summary" else "accuracy"
    fmt = {f"format_{side}": (ev[side].get("task") or {}).get("format_compliance") for side in ("base", "tuned")}
    return {
        "seed": seed, "state": status.get("state"), "train_wall_s": round(train_s, 1), "steps": len(metrics),
        "base": ev["base"]["reward_mean"], "tuned": ev["tuned"]["reward_mean"], "max": ev["reward_max"],
        "gap_closed": ev["gap_closed"], "task_metric": task_key,
        "task_base": (ev["base"].get("task") or {}).get(task_key),
        "task_tuned": (ev["tuned"].get("task") or {}).get(task_key),
        **fmt, "recall": (ev["base"].get("task") or {}).get("retrieval_recall"), "eval_n": ev["n"],
        **{f"invented_{side}": (ev[side].get("task") or {}).get("invented_details") for side in ("base", "tuned")},
        "paired": ev.get("paired"),  # prompts up / down, and the mean gain's bootstrap interval
        "curve_rise": rise, "curve_noise": noise, "train_rewards": rewards,
        "train_rewards_by_function": [r.get("rewards") for r in sampled],
        "samples": ev["samples"][:4], "run_dir": str(run_dir),
        "answers": answer_lines(seed, ev),
    }


def answer_lines(seed: int, ev: dict) -> list[str]:
    """Every held-out answer, base -> tuned, for a task with right answers (arithmetic, movie questions): "+" marks
    one training turned right, "-" one it turned wrong, 1/0 whether each is right (pipeline.evaluate's accuracy).
    Empty for other tasks.

    >>> task = {"kind": "accuracy"}
    >>> ev = {"base": {"task": {**task, "per_prompt": [0.0]}}, "tuned": {"task": {**task, "per_prompt": [1.0]}},
    ...       "samples": [{"prompt": "Calculate 2 + 2", "base": "<answer>5</answer>", "tuned": "<answer>4</answer>"}]}
    >>> print("\\n".join(answer_lines(1, ev)))
    seed 1: 1 problems; right 0 -> 1; right only after training 1, right only before 0
      + Calculate 2 + 2
         base  (0): '<answer>5</answer>'
         tuned (1): '<answer>4</answer>'
    >>> for side in ("base", "tuned"):
    ...     ev[side]["task"]["kind"] = "movie"
    >>> answer_lines(1, ev)[0], answer_lines(1, {"base": {"task": {"kind": "summary"}}, "tuned": {}})
    ('seed 1: 1 questions; right 0 -> 1; right only after training 1, right only before 0', [])
    """
    tasks = [ev[side].get("task") or {} for side in ("base", "tuned")]
    if any(task.get("kind") not in ("accuracy", "movie") for task in tasks):
        return []
    base, tuned = ([int(hit) for hit in task["per_prompt"]] for task in tasks)
    fixed = sum(t > b for b, t in zip(base, tuned))
    broken = sum(b > t for b, t in zip(base, tuned))
    noun = "questions" if tasks[0]["kind"] == "movie" else "problems"
    lines = [f"seed {seed}: {len(base)} {noun}; right {sum(base)} -> {sum(tuned)}; right only after training "
             f"{fixed}, right only before {broken}"]
    for sample, b, t in zip(ev["samples"], base, tuned):
        lines.append(f"  {'+' if t > b else '-' if b > t else ' '} {sample['prompt']}")
        lines.append(f"     base  ({b}): {sample['base']!r}")
        lines.append(f"     tuned ({t}): {sample['tuned']!r}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--preset", default="default",
                    help=f"a preset: {', '.join(PRESET_ALIASES)} or a full name ({'; '.join(PRESETS)})")
    ap.add_argument("--eval-limit", type=int, default=32, help="held-out prompts to evaluate (the movies preset "
                    "holds out 50: use --eval-limit 49)")
    ap.add_argument("--answers", type=Path, help="also write every held-out answer, base -> tuned, to this file "
                    "(tasks with right answers: the arithmetic and movies presets)")
    ap.add_argument("--set", nargs="*", default=[], metavar="FIELD=JSON",
                    help="try a variant, e.g. --set learning_rate=5e-4 max_steps=18")
    a = ap.parse_args()
    overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in a.set)}
    ensure_bundled_model()  # converted once, before any timing (a fresh install pays ~30 s once)
    work = Path(scratch("bench-learning-"))
    cfg = bench_config(a.preset, overrides)
    name = "Default run" if a.preset == "default" else f"Preset '{PRESET_ALIASES.get(a.preset, a.preset)}'"
    print(f"{name}{' variant ' + str(overrides) if overrides else ''}: {cfg.model}, {cfg.dataset.source}, rewards "
          f"{', '.join(f'{r.name} x{r.weight:g}' for r in cfg.rewards)}, {cfg.max_steps} steps, G={cfg.num_generations}, "
          f"batch {cfg.batch_size}, lr {cfg.learning_rate:g}, max {cfg.max_completion_length} tokens", flush=True)
    results = []
    for seed in a.seeds:
        r = one_seed(seed, work, cfg, a.eval_limit)
        results.append(r)
        fmt = (f"format compliance {r['format_base']:.0%} -> {r['format_tuned']:.0%}; "
               if r["format_base"] is not None else "")
        invented = ("" if r["invented_base"] is None else
                    f"; answers with invented details {r['invented_base']:.0%} -> {r['invented_tuned']:.0%}")
        print(f"seed {seed}: {r['state']} in {r['train_wall_s']:.0f} s; held-out reward base {r['base']:.2f} -> tuned "
              f"{r['tuned']:.2f} (max {r['max']:.1f}), gap_closed {r['gap_closed']:.1%}; {fmt}{r['task_metric']} "
              f"{r['task_base']:.3f} -> {r['task_tuned']:.3f} on {r['eval_n']} held-out{invented}"
              f"{'' if r['recall'] is None else ' (retrieval recall %.3f)' % r['recall']}; train curve {r['curve_rise']:+.2f} "
              f"(noise {r['curve_noise']:.2f}){paired_text(r['paired'])}", flush=True)
    if a.answers and not any(r["answers"] for r in results):
        print(f"--answers: this task has no right answers to mark; {a.answers} not written", flush=True)
    elif a.answers:
        a.answers.write_text("\n".join(["Held-out answers, base -> tuned, greedy (bench/learning.py --answers; 1 = "
                                         "right, 0 = wrong, per pipeline.evaluate's accuracy).", ""]
                                        + [line for r in results for line in [*r["answers"], ""]]))
    keys = ["train_wall_s", "gap_closed", "task_base", "task_tuned"]
    keys += ["format_base", "format_tuned"] if all(r["format_base"] is not None for r in results) else []
    med = {k: statistics.median(r[k] for r in results) for k in keys}
    fmt = (f"format compliance {med['format_base']:.0%} -> {med['format_tuned']:.0%}, "
           if "format_base" in med else "")
    # Each seed holds out different prompts, so the seeds' bases differ: the median gain is of each seed's own gain.
    med["task_gain"] = statistics.median(r["task_tuned"] - r["task_base"] for r in results)
    print(f"median over {len(results)} seeds: {med['train_wall_s']:.0f} s, gap_closed {med['gap_closed']:.1%}, "
          f"{fmt}task metric {med['task_base']:.3f} -> {med['task_tuned']:.3f} (median of each seed's gain "
          f"{med['task_gain']:+.3f})")
    print("targets: <= 300 s, gap_closed >= 30%, task metric not below base, curve rise > noise"
          + (", format compliance >= 90%" if "format_base" in med else ""))
    save("learning" if a.preset == "default" else f"learning-{a.preset.split(':')[0].lower().replace(' ', '-')}",
         {"preset": a.preset, "overrides": overrides, "config": cfg.to_dict(), "results": results, "median": med})
    return 0


if __name__ == "__main__":
    sys.exit(main())
