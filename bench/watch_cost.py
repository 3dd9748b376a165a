"""What watching a run costs: the same training with no page open and with the Train tab open in chromium.

    .venv/bin/python bench/watch_cost.py                 # real runs, interleaved: none, tab, settings, ...
    .venv/bin/python bench/watch_cost.py --rounds 2 --steps 3
    .venv/bin/python bench/watch_cost.py --idle 40       # no training: the page's own cost, 40 s a view
    .venv/bin/python bench/watch_cost.py --views walk --steps 16 --rounds 1   # the demo, Start -> finished
    .venv/bin/python bench/watch_cost.py --views tokens none --steps 11 --rounds 1 --steer-at 5
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python bench/watch_cost.py ...  # an AVX2-only CPU

Real runs: the default config (Quick CPU demo, seed 42) with --steps steps, started through the app's own
Start API on one data folder whose bundled model is already converted. The views alternate in each round:
  none      no page open (the reference)
  tab       headless chromium on the Train tab, opened once the run has started (the page load finds it)
  settings  the same, with "All settings" opened as a user does to set Steps
  walk      a new user: the page opened first, Steps typed into "All settings", Start clicked in the page
  tokens    walk, then the group inspector switched to its token view (Log-prob) for the whole run
--steer-at N: every view's run is steered once, after step N (the same change in each, so their runs stay the
same), through the request file the Train tab's steering panel writes.
For each it prints the median trainer step time and its ratio to `none` in the same round, Start ->
finished, and the CPU share (of one core) of the chromium renderer, the rest of chromium and the app
process while the run trained, plus Chrome DevTools' Performance counters per second.

--idle: no trainer; this process stands in for one (the run reads as running, a metrics line and a log
line land every 20 s, and with --chatty-log the log also grows twice a second), so the page's own cost is
measured without a training in the way. Views: tab, settings, and hidden (the page on the Chat tab).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from report import save, scratch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
CDP_KEYS = ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration", "LayoutCount",
            "RecalcStyleCount")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(env: dict, log: Path) -> tuple[subprocess.Popen, str]:
    import urllib.request

    port = free_port()
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(240):
        try:
            urllib.request.urlopen(url, timeout=2)
            return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the app exited: see {log}")
            time.sleep(0.5)
    raise RuntimeError("the app did not start")


class CpuMeter:
    """CPU seconds used by groups of processes between start() and stop(), sampled every second (processes
    that come and go in between are counted from their first sample)."""

    def __init__(self, groups: dict[str, callable]):
        self.groups = groups  # name -> function returning the current list of psutil.Process
        self.seen: dict[int, tuple[str, float, float]] = {}  # pid -> (group, first cpu, last cpu)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        for name, find in self.groups.items():
            for proc in find():
                try:
                    t = proc.cpu_times()
                    used = t.user + t.system
                except psutil.Error:
                    continue
                group, first, _ = self.seen.get(proc.pid, (name, used, used))
                self.seen[proc.pid] = (group, first, used)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self._sample()

    def start(self) -> None:
        self.t0 = time.time()
        self._sample()
        self._thread.start()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self._sample()
        wall = time.time() - self.t0
        share = {name: 0.0 for name in self.groups}
        for group, first, last in self.seen.values():
            share[group] += (last - first) / wall
        return {name: round(100 * v, 1) for name, v in share.items()}


def chromium_processes(renderer: bool):
    def find():
        out = []
        for proc in psutil.process_iter(["name", "cmdline"]):
            cmd = " ".join(proc.info.get("cmdline") or [])
            if "chrom" not in (proc.info.get("name") or "") and "chromium" not in cmd:
                continue
            if ("--type=renderer" in cmd) == renderer:
                out.append(proc)
        return out
    return find


def open_page(browser, url: str, view: str):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(url)
    page.wait_for_selector("#progress .gs-progress, #progress .gs-empty", timeout=120_000)
    if view == "settings":
        sys.path.insert(0, str(ROOT))
        from tests.browser.conftest import open_settings

        open_settings(page)
    elif view == "hidden":
        page.get_by_role("tab", name="Chat").click()
        expect(page.get_by_role("tab", name="Chat")).to_have_attribute("aria-selected", "true")
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    return page, cdp


def cdp_metrics(cdp) -> dict[str, float]:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] in CDP_KEYS}


def cdp_rates(before: dict, after: dict, seconds: float) -> dict[str, float]:
    """Per second of wall time: seconds of main-thread work (durations) or counts."""
    return {k: round((after.get(k, 0) - before.get(k, 0)) / seconds, 4) for k in CDP_KEYS}


# ---- real runs ---------------------------------------------------------------------------------------------


def one_run(view: str, steps: int, data: Path, env: dict, browser, steer_at: int = 0, steer: dict | None = None) -> dict:
    from gradio_client import Client

    from pipeline.run_folder import run_files, runs
    from pipeline.setup.config import RunConfig
    from tests.integration.helpers import start_inputs

    app, url = start_app(env, data / "app.log")
    page = cdp = trainer = None
    try:
        runs.runs_dir().mkdir(parents=True, exist_ok=True)
        before_runs = set(runs.iter_run_dirs())
        if view in ("walk", "tokens"):  # a new user: the page first, Steps typed into All settings, Start clicked
            from tests.browser.conftest import fill_settings

            page, cdp = open_page(browser, url, "tab")
            if steps != RunConfig().max_steps:  # the default run needs no setting changed
                fill_settings(page, {"Steps": str(steps)})
            t_start = time.time()
            page.locator("#start-btn").click()
            page.wait_for_selector("#train-message:has-text('Started')", timeout=60_000)
            run_dir = next(iter(set(runs.iter_run_dirs()) - before_runs))
            if view == "tokens":
                page.locator("#token-mode").get_by_text("Log-prob", exact=True).click()
        else:
            client = Client(url, verbose=False)
            cfg = RunConfig(max_steps=steps)  # the default: Quick CPU demo, seed 42
            t_start = time.time()
            picked, message = client.predict(*start_inputs(cfg), api_name="/start_training")
            assert "Started" in message, message
            run_dir = runs.runs_dir() / (picked["value"] if isinstance(picked, dict) else picked)
        status = {}
        for _ in range(100):
            status = runs.read_status(run_dir)
            if status.get("pid"):
                break
            time.sleep(0.2)
        trainer = psutil.Process(status["pid"])
        meter = CpuMeter({
            "renderer": chromium_processes(True), "chromium other": chromium_processes(False),
            "app": lambda: [psutil.Process(app.pid)],
            "trainer": lambda: [trainer] + trainer.children(recursive=True) if trainer.is_running() else [],
        })
        if view not in ("none", "walk", "tokens"):
            page, cdp = open_page(browser, url, view)
        meter.start()
        before, t_cdp = (cdp_metrics(cdp), time.time()) if cdp else ({}, 0)
        steered = None
        while runs.read_status(run_dir).get("state") in runs.ACTIVE_STATES:
            if steer_at and steered is None and len(runs.read_metrics(run_dir)) >= steer_at:
                from pipeline.setup import steering

                steered = steering.request(run_dir, steer)["id"]
            time.sleep(0.5)
        t_end = time.time()
        rates = cdp_rates(before, cdp_metrics(cdp), t_end - t_cdp) if cdp else {}
        cpu = meter.stop()
        metrics = runs.read_metrics(run_dir)
        status = runs.read_status(run_dir)
        if page is not None:
            page.close()
        return {"view": view, "run": run_dir.name, "state": status.get("state"),
                "step_seconds": [m.get("step_seconds") for m in metrics],
                "start_to_finished_s": round(t_end - t_start, 1), "cpu_percent": cpu, "cdp_per_s": rates,
                "probe_rewards": [e.get("reward") for e in runs.read_evals(run_dir)],
                "steering": runs.read_jsonl(run_dir / run_files.STEERING) if steered else []}
    finally:
        app.terminate()
        app.wait(timeout=30)
        if trainer is not None and trainer.is_running():  # a bench that failed must not leave a run training
            os.killpg(trainer.pid, 9)


def real_runs(args) -> dict:
    data = Path(scratch("bench-watch-"))
    env = dict(os.environ, GRPO_STUDIO_DATA=str(data))
    os.environ["GRPO_STUDIO_DATA"] = str(data)
    from pipeline.models.loading import ensure_bundled_model

    ensure_bundled_model()  # converted once, before any timing
    views = args.views
    results = []
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        for r in range(args.rounds):
            for view in views:
                res = one_run(view, args.steps, data, env, browser, args.steer_at, json.loads(args.steer))
                res["round"] = r
                results.append(res)
                print(json.dumps(res), flush=True)
        browser.close()
    print()
    print(f"{'round':>5} {'view':>9} {'step s (median)':>16} {'vs none':>8} {'Start->end s':>13} "
          f"{'renderer %':>10} {'chromium %':>10} {'app %':>6} {'trainer %':>9}")
    ratios: dict[str, list[float]] = {}
    for r in range(args.rounds):
        rows = [x for x in results if x["round"] == r]
        none = [x for x in rows if x["view"] == "none"]
        ref = statistics.median(none[0]["step_seconds"]) if none else float("nan")
        for x in rows:
            med = statistics.median(x["step_seconds"])
            ratios.setdefault(x["view"], []).append(med / ref)
            c = x["cpu_percent"]
            print(f"{r:>5} {x['view']:>9} {med:16.1f} {med / ref:8.2f} {x['start_to_finished_s']:13.0f} "
                  f"{c['renderer']:10.1f} {c['chromium other']:10.1f} {c['app']:6.1f} {c['trainer']:9.1f}")
    print()
    for view, rs in ratios.items():
        if view != "none":
            print(f"{view}: median step-time ratio vs no page {statistics.median(rs):.2f} (target <= 1.1); "
                  f"renderer {statistics.median(x['cpu_percent']['renderer'] for x in results if x['view'] == view):.1f}% "
                  f"and app {statistics.median(x['cpu_percent']['app'] for x in results if x['view'] == view):.1f}% "
                  "of a core (target <= 10% each)")
    return {"mode": "runs", "steps": args.steps, "rounds": args.rounds, "results": results}


# ---- the page alone ----------------------------------------------------------------------------------------


def idle(args) -> dict:
    data = Path(scratch("bench-watch-idle-"))
    env = dict(os.environ, GRPO_STUDIO_DATA=str(data))
    os.environ["GRPO_STUDIO_DATA"] = str(data)
    from pipeline.run_folder import runs
    from pipeline.setup.config import RunConfig

    run_dir = runs.new_run_dir("watch")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=1000).to_dict())
    runs.write_status(run_dir, "running", pid=os.getpid(), pid_create_time=runs.process_create_time(os.getpid()),
                      started_at=time.time())
    stop = threading.Event()

    def fake_trainer():
        step, last = 0, 0.0
        with open(run_dir / "train.log", "a") as log:
            while not stop.wait(0.5):
                if args.chatty_log:  # a reward that warns on every call: a log line twice a second
                    log.write(f"{time.strftime('%H:%M:%S')} WARNING reward: slow call {time.time():.3f}\n")
                    log.flush()
                if time.time() - last > 20:
                    step, last = step + 1, time.time()
                    runs.append_jsonl(run_dir / "metrics.jsonl", {
                        "step": step, "max_steps": 1000, "reward": -1.0 + 0.1 * step, "reward_std": 0.3,
                        "rewards": {"length_target": {"mean": -1.0}}, "kl": 0.001 * step, "loss": 0.01,
                        "entropy": 2.0, "completion_length": 40.0, "step_seconds": 20.0, "elapsed": 20.0 * step,
                        "eta_seconds": 100.0, "time": time.time()})
                    log.write(f"{time.strftime('%H:%M:%S')} INFO step {step} done\n")
                    log.flush()

    writer = threading.Thread(target=fake_trainer, daemon=True)
    writer.start()
    app, url = start_app(env, data / "app.log")
    results = []
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
            for view in args.views:
                page, cdp = open_page(browser, url, view)
                time.sleep(5)  # page load settles
                meter = CpuMeter({"renderer": chromium_processes(True), "chromium other": chromium_processes(False),
                                  "app": lambda: [psutil.Process(app.pid)]})
                meter.start()
                before, t0 = cdp_metrics(cdp), time.time()
                time.sleep(args.idle)
                rates = cdp_rates(before, cdp_metrics(cdp), time.time() - t0)
                res = {"view": view, "cpu_percent": meter.stop(), "cdp_per_s": rates}
                results.append(res)
                print(json.dumps(res), flush=True)
                page.close()
            browser.close()
    finally:
        stop.set()
        app.terminate()
    print(f"\n{'view':>9} {'renderer %':>10} {'chromium %':>10} {'app %':>6}  main-thread s/s: task script layout style")
    for x in results:
        c, d = x["cpu_percent"], x["cdp_per_s"]
        print(f"{x['view']:>9} {c['renderer']:10.1f} {c['chromium other']:10.1f} {c['app']:6.1f}  "
              f"{d.get('TaskDuration', 0):.3f} {d.get('ScriptDuration', 0):.3f} {d.get('LayoutDuration', 0):.3f} "
              f"{d.get('RecalcStyleDuration', 0):.3f}")
    return {"mode": "idle", "seconds": args.idle, "results": results}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--views", nargs="+", default=None)
    ap.add_argument("--idle", type=float, default=0, help="seconds per view for the page-only measurement")
    ap.add_argument("--chatty-log", action="store_true", help="--idle: the log also grows twice a second")
    ap.add_argument("--tag", default="")
    ap.add_argument("--steer-at", type=int, default=0, help="steer every run once after this step (0: never)")
    ap.add_argument("--steer", default='{"weights": {"token_diversity": 0.5}}',
                    help="the change --steer-at makes, as the steering request file holds it (JSON)")
    args = ap.parse_args()
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()}, "
          f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '-')}", flush=True)
    if args.idle:
        args.views = args.views or ["tab", "settings", "hidden"]
        out = idle(args)
    else:
        args.views = args.views or ["none", "tab", "settings"]
        out = real_runs(args)
    save("watch_cost" + (f"-{args.tag}" if args.tag else ""), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
