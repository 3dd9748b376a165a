"""A spare worker: a process that has already imported the libraries every job needs (torch, transformers,
PEFT, TRL, datasets, sentence-transformers: about 6 s of a job's start on a CPU) and waits for one job. The
runner hands a single-process job to it instead of starting a fresh interpreter, so Start reaches the model
load that much sooner. A spare runs a job exactly as `python -m <module> <args>` would: same interpreter,
same working folder, same environment (a job whose environment differs, such as one with the user's
reward code or a Hub token, starts fresh), its own session, and its output into the job's log.

App side (no heavy import): `prepare(env)` starts a spare when none waits, `take(cmd, env, log)` hands a job
to it and returns its Popen, or None when the caller should start the job itself. Worker side:
`python -m pipeline.spare_worker`, which imports, says it is ready, reads one job from its stdin and runs it.
The spare exits when its stdin closes (the app discarded it, or the app itself has gone).
Set GRPO_STUDIO_SPARE_WORKER=0 to start every job in a fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODULE = "pipeline.spare_worker"
# Written after the imports, with the variables they set in its environment (torch sets a few): "<READY>{json}\n".
READY = b"\n[spare worker ready] "
# A Start that comes while the spare is still importing waits for it up to this long (a cold start would
# redo the same imports), then starts fresh.
READY_WAIT_S = 30.0
# What the jobs import, touched down to the classes they use (several of these packages load lazily).
PRELOAD = ("torch", "transformers:AutoModelForCausalLM,AutoTokenizer", "peft:LoraConfig,PeftModel",
           "trl:GRPOConfig,GRPOTrainer", "datasets:Dataset", "sentence_transformers:SentenceTransformer")


def enabled(environ: dict | None = None) -> bool:
    """Whether jobs may go to a spare (GRPO_STUDIO_SPARE_WORKER=0 turns it off)."""
    return (os.environ if environ is None else environ).get("GRPO_STUDIO_SPARE_WORKER", "1").strip() != "0"


@dataclass
class Spare:
    proc: subprocess.Popen
    env: dict = field(repr=False)
    python: str
    preload: tuple[str, ...]
    output: Any = field(repr=False)  # its stdout and stderr until it takes a job: a temporary file

    def imports_set(self) -> dict | None:
        """The variables its imports set in its environment, once it is ready; None before."""
        printed = os.pread(self.output.fileno(), 1 << 20, 0)
        at = printed.rfind(READY)
        line, ended, _ = printed[at + len(READY):].partition(b"\n")
        return json.loads(line) if at >= 0 and ended else None

    def ready(self) -> bool:
        return self.imports_set() is not None

    def runs_as(self, env: dict) -> bool:
        """Whether a job started fresh in `env` would see the environment a job sees here. The app's own imports
        (when it loaded a model for Chat, say) set the same variables that the spare's imports set here: those
        match when the job's value is absent, the one the spare started with, or the one its imports set."""
        imported = self.imports_set() or {}
        if {k: v for k, v in env.items() if k not in imported} != {k: v for k, v in self.env.items()
                                                                     if k not in imported}:
            return False
        return all(env.get(k) in (None, self.env.get(k), v) for k, v in imported.items())

    def wait_ready(self, timeout_s: float) -> bool:
        """True once it has imported everything; False when it exited first or took longer."""
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            if self.ready():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return False

    def discard(self) -> None:
        """End it (it holds no job: a spare that took one is never discarded) and reap it in the background."""
        try:
            self.proc.kill()
            self.proc.stdin.close()
        except OSError:
            pass
        self.output.close()
        threading.Thread(target=self.proc.wait, daemon=True).start()


_lock = threading.Lock()
_spare: Spare | None = None  # this app's one spare: a machine resource, shared by every session on purpose


