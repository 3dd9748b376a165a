"""Latency from a step's line landing in metrics.jsonl to the Train tab showing it (target <= 2 s).

    .venv/bin/python bench/chart_latency.py [--samples 12]

Measured in one run, in headless Debian chromium, for:
  app        GRPO Studio's Train tab (a 1 s poll of the run files' stamps; redraws the parts that changed)
  reference  a bare Gradio page whose 1 s gr.Timer only reads the file's last line into an HTML box
The reference is the floor that polling itself sets; the ratio shows what the app adds on top.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from report import p50_p95, save, scratch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REFERENCE_APP = r'''
import json, sys, gradio as gr
path = sys.argv[1]
def last_step():
    lines = [l for l in open(path).read().splitlines() if l.strip()]
    return f"<span id='ref-step'>{json.loads(lines[-1])['step'] if lines else 0}</span>"
with gr.Blocks() as demo:
    box = gr.HTML(elem_id="ref")
    gr.Timer(1.0).tick(last_step, None, box, show_progress="hidden")
demo.launch(server_port=int(sys.argv[2]))
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port: int, proc: subprocess.Popen) -> None:
    import urllib.request

    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("server exited")
            time.sleep(0.5)
    raise RuntimeError("server did not start")


def metric_line(step: int) -> dict:
    return {"step": step, "max_steps": 1000, "reward": -50.0 + step, "reward_std": 5.0, "kl": 0.001 * step,
            "loss": 0.01, "entropy": 2.0, "completion_length": 40.0, "clipped_ratio": 0.0,
            "rewards": {"length_target": {"mean": -60.0 + step}}, "elapsed": step * 10.0, "eta_seconds": 100.0,
            "time": time.time()}


def measure(page, metrics: Path, selector: str, start_step: int, samples: int) -> list[float]:
    from pipeline.run_folder.runs import append_jsonl

    out = []
    for k in range(start_step, start_step + samples):
        time.sleep(0.37 * (k % 3))  # spread the writes over the timer phase
        append_jsonl(metrics, metric_line(k))
        t0 = time.time()
        page.wait_for_function(f"() => (document.querySelector({selector!r}) || {{}}).textContent === '{k}'",
                               timeout=20_000, polling=20)
        out.append(time.time() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=12)
    a = ap.parse_args()
    data = Path(scratch("bench-chart-"))
    env = dict(os.environ, GRPO_STUDIO_DATA=str(data))
    os.environ["GRPO_STUDIO_DATA"] = str(data)
    from pipeline.run_folder import runs
    from pipeline.setup.config import RunConfig

    run_dir = runs.new_run_dir("latency")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=1000).to_dict())
    # This process stands in for the trainer: alive, so the run reads as running.
    runs.write_status(run_dir, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()),
                      started_at=time.time())
    metrics = run_dir / "metrics.jsonl"
    runs.append_jsonl(metrics, metric_line(1))

    app_port, ref_port = free_port(), free_port()
    app = subprocess.Popen([sys.executable, "app.py", "--port", str(app_port)], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ref = subprocess.Popen([sys.executable, "-c", REFERENCE_APP, str(metrics), str(ref_port)], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(app_port, app)
        wait_http(ref_port, ref)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
            app_page = browser.new_page()
            app_page.goto(f"http://127.0.0.1:{app_port}/")
            app_page.wait_for_selector("#progress .gs-step", timeout=60_000)
            ref_page = browser.new_page()
            ref_page.goto(f"http://127.0.0.1:{ref_port}/")
            ref_page.wait_for_selector("#ref-step", timeout=60_000)
            app_lat = measure(app_page, metrics, "#progress .gs-step", 2, a.samples)
            ref_lat = measure(ref_page, metrics, "#ref-step", 2 + a.samples, a.samples)
            browser.close()
    finally:
        app.terminate()
        ref.terminate()
    (a50, a95), (r50, r95) = p50_p95(app_lat), p50_p95(ref_lat)
    print(f"metrics.jsonl line -> visible in the browser ({a.samples} samples each, 1 s timers)")
    print(f"{'':12}{'p50 s':>8}{'p95 s':>8}{'max s':>8}")
    print(f"{'app':12}{a50:8.2f}{a95:8.2f}{max(app_lat):8.2f}")
    print(f"{'reference':12}{r50:8.2f}{r95:8.2f}{max(ref_lat):8.2f}")
    print(f"ratio app/reference p50 {a50 / r50:.2f}, p95 {a95 / r95:.2f}; target: app max <= 2 s -> "
          f"{'met' if max(app_lat) <= 2 else 'NOT met'}")
    save("chart_latency", {"app": app_lat, "reference": ref_lat})
    return 0


if __name__ == "__main__":
    sys.exit(main())
