"""The app dies while a run trains: the trainer, started with the app's Start button, keeps going in a
session of its own; a new app finds the run, its live view keeps moving, and Stop through the new app
leaves a complete checkpoint at the stop step and no process behind."""

import os
import re
import signal
import time

import pytest

from pipeline.run_folder import runs
from pipeline.setup.config import RunConfig

from .helpers import QUICK, free_port, start_app_process, start_inputs, tiny_settings, value_of, wait_for

pytestmark = pytest.mark.slow


def step_of(progress_html) -> int:
    match = re.search(r"class='gs-step'>(\d+)</b>", str(value_of(progress_html)))
    return int(match.group(1)) if match else 0


def process_alive(pid: int, create_time: float | None) -> bool:
    """The process exists, is not a zombie, and is the one that was started (not a recycled pid)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and (
            create_time is None or abs(proc.create_time() - create_time) < 1.0)
    except psutil.Error:
        return False


def test_app_killed_with_its_process_group_the_trainer_survives(tiny_model_dir, tmp_path):
    from gradio_client import Client

    # The two-layer model, typed as a local folder, probes off and short completions: this test is about
    # processes. Its steps take a fraction of a second, so the run is planned far longer than the test lasts.
    cfg = RunConfig(**{**QUICK, **tiny_settings(tiny_model_dir), "max_steps": 5000, "save_steps": 10000,
                       "max_completion_length": 16, "probe_every": 0})
    assert cfg.save_steps > cfg.max_steps  # so the only checkpoint is the one Stop writes

    # The first app leads its own process group, as `make run` does in a terminal.
    port = free_port()
    first = start_app_process(port, log_path=tmp_path / "app1.log", own_group=True)
    second = run_dir = None
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/start_training"]
        inputs = start_inputs(cfg)
        assert len(inputs) == len(api["parameters"]), [p["label"] for p in api["parameters"]]
        picked, message = client.predict(*inputs, api_name="/start_training")
        assert "Started" in message, message
        run_dir = runs.runs_dir() / value_of(picked)
        written = runs.read_json(run_dir / "config.json")
        assert (written["max_steps"], written["model"]) == (5000, str(tiny_model_dir))  # the form reached the run

        wait_for(lambda: runs.read_metrics(run_dir) or runs.read_status(run_dir)["state"] not in runs.ACTIVE_STATES,
                 600, "the first step")
        assert runs.read_metrics(run_dir), runs.log_tail(run_dir, 20)
        status = runs.read_status(run_dir)
        trainer_pid, created = status["pid"], status["pid_create_time"]
        assert runs.launcher(run_dir)["pid"] == trainer_pid  # one process: the app launched the trainer itself

        # The worst case: SIGKILL to the app's whole process group (what a terminal's Ctrl-C or hang-up
        # reaches, with a signal that cannot be handled). Only the trainer's own session keeps it out of it.
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        time.sleep(1)  # let a process killed with the group be gone for good
        assert process_alive(trainer_pid, created), (
            f"the trainer (pid {trainer_pid}) died with the app's process group: {runs.read_status(run_dir)}")
        assert runs.read_status(run_dir)["state"] == "running"

        port = free_port()
        second = start_app_process(port, log_path=tmp_path / "app2.log")
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        selected, *_ = client.predict(None, api_name="/refresh_runs")  # what a page load does
        assert value_of(selected) == run_dir.name  # the active run is picked again

        progress, *_ = client.predict(run_dir.name, 0, api_name="/refresh")
        assert "data-state='running'" in str(value_of(progress)), progress
        before = later = step_of(progress)
        deadline = time.time() + 600
        while time.time() < deadline and later <= before:
            time.sleep(2)
            progress, *_ = client.predict(run_dir.name, 0, api_name="/refresh")
            later = step_of(progress)
        assert later > before, "the live view did not move after the restart"

        message = client.predict(run_dir.name, api_name="/stop_training")
        assert "Stop requested" in message, message
        wait_for(lambda: runs.read_status(run_dir)["state"] not in runs.ACTIVE_STATES, 600, "the stop")
        status = runs.read_status(run_dir)
        assert status["state"] == "stopped", status
        progress, *_ = client.predict(run_dir.name, 0, api_name="/refresh")
        assert "data-state='stopped'" in str(value_of(progress)), progress

        # Stop saved a complete, resumable checkpoint at the step it stopped on, besides the adapter.
        stop_step = status["step"]
        assert later <= stop_step < cfg.max_steps
        assert runs.read_metrics(run_dir)[-1]["step"] == stop_step
        complete = runs.checkpoints(run_dir)
        assert [p.name for p in complete] == [f"checkpoint-{stop_step}"], (
            sorted(p.name for p in run_dir.iterdir()))
        assert runs.read_json(complete[0] / "trainer_state.json")["global_step"] == stop_step
        assert (run_dir / "adapter" / "adapter_config.json").exists()

        # And nothing is left running: the trainer exits once it has saved.
        wait_for(lambda: not process_alive(trainer_pid, created), 120, "the trainer to exit")
        assert not runs.launcher_alive(run_dir)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        if run_dir is not None and runs.read_status(run_dir)["state"] in runs.ACTIVE_STATES:
            from pipeline import runner

            runner.stop("train", run_dir, grace_s=300)
