"""The app restarts while a run trains: the trainer keeps going in its own process group, the new app
finds it, its live view keeps moving and Stop still works."""

import os
import signal
import time

import pytest

from pipeline import runner, runs
from pipeline.config import RunConfig

from .helpers import QUICK, free_port, start_app_process

pytestmark = pytest.mark.slow


def html_of(output) -> str:
    """An HTML output as gradio_client returns it: the string, or an update dict carrying it."""
    return str(output.get("value", "")) if isinstance(output, dict) else str(output)


def step_of(progress_html) -> int:
    import re

    progress_html = html_of(progress_html)
    match = re.search(r"class='gs-step'>(\d+)</b>", progress_html)
    return int(match.group(1)) if match else 0


def test_app_restart_reattaches_to_a_training_run(bundled_model_dir, tmp_path):
    from gradio_client import Client

    first = start_app_process(free_port(), log_path=tmp_path / "app1.log")
    cfg = RunConfig(**{**QUICK, "max_steps": 40, "max_completion_length": 16})
    run_dir = runner.start_run(cfg, label="restart")  # what the Start button calls
    second = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not runs.read_metrics(run_dir):
            time.sleep(1)
        assert runs.read_metrics(run_dir), runs.log_tail(run_dir, 20)

        first.send_signal(signal.SIGKILL)  # the worst case: no clean shutdown
        first.wait(timeout=30)
        trainer_pid = runs.read_status(run_dir)["pid"]
        os.kill(trainer_pid, 0)  # still alive after the app died
        assert runs.read_status(run_dir)["state"] == "running"

        port = free_port()
        second = start_app_process(port, log_path=tmp_path / "app2.log")
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        selected, *_ = client.predict(None, api_name="/refresh_runs")  # what a page load does
        assert selected["value"] == run_dir.name  # the active run is picked again

        progress, *_ = client.predict(run_dir.name, 0, None, api_name="/refresh")
        assert "data-state='running'" in html_of(progress), progress
        before = step_of(progress)
        deadline = time.time() + 240
        later = before
        while time.time() < deadline and later <= before:
            time.sleep(2)
            progress, *_ = client.predict(run_dir.name, 0, None, api_name="/refresh")
            later = step_of(progress)
        assert later > before, "the live view did not move after the restart"

        message = client.predict(run_dir.name, api_name="/stop_training")
        assert "Stop requested" in message
        deadline = time.time() + 300
        while time.time() < deadline and runs.read_status(run_dir)["state"] == "running":
            time.sleep(1)
        assert runs.read_status(run_dir)["state"] == "stopped"
        assert (run_dir / "adapter" / "adapter_config.json").exists()
        progress, *_ = client.predict(run_dir.name, 0, None, api_name="/refresh")
        assert "data-state='stopped'" in html_of(progress), progress
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        active = runner.active_run()
        if active is not None:
            runner.stop_run(active, grace_s=120)