def prepare(env: dict, preload: tuple[str, ...] = PRELOAD) -> bool:
    """Start a spare for jobs that will run in `env`, importing `preload` ("module" or "module:Name,Name"),
    unless one already waits for that environment or spares are off. Returns whether one was started."""
    global _spare
    if not enabled(env):
        return False
    with _lock:
        waiting = _spare
        if waiting is not None and waiting.proc.poll() is None and waiting.preload == tuple(preload) \
                and waiting.runs_as(env):
            return False
        old, _spare = _spare, None
        if old is not None:
            old.discard()
        output = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen([sys.executable, "-m", MODULE, *preload], cwd=ROOT, env=env,
                                    stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError:
            output.close()
            return False
        _spare = Spare(proc, dict(env), sys.executable, tuple(preload), output)
        return True


def waiting() -> Spare | None:
    """The spare that waits for a job now, if any."""
    return _spare


def let_go() -> None:
    """Discard the waiting spare, if any (it exits)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None:
        spare.discard()


def take(cmd: list[str], env: dict, log: Path) -> subprocess.Popen | None:
    """Hand the job `cmd` (`python -m module args...`) to the spare, its output appended to `log`, when the
    spare runs that interpreter in that environment and is (or within READY_WAIT_S becomes) ready. Returns
    the spare's Popen, which is the job's process from now on; None when the caller must start it itself (the
    spare, if any, is discarded then)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is None:
        return None
    fits = len(cmd) >= 3 and cmd[0] == spare.python and cmd[1] == "-m"
    if not fits or not spare.wait_ready(READY_WAIT_S) or not spare.runs_as(env):
        spare.discard()
        return None
    job = {"module": cmd[2], "args": cmd[3:], "log": str(log)}
    try:
        spare.proc.stdin.write((json.dumps(job) + "\n").encode())
        spare.proc.stdin.close()
    except OSError:  # it exited in the meantime
        spare.discard()
        return None
    spare.output.close()  # the spare keeps its own descriptor: it copies what it printed into the log
    return spare.proc


# ---- the spare's side ------------------------------------------------------------------------------


def preload(entries: list[str]) -> None:
    import importlib

    for entry in entries:
        module, _, names = entry.partition(":")
        try:
            loaded = importlib.import_module(module)
            for name in filter(None, names.split(",")):
                getattr(loaded, name)
        except Exception:  # noqa: BLE001 - not installed, or broken: the job that needs it says so itself
            continue


def _take_output(log: str) -> None:
    """Point stdout and stderr at the job's log, carrying over what the imports printed (without the ready
    marker), and stdin at nothing, as a freshly started job has them."""
    printed = b""
    while chunk := os.pread(1, 1 << 20, len(printed)):
        printed += chunk
    at = printed.rfind(READY)
    if at >= 0:
        printed = printed[:at] + printed[at + len(READY):].partition(b"\n")[2]
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    if printed:
        os.write(fd, printed)
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def main() -> int:
    import runpy

    # The job comes on stdin. Its end (the app has gone, or discarded this spare) ends the process at once, even
    # in the middle of the imports, which stay on the main thread (some libraries set signal handlers on import).
    received: list[bytes] = []

    def wait_for_job() -> None:
        line = sys.stdin.buffer.readline()
        if not line.strip():
            os._exit(0)
        received.append(line)

    listener = threading.Thread(target=wait_for_job, daemon=True)
    listener.start()
    began, before = time.time(), dict(os.environ)
    preload(sys.argv[1:])
    loaded = time.time()
    sys.stdout.flush()
    sys.stderr.flush()
    imports_set = {k: v for k, v in os.environ.items() if before.get(k) != v}
    os.write(1, READY + json.dumps(imports_set).encode() + b"\n")
    listener.join()
    job = json.loads(received[0])
    _take_output(job["log"])
    print(f"Started in a spare worker, its libraries already imported ({loaded - began:.1f} s of imports, "
          f"done {time.time() - loaded:.0f} s before this job).", file=sys.stderr, flush=True)
    sys.argv = [job["module"], *job["args"]]
    runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
