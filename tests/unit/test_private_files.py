"""What the app writes under its data folder is for the user it runs as: the folder is made 0700, and the
files and folders the app and its command-line entry points create have no group or other permissions."""

import ctypes
import os
import stat
import subprocess
import sys

import pytest

import app
from pipeline import runner
from pipeline.run_folder import paths, runs
from pipeline.setup.config import RunConfig

PR_GET_DUMPABLE = 3


@pytest.fixture
def as_the_app_starts(tmp_path, monkeypatch):
    """app.main as `python app.py` runs it (the server itself left out), in a fresh data folder; this test
    process's umask and dumpable flag are put back afterwards."""
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(app, "serve", lambda args: None)
    old = os.umask(0o022)  # a usual login umask: world-readable files unless the app says otherwise
    try:
        app.main([])
        yield tmp_path / "data"
    finally:
        os.umask(old)
        ctypes.CDLL(None).prctl(paths.PR_SET_DUMPABLE, 1, 0, 0, 0)


def others_bits(path) -> int:
    return stat.S_IMODE(path.stat().st_mode) & 0o077


def test_the_data_folder_a_run_and_an_upload_are_the_servers_users_only(as_the_app_starts, tmp_path, monkeypatch):
    from ui import uploads

    data = paths.data_dir()
    assert data == as_the_app_starts and stat.S_IMODE(data.stat().st_mode) == 0o700
    monkeypatch.setattr(runner, "_launch", lambda run_dir, cmd, nproc=1, **kw: None)
    run_dir = runner.start("train", cfg=RunConfig(), label="private")
    source = tmp_path / "prompts.csv"
    source.write_text("prompt\nhello\n")
    os.chmod(source, 0o644)
    copy = uploads.store_upload(str(source), [".csv"]).path
    made = [runs.runs_dir(), run_dir, run_dir / "config.json", copy.parent, copy]
    assert {str(p.relative_to(data)): oct(others_bits(p)) for p in made} == {
        str(p.relative_to(data)): "0o0" for p in made}


def test_the_data_folder_is_made_private_whatever_the_umask(tmp_path, monkeypatch):
    """A script or a test that never went through an entry point still gets a data folder of its own."""
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path / "fresh"))
    old = os.umask(0o022)
    try:
        data = paths.data_dir()
    finally:
        os.umask(old)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


def test_the_app_cannot_have_its_environment_read_by_other_processes_of_its_user(as_the_app_starts):
    # Not dumpable: /proc/<pid>/environ and its memory are closed to processes of the same user (custom
    # reward code among them). A process it starts is dumpable again, and sees only what it was given.
    assert ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def test_the_command_line_entry_points_keep_their_files_private():
    """Each sets the umask before anything else (here each then stops at its missing arguments)."""
    code = ("import importlib, os\n"
            "for module in ('pipeline.train', 'pipeline.evaluate', 'pipeline.export'):\n"
            "    os.umask(0o022)\n"
            "    try:\n"
            "        importlib.import_module(module).main([])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "    print(module, oct(os.umask(0o022)))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=runner.ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["pipeline.train", "0o77", "pipeline.evaluate", "0o77", "pipeline.export", "0o77"], (
        done.stdout, done.stderr[-500:])
