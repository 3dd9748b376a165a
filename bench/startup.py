"""App start-up time against a bare Gradio app, alternated (app, bare, app, bare, ...).

Both are measured the same way: from process start to the first page served (GET / answers 200), each in a
fresh process with the same environment and thread settings, on a fresh data folder. The bare app has the
same four tabs and a few dozen components (the issue's reference: a page a user would call "a Gradio app"),
and no handlers. Reported: each round's seconds, the median and best of each, and app/bare ratios.

    python bench/startup.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from report import save  # noqa: E402

BARE_APP = r'''
import sys
import gradio as gr

with gr.Blocks(title="bare") as demo:
    gr.Markdown("# Bare app")
    with gr.Tabs():
        with gr.Tab("Train"):
            with gr.Row():
                with gr.Column():
                    gr.Dropdown(["a", "b"], label="Model")
                    gr.Radio(["x", "y"], label="Prompts")
                    gr.Dataframe([[True, "r", 1.0, ""]], headers=["use", "reward", "weight", "params"])
                    for i in range(12):
                        gr.Number(i, label=f"field {i}")
                    gr.Button("Start")
                with gr.Column():
                    gr.HTML("progress")
                    for i in range(4):
                        gr.LinePlot(None, x="step", y="value", title=f"chart {i}")
                    gr.Slider(0, 1, label="Step")
                    gr.Textbox(label="Log", lines=8)
        with gr.Tab("Reward bench"):
            gr.Textbox(label="Completion", lines=4)
            gr.Button("Score")
            gr.Markdown()
        with gr.Tab("Chat"):
            gr.Dropdown(["a"], label="Model A")
            gr.Chatbot(label="A")
            gr.Textbox(label="Message")
            gr.Button("Send")
        with gr.Tab("RAG"):
            gr.Textbox(label="Question")
            gr.Number(1900, label="From year")
            gr.Number(2024, label="To year")
            gr.CheckboxGroup(["Drama", "Comedy"], label="Genres")
            gr.Button("Search")
            gr.HTML()
demo.launch(server_name="127.0.0.1", server_port=int(sys.argv[1]), quiet=True)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_to_first_page(cmd: list[str], port: int, env: dict, timeout_s: float = 180.0) -> float:
    """Seconds from process start until GET / answers 200; the process is ended afterwards."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        while time.perf_counter() - start < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[1]} exited with {proc.returncode} before serving a page")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as resp:
                    if resp.status == 200:
                        return time.perf_counter() - start
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{cmd[1]} served no page within {timeout_s:.0f} s")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="startup-bench-"))
    bare = tmp / "bare_app.py"
    bare.write_text(BARE_APP)
    env = dict(os.environ, GRPO_STUDIO_DATA=str(tmp / "data"), GRADIO_ANALYTICS_ENABLED="False",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"), PYTHONDONTWRITEBYTECODE="1")
    times: dict[str, list[float]] = {"app": [], "bare": []}
    # One unmeasured start of each first: the first start after an install compiles bytecode and fills
    # the page cache, for both.
    for name in ("app", "bare"):
        port = free_port()
        cmd = [sys.executable, "app.py", "--port", str(port)] if name == "app" else [sys.executable, str(bare), str(port)]
        time_to_first_page(cmd, port, env)
    for r in range(args.rounds):
        for name in (("app", "bare") if r % 2 == 0 else ("bare", "app")):
            port = free_port()
            cmd = ([sys.executable, "app.py", "--port", str(port)] if name == "app"
                   else [sys.executable, str(bare), str(port)])
            times[name].append(time_to_first_page(cmd, port, env))
        print(f"round {r + 1}: app {times['app'][-1]:.2f} s, bare {times['bare'][-1]:.2f} s, "
              f"ratio {times['app'][-1] / times['bare'][-1]:.2f}", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    result = {"rounds": args.rounds, "seconds": times, "median": med, "best": best,
              "ratio_median": med["app"] / med["bare"], "ratio_best": best["app"] / best["bare"],
              "cpus": os.cpu_count()}
    print(f"median: app {med['app']:.2f} s, bare {med['bare']:.2f} s, ratio {result['ratio_median']:.2f}")
    print(f"best:   app {best['app']:.2f} s, bare {best['bare']:.2f} s, ratio {result['ratio_best']:.2f}")
    print(f"saved {save('startup', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
