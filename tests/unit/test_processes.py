"""Ending processes for good: a whole tree, and a child that ignores SIGTERM."""

import subprocess
import sys
import time

import psutil

from pipeline.run_folder.processes import end_processes, end_tree

# A parent that starts a grandchild and waits: the tree end_tree must take down whole.
TREE = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']).wait()"
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"


def test_end_tree_takes_down_the_process_and_its_descendants():
    parent = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    root = psutil.Process(parent.pid)
    deadline = time.time() + 30
    while not root.children(recursive=True):
        assert time.time() < deadline, "the grandchild never started"
    tree = [root, *root.children(recursive=True)]
    ended = end_tree(parent.pid)
    parent.wait(10)
    assert len(ended) == 2 and all(f"(pid {p.pid})" in " ".join(ended) for p in tree)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree)


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace():
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"  # its SIGTERM handler is in place
    target = psutil.Process(proc.pid)
    end_processes([target], grace_s=0.5)
    # psutil reaps it (so Popen can't read its exit code); it must simply be gone, SIGTERM ignored or not.
    assert not target.is_running()
    proc.wait(10)
