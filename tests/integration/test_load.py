"""Load, tried for real: 20 chat sessions at once carrying on their own conversations, a bounded queue that
answers 'busy' at once, and RAG searches while an ingest writes to the same table."""

import concurrent.futures
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from .helpers import evaluable_run, serve_app, wait_for

pytestmark = pytest.mark.slow
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def test_twenty_concurrent_chats_each_keep_their_own_conversation(tiny_model_dir):
    """20 sessions at once, each going on to a second message. The Chat tab keeps a conversation in the
    page, not on the server: /respond has no gr.State, the Chatbot's value travels with every message and
    comes back extended. So each session sends its next message with the history it got back, as the page
    does, and after every turn must get exactly its own messages and its own earlier replies: anything the
    server kept between calls, or mixed up between requests in flight, shows here."""
    from chat_load import run_load

    # What is tested is the server's bookkeeping, not the replies: the sessions chat with a finished run whose
    # merged model is the two-layer one (a run folder, so it is among the Chat tab's choices). Sampled: its
    # random weights' greedy reply is eight newlines, an empty reply once stripped.
    run_dir = evaluable_run("chat-load", tiny_model_dir)
    demo, url = serve_app()
    try:
        results = run_load(url, clients=20, tokens=8, turns=2, model=f"run:{run_dir.name}",
                           temperature=1.0)
    finally:
        demo.close()
        # Left in the session's data folder, this finished run would be every later test's default model: the
        # RAG browser test's answer would come from random weights.
        shutil.rmtree(run_dir)
    assert len(results) == 20
    assert all(r["own_history"] for r in results), [(r["session"], r["problems"]) for r in results if r["problems"]]
    assert all(r["completed"] for r in results), [(r["session"], r["problems"]) for r in results if r["problems"]]
    # Conversations were really in flight together: some session's second message went in while another
    # session still waited for its first reply.
    assert max(r["ends"][0] for r in results) > min(r["starts"][1] for r in results), "turns never overlapped"


# A refusal is an HTTP answer the queue gives without running anything: tens of milliseconds alone, under
# half a second measured here while two generations stream in the same process. 5 s stays clear of a loaded
# 2-core machine's noise, yet is well short of what a waiting request would take: the requests ahead of it
# generate up to 512 tokens each (tens of seconds), so a queue that made it wait instead fails here.
REFUSAL_BOUND_S = 5.0


def test_a_full_queue_answers_busy_at_once(bundled_model_dir):
    """With --queue-size 2 and two chats generating and two waiting, more chats are refused with 'Queue is
    full' at once, while the running ones keep streaming."""
    from gradio_client import Client
    from gradio_client.utils import Status

    from ui.chat import content_text

    demo, url = serve_app("--queue-size", "2")
    model = "bundled/SmolLM2-135M-Instruct"

    def send(client: Client, tokens: int):
        return client.submit("Count from 1 to 500, one number per line.", [], [], model, model, False, "", tokens,
                             0.0, 1.0, api_name="/respond")

    def overflow(client: Client) -> tuple[float, str]:
        start = time.perf_counter()
        try:
            send(client, 8).result(timeout=REFUSAL_BOUND_S * 2)  # a queue that blocks is cut off here
            answer = "ok"
        except Exception as exc:  # noqa: BLE001 - the refusal is what this test looks at
            answer = f"{type(exc).__name__}: {exc}"
        return time.perf_counter() - start, answer

    fill: list = []
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            clients = list(pool.map(lambda _: Client(url, verbose=False, httpx_kwargs={"timeout": 120}), range(8)))

        def streaming() -> list[str]:
            """Replies arriving: running chats that have streamed text and not finished."""
            texts = [content_text(j.outputs()[-1][0][-1]["content"]) for j in fill
                     if j.status().code == Status.ITERATING and j.outputs() and j.outputs()[-1][0]]
            return [t for t in texts if t.strip()]

        # Fill it: two generations streaming (the chat's concurrency limit), then two waiting (the queue's
        # size). In two steps: sent together, the last two could find the first two still in the queue.
        fill.extend(send(c, 512) for c in clients[:2])
        wait_for(lambda: len(streaming()) == 2, timeout=180, what="two chats streaming")
        fill.extend(send(c, 512) for c in clients[2:4])
        wait_for(lambda: [j.status().code for j in fill[2:]] == [Status.IN_QUEUE] * 2, timeout=60,
                 what="two chats waiting")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(overflow, clients[4:]))  # four more at once
        still_streaming = streaming()
    finally:
        for job in fill:
            job.cancel()  # ends the long generations instead of waiting for 512 tokens
        demo.close()
    assert all(seconds < REFUSAL_BOUND_S for seconds, _ in answers), f"not answered at once: {answers}"
    assert all("queue is full" in answer.lower() for _, answer in answers), answers
    assert len(still_streaming) == 2, still_streaming  # the app went on serving the chats it had taken


def test_searches_stay_consistent_during_an_ingest(tmp_path):
    """Searches run in a loop while another thread upserts films in small batches. Every search returns
    exactly top-k rows inside the filter, sorted, without duplicates; row counts only grow. The test also
    proves the two overlapped: a search started while an upsert was running, and the table's version
    moved while a search was in flight."""
    from retrieval import movies
    from retrieval.search import SearchFilters, search
    from retrieval.store import MovieStore

    store = MovieStore(tmp_path / "db")
    films = movies.load_bundled()[:240]  # sorted by year: the first 100 hold 18 of 1950-1999, a full top 8
    store.upsert(films[:100])  # loads the embedder
    known = {f.id for f in films}
    filters = SearchFilters.parse(1950, 1999, top_k=8)
    errors: list[BaseException] = []
    writes: list[tuple[float, float]] = []  # (start, end) of each upsert
    done = threading.Event()

    def ingest():
        try:
            # Batches of 20: 7 commits, each a chance for a search to meet a half-done write.
            for start in range(100, len(films), 20):
                began = time.perf_counter()
                store.upsert(films[start:start + 20])
                writes.append((began, time.perf_counter()))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=ingest)
    writer.start()
    # (start, version before, hits, rows, version after); checked after the loop so that nearly all of
    # the loop's time is spent inside a search, where a commit can land.
    searches: list[tuple] = []
    while not done.is_set() or len(searches) < 5:
        table = store.table()
        began, before = time.perf_counter(), table.version
        hits = search(table, "a detective uncovers a conspiracy", filters)
        rows = table.count_rows()
        searches.append((began, before, hits, rows, table.version))
    writer.join()
    assert not errors, errors
    for _, _, hits, _, _ in searches:
        assert len(hits) == 8
        assert all(1950 <= h.release_year <= 1999 and h.id in known for h in hits)
        assert [h.distance for h in hits] == sorted(h.distance for h in hits)
        assert len({h.id for h in hits}) == 8  # no duplicates from half-written versions
    counts = [rows for _, _, _, rows, _ in searches]
    assert counts == sorted(counts) and store.table().count_rows() == len(films)
    # The overlap really happened: otherwise the checks above prove nothing about a concurrent ingest.
    during_a_write = [s for s in searches if any(w0 < s[0] < w1 for w0, w1 in writes)]
    assert during_a_write, f"no search started during one of the {len(writes)} upserts"
    assert any(after > before for _, before, _, _, after in searches), "no commit landed while a search ran"
