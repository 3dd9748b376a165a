"""Start to first step, in a spare worker (libraries imported before Start) against a fresh process, alternated
(spare, fresh, spare, fresh, ...), through the runner as the app's Start goes.

Each round trains the default run's model and prompts for one step, with small settings so that the step itself
adds little noise (G=2, one prompt, 16 tokens, no probes, no merge). Measured from `runner.start` to the
first line of metrics.jsonl: what the page draws the first chart point from.
Before a spare round the spare has finished its imports, as it has when a user fills in the form; before a fresh
round no spare waits. Same environment, same threads, one job at a time. Reports each round, the medians and
the fresh/spare ratios.

    python bench/spare_start.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import save, scratch  # noqa: E402

SETTINGS = dict(num_generations=2, batch_size=2, max_completion_length=16, max_steps=1, probe_every=0,
                merge_at_end=False, save_steps=100)


def wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def one_round(arm: str) -> dict:
    from pipeline import runner, spare_worker
    from pipeline.run_folder import jobstate, runs
    from pipeline.setup.config import RunConfig

    if arm == "spare":
        runner.prepare_spare()
        wait(lambda: spare_worker.waiting() and spare_worker.waiting().ready(), 120, "a ready spare")
    else:
        spare_worker.let_go()
    t0 = time.time()
    run_dir = runner.start("train", cfg=RunConfig(**SETTINGS), label=f"bench-{arm}")
    launcher = runs.read_json(run_dir / "launcher.json") or {}
    wait(lambda: (run_dir / "metrics.jsonl").exists() and (run_dir / "metrics.jsonl").read_text().strip(), 600,
         "the first step")
    first_step = time.time() - t0
    wait(lambda: jobstate.read_status(run_dir).get("state") in ("finished", "failed", "stopped"), 600, "the end")
    wait(lambda: not runner.launcher_alive("train", run_dir), 120, "the process's exit")
    in_spare = "Started in a spare worker" in (run_dir / "stdout.log").read_text(errors="replace")
    if in_spare != (arm == "spare"):
        raise SystemExit(f"round {arm}: started in a spare: {in_spare} (pid {launcher.get('pid')})")
    return {"arm": arm, "first_step_s": round(first_step, 2), "state": jobstate.read_status(run_dir)["state"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each arm")
    args = parser.parse_args()
    os.environ["GRPO_STUDIO_DATA"] = os.environ.get("GRPO_STUDIO_DATA") or scratch("spare-start-")
    if os.environ["GRPO_STUDIO_DATA"] != str(ROOT / "data"):
        models = Path(os.environ["GRPO_STUDIO_DATA"]) / "models"
        if not models.exists() and (ROOT / "data" / "models").exists():
            os.symlink(ROOT / "data" / "models", models)
    os.environ.pop("GRPO_STUDIO_SPARE_WORKER", None)
    from pipeline import spare_worker

    one_round("fresh")  # a warm-up: the model's files in the page cache for both arms
    rows = []
    for i in range(args.rounds):
        for arm in ("spare", "fresh"):
            row = one_round(arm)
            rows.append(row)
            print(f"round {i + 1} {arm:>5}: first step at {row['first_step_s']} s ({row['state']})", flush=True)
    spare_worker.let_go()
    med = {arm: statistics.median(r["first_step_s"] for r in rows if r["arm"] == arm) for arm in ("spare", "fresh")}
    summary = {**med, "fresh/spare": round(med["fresh"] / med["spare"], 2),
               "saved_s": round(med["fresh"] - med["spare"], 1)}
    print(f"median Start to first step: spare {med['spare']:.1f} s, fresh {med['fresh']:.1f} s, "
          f"fresh/spare {summary['fresh/spare']}, saved {summary['saved_s']} s")
    save("spare_start", {"settings": SETTINGS, "rounds": rows, "summary": summary,
                         "threads": os.environ.get("OMP_NUM_THREADS")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
