"""What the held-out probes cost: seconds per probe against seconds per training step, same run.

    .venv/bin/python bench/probe_cost.py [--steps 4]

Runs `python -m pipeline.train` with the default config (Quick CPU demo: G=4, 48 completion tokens,
4 probe prompts) except probe_every=1, so probes and steps alternate and a slow patch of the machine
hits both alike. The first step is warm-up and left out. Prints the medians, the probe/step ratio and
what share of a default run (20 steps, probes at 0, 5, 10, 15, 20) the probes take; writes
bench/out/probe_cost.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.run_folder import runs  # noqa: E402
from pipeline.setup.config import RunConfig  # noqa: E402
from pipeline.training.probes import should_probe  # noqa: E402


def default_share(probe_s: float, step_s: float, cfg: RunConfig) -> float:
    """Share of a default run's time spent probing, from one probe's and one step's seconds."""
    n_probes = sum(should_probe(s, cfg.probe_every, cfg.max_steps) for s in range(cfg.max_steps + 1))
    return n_probes * probe_s / (cfg.max_steps * step_s + n_probes * probe_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "probe-cost"
        run_dir.mkdir()
        cfg = RunConfig(max_steps=args.steps, probe_every=1, save_steps=10_000, merge_at_end=False)
        runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
        subprocess.run([sys.executable, "-m", "pipeline.train", "--run-dir", str(run_dir)], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        steps = [r["step_seconds"] for r in runs.read_metrics(run_dir)][1:]  # step 1 is warm-up
        gens = [r["gen_seconds"] for r in runs.read_metrics(run_dir)][1:]
        probe_lines = runs.read_evals(run_dir)
    probes = [e["seconds"] for e in probe_lines]
    step_s, gen_s, probe_s = statistics.median(steps), statistics.median(gens), statistics.median(probes)
    result = {"steps_timed": len(steps), "step_seconds": steps, "gen_seconds": gens, "probe_seconds": probes,
              "median_step_s": step_s, "median_gen_s": gen_s, "median_probe_s": probe_s,
              "probe_over_step": probe_s / step_s, "probe_over_generation": probe_s / gen_s,
              "default_run_share": default_share(probe_s, step_s, RunConfig())}
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe_cost.json").write_text(json.dumps(result, indent=2))
    print(f"step {step_s:.1f} s (generation {gen_s:.1f} s), probe {probe_s:.1f} s (4 prompts, 48 tokens, greedy)")
    print(f"probe / step {result['probe_over_step']:.2f}, probe / step's generation "
          f"{result['probe_over_generation']:.2f}")
    print(f"share of a default 20-step run spent probing: {result['default_run_share']:.1%} (target <= 15%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
