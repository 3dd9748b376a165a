"""Does the default run learn? Trains the default config (the Quick CPU demo) once per seed, then
scores base vs tuned on the held-out prompts, as a new user's first run would go.

    .venv/bin/python bench/learning.py [--seeds 1 2 3]

For each seed: wall time from launching `python -m pipeline.train` to its exit (imports, model load,
probes, training, adapter save and merge included), gap_closed and the task metric from
`pipeline.evaluate`, and whether the train reward curve rose: mean of the last 5 steps minus the
mean of the first 5, against the step-to-step noise (the pooled standard deviation of those two
windows). Prints a table with the median over seeds and writes bench/out/learning.json; commit the
printed output under bench/results/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import save  # noqa: E402
from pipeline import runs  # noqa: E402
from pipeline.config import RunConfig  # noqa: E402
from pipeline.models import ensure_bundled_model  # noqa: E402


def curve_rise(rewards: list[float], window: int = 5) -> tuple[float, float]:
    """(mean of the last `window` minus mean of the first `window`, pooled std of the two windows)."""
    first, last = rewards[:window], rewards[-window:]
    noise = ((statistics.pvariance(first) + statistics.pvariance(last)) / 2) ** 0.5
    return statistics.fmean(last) - statistics.fmean(first), noise


def one_seed(seed: int, work: Path, overrides: dict | None = None) -> dict:
    run_dir = work / f"seed-{seed}"
    run_dir.mkdir()
    cfg = RunConfig(**{**(overrides or {}), "seed": seed})
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "pipeline.train", "--run-dir", str(run_dir)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    train_s = time.time() - t0
    status = runs.read_status(run_dir)
    subprocess.run([sys.executable, "-m", "pipeline.evaluate", "--run-dir", str(run_dir)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ev = json.loads((run_dir / "eval.json").read_text())
    rewards = [r["reward"] for r in runs.read_metrics(run_dir)]
    rise, noise = curve_rise(rewards)
    task_key = "summary_score" if (ev["base"].get("task") or {}).get("kind") == "summary" else "accuracy"
    return {
        "seed": seed, "state": status.get("state"), "train_wall_s": round(train_s, 1), "steps": len(rewards),
        "base": ev["base"]["reward_mean"], "tuned": ev["tuned"]["reward_mean"], "max": ev["reward_max"],
        "gap_closed": ev["gap_closed"], "task_metric": task_key,
        "task_base": (ev["base"].get("task") or {}).get(task_key),
        "task_tuned": (ev["tuned"].get("task") or {}).get(task_key),
        "curve_rise": rise, "curve_noise": noise, "train_rewards": rewards,
        "samples": ev["samples"][:4], "run_dir": str(run_dir),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--set", nargs="*", default=[], metavar="FIELD=JSON",
                    help="try a variant of the default, e.g. --set learning_rate=5e-4 max_steps=18")
    a = ap.parse_args()
    overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in a.set)}
    ensure_bundled_model()  # converted once, before any timing (a fresh install pays ~30 s once)
    work = Path(tempfile.mkdtemp(prefix="bench-learning-"))
    cfg = RunConfig(**overrides)
    print(f"{'Variant ' + str(overrides) if overrides else 'Default run'}: {cfg.model}, {cfg.dataset.source}, rewards "
          f"{', '.join(f'{r.name} x{r.weight:g}' for r in cfg.rewards)}, {cfg.max_steps} steps, G={cfg.num_generations}, "
          f"batch {cfg.batch_size}, lr {cfg.learning_rate:g}, max {cfg.max_completion_length} tokens", flush=True)
    results = []
    for seed in a.seeds:
        r = one_seed(seed, work, overrides)
        results.append(r)
        print(f"seed {seed}: {r['state']} in {r['train_wall_s']:.0f} s; held-out reward base {r['base']:.1f} -> tuned "
              f"{r['tuned']:.1f} (max {r['max']:.0f}), gap_closed {r['gap_closed']:.1%}; {r['task_metric']} "
              f"{r['task_base']:.3f} -> {r['task_tuned']:.3f}; train curve +{r['curve_rise']:.1f} "
              f"(noise {r['curve_noise']:.1f})", flush=True)
    med = {k: statistics.median(r[k] for r in results) for k in ("train_wall_s", "gap_closed", "task_base",
                                                                   "task_tuned")}
    print(f"median over {len(results)} seeds: {med['train_wall_s']:.0f} s, gap_closed {med['gap_closed']:.1%}, "
          f"task metric {med['task_base']:.3f} -> {med['task_tuned']:.3f}")
    print("targets: <= 300 s, gap_closed >= 30%, task metric not below base, curve rise > noise")
    save("learning", {"config": cfg.to_dict(), "results": results, "median": med})
    return 0


if __name__ == "__main__":
    sys.exit(main())
