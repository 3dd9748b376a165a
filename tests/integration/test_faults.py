"""Stopping, killing, resuming, a broken reward and a model too big for memory, on real trainer processes."""

import json
import os
import signal
import subprocess
import sys

import pytest

from pipeline.run_folder import run_files, runs
from pipeline.setup.config import RewardSpec

from .helpers import ROOT, make_run, run, said, start, status, tiny_settings, wait_for

pytestmark = pytest.mark.slow


def _metric_step(run_dir):
    rows = runs.read_metrics(run_dir)
    return rows[-1]["step"] if rows else 0


def test_sigterm_stops_cleanly_then_resume_continues(tiny_model_dir):
    run_dir = make_run("stop", **tiny_settings(tiny_model_dir), max_steps=500)
    proc = start(run_dir)
    wait_for(lambda: _metric_step(run_dir) >= 1, 300, "the first step", proc)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=180) == 0
    st = status(run_dir)
    assert st["state"] == "stopped", st
    assert (run_dir / "adapter" / "adapter_model.safetensors").exists()
    ckpt = runs.last_complete_checkpoint(run_dir)
    stopped_at = runs.checkpoint_step(ckpt)
    assert stopped_at == st["step"] >= 1

    proc = run(run_dir, "--resume", "--steps", str(stopped_at + 1))
    assert proc.returncode == 0, said(proc.stderr)
    assert status(run_dir)["state"] == "finished"
    assert [r["step"] for r in runs.read_metrics(run_dir)][-1] == stopped_at + 1
    assert f"Resuming from checkpoint-{stopped_at}" in (run_dir / "train.log").read_text()


def test_raising_reward_fails_the_run_with_its_name_and_sample(tiny_model_dir):
    code = "def reward(completions, **kwargs):\n    raise ValueError('cannot score this')\n"
    run_dir = make_run("badreward", model=str(tiny_model_dir),
                       rewards=[RewardSpec("custom_python", 1.0, {"code": code})])
    refused = run(run_dir)
    assert refused.returncode == 1
    assert "--allow-custom-rewards" in status(run_dir)["error"]

    proc = run(run_dir, "--allow-custom-rewards")
    assert proc.returncode == 1
    st = status(run_dir)
    assert st["state"] == "failed"
    assert "Reward 'custom_python' raised ValueError: cannot score this on completion #0" in st["error"]


def test_a_model_that_cannot_load_fails_the_run_in_words_without_a_traceback():
    """A folder with no config.json: the run fails with the reason, and the log says it in the same words; a
    traceback of the app's own loading code would bury them (the Train tab shows the log's tail)."""
    folder = runs.data_dir() / "models" / "not-a-model"  # under the data folder: a folder a run may name
    folder.mkdir(parents=True, exist_ok=True)
    run_dir = make_run("nomodel", model=str(folder))
    proc = run(run_dir)
    folder.rmdir()
    assert proc.returncode == 1, said(proc.stderr)
    st = status(run_dir)
    assert st["state"] == "failed" and st["error"] == (
        f"The folder '{folder}' has no config.json, so it is not a transformers model."), st
    log_text = (run_dir / "train.log").read_text()
    assert f"Run failed: {st['error']}" in log_text and "Traceback" not in log_text, log_text[-3000:]

def test_skip_policy_keeps_training_and_records_warnings(tiny_model_dir):
    code = ("def reward(completions, **kwargs):\n"
            "    return [float('nan') if i == 0 else 1.0 for i, _ in enumerate(completions)]\n")
    run_dir = make_run("skipreward", model=str(tiny_model_dir), max_steps=1, reward_errors="skip",
                       rewards=[RewardSpec("length_target"), RewardSpec("custom_python", 1.0, {"code": code})])
    proc = run(run_dir, "--allow-custom-rewards")
    assert proc.returncode == 0, said(proc.stderr)
    row = runs.read_metrics(run_dir)[0]
    assert row["warnings"] and "custom_python" in row["warnings"][0]
    first = runs.read_groups(run_dir)[0]["groups"][0]["completions"][0]
    assert first["rewards"]["custom_python"] is None and first["total"] is not None


def test_vllm_without_a_gpu_fails_with_a_clear_message(tiny_model_dir):
    run_dir = make_run("vllm", **tiny_settings(tiny_model_dir), use_vllm=True)
    proc = run(run_dir)
    assert proc.returncode == 1
    assert "use_vllm needs a CUDA GPU: turn it off to generate with transformers" in status(run_dir)["error"]


