"""GRPO Studio entry point.

The browser UI (Train, Chat and RAG tabs) is being built; until it lands this prints how to drive
the same pipeline from the command line, and the runs already on disk.
"""

from __future__ import annotations

import argparse
import sys

USAGE = """\
GRPO Studio - the web UI is not built yet. Train from the command line:

  # quick CPU demo: bundled SmolLM2-135M, TL;DR prompts, length + diversity rewards
  .venv/bin/python -m pipeline.train --run-dir data/runs/demo --steps 20

  # two CPU ranks (or N GPUs) with the same entry point
  .venv/bin/torchrun --nproc_per_node 2 -m pipeline.train --run-dir data/runs/demo2 --steps 4

  # stop with Ctrl-C / SIGTERM (adapter + checkpoint saved), then continue
  .venv/bin/python -m pipeline.train --run-dir data/runs/demo --resume

  # base vs tuned mean reward on held-out prompts
  .venv/bin/python -m pipeline.evaluate --run-dir data/runs/demo

Edit data/runs/<name>/config.json (written on the first run) to change model, data or rewards.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GRPO Studio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7860)
    parser.parse_args(argv)
    print(USAGE)
    from pipeline.runs import list_runs

    rows = list_runs()
    if rows:
        print("Runs on disk:")
        for r in rows:
            print(f"  {r['run']:<40} {r['state']:<9} step {r['step']}/{r['max_steps']}  reward {r['final_reward']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
