"""The integration tests' fork server (tests/integration/forked.py) starts a job as a fresh `python -m` would: its
own process, arguments, environment, working folder, output and exit status, its own session when asked, signals
reaching it, and a fresh start when the test gives it an environment of its own."""

import json
import os
import signal
import subprocess
import sys

import pytest

from . import forked
from .helpers import ROOT, poll

pytestmark = pytest.mark.slow

PROBE = [sys.executable, "-m", "tests.integration.job_probe"]


def test_a_forked_job_runs_as_a_fresh_process_would(tmp_path):
    seen_file = tmp_path / "seen.json"
    done = forked.run([*PROBE, str(seen_file), "3", "0"], timeout=300, own_env={"JOB_PROBE_VAR": "mine"})
    assert (done.returncode, done.stdout, done.stderr) == (3, "to stdout\n", "to stderr\n")
    seen = json.loads(seen_file.read_text())
    assert seen["pid"] != os.getpid() and seen["cwd"] == str(ROOT) and seen["name"] == "__main__"
    assert seen["argv"] == [str(seen_file), "3", "0"] and seen["stdin"] == ""
    assert seen["var"] == "mine" and seen["test"] == os.environ["PYTEST_CURRENT_TEST"]
    # Forked, not started fresh: the training libraries were imported before the job began (unless forking is
    # turned off for this test session).
    assert seen["torch_loaded"] == forked.enabled()


def test_a_forked_job_in_its_own_session_takes_signals_and_reports_how_it_ended(tmp_path):
    log = tmp_path / "job.log"
    proc = forked.popen([*PROBE, str(tmp_path / "seen.json"), "0", "600"], stdout=str(log), stderr=str(log),
                        new_session=True)
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)
    assert poll(lambda: (tmp_path / "seen.json").exists(), timeout=60)
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["session"] == seen["pid"] == proc.pid != os.getsid(0)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL and proc.poll() == -signal.SIGKILL
    assert log.read_text() == "to stdout\nto stderr\n"


def test_an_environment_of_its_own_starts_fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if os.environ.get("HF_HUB_OFFLINE") != "1" else "0")
    proc = forked.popen([*PROBE, str(tmp_path / "seen.json"), "0", "0"])
    assert isinstance(proc, subprocess.Popen) and proc.wait(timeout=60) == 0
    assert not json.loads((tmp_path / "seen.json").read_text())["torch_loaded"]