def test_sigkill_during_a_checkpoint_save_reads_as_failed_and_resume_skips_every_half_checkpoint(tiny_model_dir):
    """Kill the trainer while it is writing a checkpoint (caught in the act: folder there, marker not yet).
    The run reads as failed (crashed), and the resume skips that half checkpoint, a later one with weights
    but no marker, and a metrics line the kill tore. (One kill serves what used to be two tests.)"""
    import time

    run_dir = make_run("kill-save", **tiny_settings(tiny_model_dir), max_steps=500, save_steps=1)
    proc = start(run_dir)
    caught = None
    deadline = time.time() + 420
    while time.time() < deadline and caught is None and proc.poll() is None:
        complete = set(runs.checkpoints(run_dir))
        for ckpt in runs.checkpoints(run_dir, complete_only=False):
            if ckpt not in complete and runs.checkpoint_step(ckpt) >= 2:
                os.killpg(proc.pid, signal.SIGKILL)
                caught = ckpt
                break
        time.sleep(0.005)
    proc.wait(timeout=30)
    assert caught is not None, "never saw a checkpoint being written"
    assert not (caught / run_files.CHECKPOINT_MARKER).exists()
    st = status(run_dir)
    assert st["state"] == "failed" and st.get("crashed") and "exited without reporting" in st["error"], st
    assert runs.log_tail(run_dir, 5).strip()  # the log tail the UI shows next to the error

    last = runs.last_complete_checkpoint(run_dir)
    assert last is not None and runs.checkpoint_step(last) < runs.checkpoint_step(caught)
    resume_step = runs.checkpoint_step(last)
    runs.read_metrics(run_dir)  # readable whatever the kill left at the end
    # Another save the kill could have interrupted: a later folder with weights but no completion marker,
    # and a torn metrics line.
    partial = run_dir / f"checkpoint-{resume_step + 7}"
    partial.mkdir()
    (partial / "adapter_model.safetensors").write_bytes(b"half a file")
    with open(run_dir / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 99, "reward": ')
    resumed_at = time.time()
    proc = run(run_dir, "--resume", "--steps", str(resume_step + 1))
    assert proc.returncode == 0, said(proc.stderr)
    assert status(run_dir)["state"] == "finished"
    assert not caught.exists() or (caught / run_files.CHECKPOINT_MARKER).exists()
    assert not partial.exists()
    assert f"Resuming from checkpoint-{resume_step}" in (run_dir / "train.log").read_text()
    rows = runs.read_metrics(run_dir)
    assert rows[-1]["step"] == resume_step + 1 and 99 not in [r["step"] for r in rows]
    # The line the resumed trainer wrote for that step is read, not glued onto the torn one and lost (the
    # killed process may have logged the same step before its save: that older line must not be what shows).
    assert rows[-1]["time"] > resumed_at, rows[-1]


def _group_gone(pgid: int) -> bool:
    """True when no process is left in the trainer's process group (it and anything it started)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


# A reward stuck on something outside Python: a tool that never answers. Its thread can't be killed,
# and the process it started would outlive the trainer unless the trainer ends it.
HANGING = ("import subprocess\n"
           "def reward(completions, **kwargs):\n"
           "    subprocess.run(['sleep', '600'])\n"
           "    return [0.0] * len(completions)\n")


@pytest.mark.parametrize("policy", ["fail", "skip"])
def test_a_hanging_reward_is_named_and_leaves_no_process(tiny_model_dir, policy):
    import time

    run_dir = make_run(f"hang-{policy}", model=str(tiny_model_dir), max_steps=1, max_completion_length=8,
                       probe_every=0, merge_at_end=False, reward_errors=policy, reward_timeout_s=2,
                       rewards=[RewardSpec("length_target"), RewardSpec("custom_python", 1.0, {"code": HANGING})])
    proc = start(run_dir, "--allow-custom-rewards")  # its own process group, as the app starts it
    assert proc.wait(timeout=300) == (1 if policy == "fail" else 0)
    st = status(run_dir)
    expected = "Reward 'custom_python' did not return within 2 s"
    if policy == "fail":
        assert st["state"] == "failed" and st["error"].startswith(expected), st
    else:
        assert st["state"] == "finished", st
        row = runs.read_metrics(run_dir)[0]
        assert any(w.startswith(expected) and "skipped" in w for w in row["warnings"]), row["warnings"]
    # Nothing the run started is left: the hung reward's `sleep 600` was ended with the trainer.
    deadline = time.time() + 10
    while time.time() < deadline and not _group_gone(proc.pid):
        time.sleep(0.2)
    assert _group_gone(proc.pid), "a process of the run outlived the trainer"
    assert "Ended 1 process(es) the run left behind: sleep" in (run_dir / "train.log").read_text()


def test_a_full_disk_during_a_checkpoint_save_fails_in_plain_words_and_resumes(tiny_model_dir):
    """The trainer's file-size limit is lowered (RLIMIT_FSIZE, as a full disk or a quota would stop it)
    once its first checkpoint is complete: the next save can't write its 3.5 MB tokenizer file."""
    import resource

    run_dir = make_run("diskfull", **tiny_settings(tiny_model_dir), max_steps=300, save_steps=1,
                       max_completion_length=8, probe_every=0)
    proc = start(run_dir)
    wait_for(lambda: runs.last_complete_checkpoint(run_dir), 300, "a complete checkpoint", proc)
    limit = 2 * 2**20  # the run's jsonl files and log stay far below this for a few steps
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
    assert proc.wait(timeout=300) == 1
    st = status(run_dir)
    last = runs.last_complete_checkpoint(run_dir)
    assert st["state"] == "failed" and st["error"].startswith("Disk full: the run could not write its files"), st
    assert f"Resume continues from {last.name}" in st["error"]
    steps = [r["step"] for r in runs.read_metrics(run_dir)]  # still reads
    assert steps and steps == sorted(steps) and steps[-1] > runs.checkpoint_step(last)

    resume_step = runs.checkpoint_step(last)
    done = run(run_dir, "--resume", "--steps", str(resume_step + 1))  # a new process: no limit
    assert done.returncode == 0, said(done.stderr)
    assert status(run_dir)["state"] == "finished"
    assert f"Resuming from checkpoint-{resume_step}" in (run_dir / "train.log").read_text()


def test_two_starts_at_the_same_moment_start_one_run(tiny_model_dir, monkeypatch):
    """Two Starts race (two browser sessions, or the app and a script): exactly one run starts, the other
    hears why, and no half-made run folder is left. Creating a run folder is slowed down, as on a busy disk,
    so both Starts are inside the check-then-create window together."""
    import threading
    import time

    from pipeline import runner
    from pipeline.setup.config import RunConfig

    from .helpers import QUICK

    real_new_run_dir = runs.new_run_dir

    def slow_new_run_dir(label="run"):
        time.sleep(0.5)
        return real_new_run_dir(label)

    monkeypatch.setattr(runs, "new_run_dir", slow_new_run_dir)
    before = set(runs.runs_dir().iterdir())
    barrier = threading.Barrier(2)
    results: list = []

    def press_start(i: int):
        barrier.wait()
        try:
            cfg = RunConfig(**{**QUICK, **tiny_settings(tiny_model_dir), "max_steps": 500})
            results.append(runner.start("train", cfg=cfg, label=f"race-{i}"))
        except runner.RunnerError as exc:
            results.append(exc)

    threads = [threading.Thread(target=press_start, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    started = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, Exception)]
    try:
        assert len(started) == 1 and len(refused) == 1, results
        assert "one training runs at a time" in str(refused[0]) and started[0].name in str(refused[0])
        new = set(runs.runs_dir().iterdir()) - before
        assert {p for p in new if p.is_dir()} == {started[0]}, new
    finally:
        for run_dir in started:
            runner.stop("train", run_dir, grace_s=120)
    deadline = time.time() + 60
    while time.time() < deadline and runner.busy_run():
        time.sleep(0.5)
    assert runner.busy_run() is None


# A model too big for memory, for real on any host: the child caps its own address space (RLIMIT_AS) at what
# the imports left mapped plus 300 MiB, then loads the bundled model (538 MB of weights) in the Chat tab's
# handler, then trains on it. Everything either needs is imported before the cap, so the first thing refused
# is the weights.
TOO_BIG_TO_LOAD = """
import json, resource, sys
import psutil, torch, datasets, peft, trl  # noqa: F401
from transformers import AutoModelForCausalLM, AutoTokenizer, TextIteratorStreamer  # noqa: F401
import pipeline.train as train
from pipeline.training.generate import ModelCache
from ui.chat import make_handlers

resource.setrlimit(resource.RLIMIT_AS, (psutil.Process().memory_info().vms + 300 * 2**20, resource.RLIM_INFINITY))
respond, _ = make_handlers(ModelCache())
history = list(respond("Hello", [], [], "bundled/SmolLM2-135M-Instruct", "", False, "", 8, 0.0, 1.0))[-1][0]
print("CHAT " + json.dumps(history[-1]["content"]), flush=True)
sys.exit(train.main(["--run-dir", sys.argv[1]]))
"""


def test_a_model_too_big_for_memory_reads_as_out_of_memory_in_chat_and_in_the_run(bundled_model_dir):
    assert (bundled_model_dir / "model.safetensors").stat().st_size > 400 * 2**20  # well past the 300 MiB
    run_dir = make_run("oom")
    # Threads reserve address space per core (stacks, malloc arenas): pinned, so the cap means the same
    # thing on a 2-core runner and a 64-core server.
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    child = subprocess.run([sys.executable, "-c", TOO_BIG_TO_LOAD, str(run_dir)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    chat = [json.loads(line[5:]) for line in child.stdout.splitlines() if line.startswith("CHAT ")]
    assert chat and chat[0].startswith("⚠️ Out of memory while loading the model or generating. "), (
        chat, said(child.stderr))
    assert child.returncode == 1, said(child.stderr)
    st = status(run_dir)
    assert st["state"] == "failed", st
    assert st["error"].startswith("Out of memory while training. "), st["error"]
