"""A multi-rank run that fails on one rank shows that rank's reason, whichever rank writes status.json last.

When rank 1 fails, rank 0 often fails too, a moment later or earlier, with the collective's own message
("Connection closed by peer"), and torchrun may then signal rank 0 to stop. Neither may replace rank 1's
reason in status.json."""

import threading
import time

import pytest

from pipeline import train
from pipeline.run_folder import jobstate, runs
from pipeline.run_folder.jobs import TRAIN

GLOO = RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:29500. This is "
                    "typically caused by a remote worker crashing.")


@pytest.fixture
def two_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    runs.write_status(tmp_path, "running", pid=1, ended_at=None, error=None)
    return tmp_path


def _rank_1_fails(run_dir, after_s=0.0):
    def write():
        time.sleep(after_s)
        jobstate.write_status(run_dir, "failed", error="Rank 1: only rank 1 cannot score this")
    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_rank_0s_lost_peer_keeps_rank_1s_reason_when_rank_1_wrote_first(two_ranks):
    started = time.time()
    _rank_1_fails(two_ranks).join()
    assert train.failure(two_ranks, GLOO, started) == "Rank 1: only rank 1 cannot score this"


def test_rank_0s_lost_peer_waits_for_rank_1s_reason_when_rank_0_sees_it_first(two_ranks):
    started = time.time()
    writer = _rank_1_fails(two_ranks, after_s=0.6)
    assert train.failure(two_ranks, GLOO, started) == "Rank 1: only rank 1 cannot score this"
    writer.join()


def test_a_lost_peer_with_no_other_reason_gives_its_own_message(two_ranks, monkeypatch):
    monkeypatch.setattr(train, "PEER_FAILURE_WAIT_S", 0.3)
    jobstate.write_status(two_ranks, "failed", error="an older attempt's reason", ended_at=time.time() - 60)
    runs.write_status(two_ranks, "running", pid=1, ended_at=None, error=None)
    started = time.time()
    t0 = time.monotonic()
    message = train.failure(two_ranks, GLOO, started)
    assert message.startswith("RuntimeError: ") and "closed by peer" in message
    assert time.monotonic() - t0 < 5


def test_rank_0s_own_failure_is_its_own_even_after_rank_1_wrote(two_ranks):
    started = time.time()
    _rank_1_fails(two_ranks).join()
    assert train.failure(two_ranks, ValueError("rank 0 ran out of prompts"), started) == \
        "ValueError: rank 0 ran out of prompts"


def test_a_stop_signal_after_rank_1_failed_leaves_the_run_failed(two_ranks):
    """torchrun signals the ranks that are left when one fails: the run stays failed, with rank 1's reason."""
    with jobstate.job_worker(two_ranks, TRAIN, graceful=True, announce=True) as job:
        _rank_1_fails(two_ranks).join()
        raise KeyboardInterrupt  # the second signal, while rank 0 waits in a collective
    assert job.state == "stopped"
    status = runs.read_status(two_ranks)
    assert status["state"] == "failed" and status["error"] == "Rank 1: only rank 1 cannot score this"


def test_a_stop_with_no_failure_is_written_as_stopped(two_ranks):
    with jobstate.job_worker(two_ranks, TRAIN, graceful=True, announce=True):
        raise KeyboardInterrupt
    assert runs.read_status(two_ranks)["state"] == "stopped"
