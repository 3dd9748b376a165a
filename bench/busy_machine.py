"""Seconds per step of the default CPU run under different ways for its threads to wait for each other, on a
quiet machine and beside other work.

    .venv/bin/python bench/busy_machine.py [--steps 5] [--rounds 1] [--load 0 100] [--sides libgomp spin30k]

Each round, for each load, runs `python -m pipeline.train` on the Quick CPU demo (probes off, no checkpoints, no
merge) once per side, one after the other, with the same config, seed and thread count (OMP_NUM_THREADS = the
cores). A side is how a thread that reaches a barrier waits for its team in libgomp, the OpenMP of torch's CPU
wheels (SIDES): libgomp's default spins about 300,000 times and then sleeps (the trainer keeps it); PASSIVE
sleeps at once; spin30k spins a tenth as long. When another process holds a core, a spinning thread burns the
slice its partner needs. The load is a separate process (report.burn), busy for the given share of every 20 ms
(100 = one core always busy, like a second job; 15-40 is about what a browser watching the run takes). A step's
time is the wall time between consecutive logged steps; the first step is left out. Prints each side's median
step and its ratio to the first side per load (below 1: faster).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import burn, save, scratch  # noqa: E402
from pipeline.run_folder import runs  # noqa: E402
from pipeline.setup.config import RunConfig  # noqa: E402

# How a thread that reaches a barrier waits for its team (libgomp, the OpenMP torch's CPU wheels use).
SIDES = {
    "libgomp": {"GOMP_SPINCOUNT": "300000"},  # libgomp's own default: spin about 300,000 times, then sleep
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},  # sleep at once
    "spin30k": {"GOMP_SPINCOUNT": "30000"},  # a tenth as long, then sleep
}


def step_seconds(run_dir: Path) -> list[float]:
    times = [r["time"] for r in runs.read_metrics(run_dir)]
    return [b - a for a, b in zip(times, times[1:])]


def one_run(cfg: RunConfig, work: Path, name: str, env: dict) -> list[float]:
    run_dir = work / name
    run_dir.mkdir()
    runs.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    subprocess.run([sys.executable, "-m", "pipeline.train", "--run-dir", str(run_dir)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return step_seconds(run_dir)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--load", type=float, nargs="+", default=[0, 100], help="background load, %% of one core")
    ap.add_argument("--sides", nargs="+", choices=list(SIDES), default=["libgomp", "spin30k"],
                    help="the waiting behaviours to compare; the first is the reference")
    a = ap.parse_args()

    cores = os.cpu_count() or 1
    cfg = RunConfig(max_steps=a.steps, save_steps=10_000, merge_at_end=False, probe_every=0)
    work = Path(scratch("bench-busy-"))
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    base.update(OMP_NUM_THREADS=str(cores), TOKENIZERS_PARALLELISM="false", GRPO_STUDIO_DATA=str(work / "data"))
    print(f"cores {cores}, load average {os.getloadavg()}, {a.steps} steps a run, first left out", flush=True)
    results: dict[float, dict[str, list[float]]] = {load: {side: [] for side in a.sides} for load in a.load}
    for r in range(a.rounds):
        for load in a.load:
            stop = mp.Event()
            burner = mp.Process(target=burn, args=(load / 100, stop), daemon=True) if load > 0 else None
            if burner:
                burner.start()
            try:
                for side in a.sides:
                    t0 = time.time()
                    steps = one_run(cfg, work, f"r{r}-load{load:g}-{side}", {**base, **SIDES[side]})
                    results[load][side] += steps
                    print(f"round {r + 1} load {load:g}%  {side:10} median step {statistics.median(steps):6.2f} s "
                          f"(steps {', '.join(f'{s:.1f}' for s in steps)}; run {time.time() - t0:.0f} s)", flush=True)
            finally:
                stop.set()
                if burner:
                    burner.join()

    ref = a.sides[0]
    print(f"\n{'load %':>7}" + "".join(f"{side + ' s':>14}" for side in a.sides)
          + "".join(f"{side + ' / ' + ref:>20}" for side in a.sides[1:]) + "   (median seconds per step)")
    summary = {}
    for load, sides in results.items():
        med = {side: statistics.median(v) for side, v in sides.items()}
        summary[f"{load:g}"] = {"median_s": med, "ratio_to_" + ref: {s: med[s] / med[ref] for s in a.sides[1:]}}
        print(f"{load:7g}" + "".join(f"{med[s]:14.2f}" for s in a.sides)
              + "".join(f"{med[s] / med[ref]:20.2f}" for s in a.sides[1:]))
    save("busy_machine", {"cores": cores, "steps": a.steps, "rounds": a.rounds, "steps_seconds": {
        f"{load:g}": sides for load, sides in results.items()}, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
