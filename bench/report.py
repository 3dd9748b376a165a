"""Small helpers shared by the benchmarks: percentiles, the JSON written under bench/out/, scratch folders, and a
background load that keeps a share of one core busy (burn)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


def p50_p95(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def save(name: str, data: dict) -> Path:
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def scratch(prefix: str) -> str:
    """A temporary folder that is deleted when the benchmark exits (BENCH_KEEP=1 keeps it to look at).

    Every run a benchmark starts writes a merged model (about 0.5 GB for the bundled one), so leaving them behind
    fills a disk within a day of measuring.
    """
    path = tempfile.mkdtemp(prefix=prefix)
    if os.environ.get("BENCH_KEEP") != "1":
        atexit.register(shutil.rmtree, path, True)
    return path


def burn(share: float, stop) -> None:
    """Busy for `share` of every 20 ms, asleep for the rest: bursts like a page's redraws."""
    period = 0.02
    while not stop.is_set():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < share * period:
            pass
        time.sleep(max(0.0, period * (1 - share)))
