"""`python -m <module> ...` for the integration tests, forked from an interpreter that has already imported the
training libraries, instead of a fresh one that imports them again.

A trainer start spends most of its time on imports (torch, transformers, PEFT, TRL, datasets: 8-10 s of CPU), and the
suite starts dozens of trainers on the two-layer model, whose steps take a fraction of a second. Each pytest worker
keeps one such interpreter (the server below, started at its first use). Every job is a fork of it: a process of its
own, with the job's environment, working folder, output files and a session of its own when asked, that runs the
module as `python -m` would and exits with its exit status. Before the fork the server has only imported: no thread,
no torch operation, no model.

The server starts with the worker's environment as it was before the tests ran. A job whose environment differs
from it starts fresh, as does every job when GRPO_STUDIO_TEST_FORK=0. Differences that don't count: pytest's name
for the current test, the app's own GRPO_STUDIO_ variables, variables the test's own code reads (`own_env`), and
those the libraries set on import (absent, or set as the server's imports set them). What the app itself starts
(runs from the browser, spares, torchrun's ranks) never comes here.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.integration.forked"
IGNORED = ("PYTEST_CURRENT_TEST",)  # differs from test to test; the job still gets its own value
# The app's own variables: read by its code when a job runs, never by the libraries the server imported.
OWN_PREFIX = "GRPO_STUDIO_"


def enabled() -> bool:
    return os.environ.get("GRPO_STUDIO_TEST_FORK", "1").strip() != "0"


# ---- the tests' side -----------------------------------------------------------------------------------


class Forked:
    """The part of subprocess.Popen the tests use, for a job forked by the server (not this process's child: its
    exit status comes from the server over the job's connection)."""

    def __init__(self, conn: socket.socket, pid: int, args: list[str]):
        self.args, self.pid, self.returncode = args, pid, None
        self._conn, self._buffer = conn, b""

    def _read_status(self, timeout: float | None) -> None:
        self._conn.settimeout(timeout)
        try:
            while b"\n" not in self._buffer:
                chunk = self._conn.recv(64)
                if not chunk:
                    raise RuntimeError("the fork server went away before the job ended")
                self._buffer += chunk
        except (socket.timeout, BlockingIOError):
            return
        self.returncode = int(self._buffer.split(b"\n", 1)[0])
        self._conn.close()

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._read_status(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_server: tuple[subprocess.Popen, str, dict, dict] | None = None  # process, socket, environment, what imports set
# The worker's environment before any test ran: the server's, whenever it starts (a test may have changed a variable
# for itself at that moment, and every job after that test would then start fresh).
_WORKER_ENV = dict(os.environ)


def _server_address() -> str | None:
    """The socket of this process's server, started now if need be; None when it could not start."""
    global _server
    if _server is not None and _server[0].poll() is None:
        return _server[1]
    folder = tempfile.mkdtemp(prefix="grpo-fork-")
    address = os.path.join(folder, "socket")
    env = dict(_WORKER_ENV)
    proc = subprocess.Popen([sys.executable, "-m", MODULE, address], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=open(os.path.join(folder, "server.log"), "ab"), stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while not os.path.exists(address + ".ready"):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            return None
        time.sleep(0.05)
    _server = (proc, address, env, json.loads(Path(address + ".ready").read_text()))
    atexit.register(shutil.rmtree, folder, True)
    atexit.register(proc.kill)  # runs first
    return address


def _fits(env: dict, own: tuple[str, ...]) -> bool:
    """Whether a job in `env` sees, forked, the environment its libraries would see started fresh."""
    _, _, started, imports_set = _server
    for key in set(env) | set(started):
        if key in IGNORED or key in own or key.startswith(OWN_PREFIX):
            continue
        if key in imports_set:
            if env.get(key) not in (None, started.get(key), imports_set[key]):
                return False
        elif env.get(key) != started.get(key):
            return False
    return True


def popen(cmd: list[str], env: dict | None = None, own_env: dict | None = None, stdout: str | None = None,
          stderr: str | None = None, new_session: bool = False) -> Forked | subprocess.Popen:
    """Start `cmd` ([sys.executable, "-m", module, *args]) in ROOT with `env` (default: this one) plus `own_env`,
    its output appended to the files `stdout` and `stderr` (nothing: discarded; the same path: one file).
    `own_env`: variables that only the test's own code reads (a spy's log file), never the libraries: they do
    not keep the job from being forked."""
    env = {**(os.environ if env is None else env), **(own_env or {})}
    address = _server_address() if enabled() and cmd[:2] == [sys.executable, "-m"] else None
    if address is None or not _fits(env, tuple(own_env or ())):
        outs = {name: open(path, "ab") if path else subprocess.DEVNULL for name, path in
                (("stdout", stdout), ("stderr", stderr))}
        if stdout and stdout == stderr:
            outs["stderr"] = subprocess.STDOUT
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, start_new_session=new_session,
                                **outs)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(address)
    job = {"module": cmd[2], "args": cmd[3:], "env": env, "stdout": stdout, "stderr": stderr,
           "session": new_session}
    conn.sendall(json.dumps(job).encode() + b"\n")
    reply = b""
    while b"\n" not in reply:
        chunk = conn.recv(64)
        if not chunk:
            raise RuntimeError("the fork server closed the connection before it forked the job")
        reply += chunk
    pid, _, rest = reply.partition(b"\n")
    handle = Forked(conn, int(pid), cmd)
    handle._buffer = rest
    return handle


def run(cmd: list[str], timeout: float, env: dict | None = None,
        own_env: dict | None = None) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True, timeout=timeout), through the server where it can."""
    with tempfile.TemporaryDirectory(prefix="grpo-job-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        proc = popen(cmd, env=env, own_env=own_env, stdout=out, stderr=err)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            raise
        read = [Path(path).read_text(errors="replace") if os.path.exists(path) else "" for path in (out, err)]
    return subprocess.CompletedProcess(cmd, code, *read)


# ---- the server's side ---------------------------------------------------------------------------------


def _child(job: dict) -> None:
    """In the forked process: become the job's process (then the caller runs its module)."""
    if job["session"]:
        os.setsid()
    os.chdir(ROOT)
    os.environ.clear()
    os.environ.update(job["env"])
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if path else devnull
        os.dup2(target, fd)
        if target != devnull:
            os.close(target)
    os.close(devnull)


def serve(address: str, imports_set: dict) -> dict:
    """Accept jobs on `address` until the worker that started this server goes; returns the job to run in a forked
    child (only ever returns there)."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(16)
    Path(address + ".part").write_text(json.dumps(imports_set))
    os.replace(address + ".part", address + ".ready")
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}  # job pid -> the connection its exit status goes back on
    while os.getppid() == parent:
        for _ in sel.select(timeout=0.05):
            conn, _ = listener.accept()
            with conn.makefile("rb") as lines:
                job = json.loads(lines.readline())
            pid = os.fork()
            if pid == 0:
                sel.close()
                listener.close()
                conn.close()
                for other in waiting.values():
                    other.close()
                _child(job)
                return job
            waiting[pid] = conn
            conn.sendall(f"{pid}\n".encode())
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()
    for pid in waiting:  # the worker has gone: so do the jobs it started
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sys.exit(0)


def main() -> None:
    import runpy

    from pipeline.spare_worker import PRELOAD, preload

    before = dict(os.environ)
    preload(list(PRELOAD))
    job = serve(sys.argv[1], {k: v for k, v in os.environ.items() if before.get(k) != v})
    sys.argv = [job["module"], *job["args"]]
    runpy.run_module(job["module"], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
