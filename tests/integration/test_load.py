"""Load, tried for real: 20 chat sessions at once, a bounded queue that answers 'busy', and RAG searches
while an ingest writes to the same table."""

import concurrent.futures
import sys
import threading
from pathlib import Path

import pytest

from .helpers import serve_app

pytestmark = pytest.mark.slow
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def test_twenty_concurrent_chats_all_complete_with_their_own_history(bundled_model_dir):
    from chat_load import run_load

    demo, url = serve_app()
    try:
        results = run_load(url, clients=20, tokens=12)
    finally:
        demo.close()
    assert len(results) == 20
    assert all(r["completed"] for r in results), results
    assert all(r["own_history"] for r in results), results


def test_a_full_queue_answers_busy_at_once(bundled_model_dir):
    from gradio_client import Client

    demo, url = serve_app("--queue-size", "2")
    model = "bundled/SmolLM2-135M-Instruct"

    def chat(i: int) -> str:
        try:
            Client(url, verbose=False).predict(f"Count to {i}.", [], [], model, model, False, "", 48, 0.0, 1.0,
                                               api_name="/respond")
            return "ok"
        except Exception as exc:  # noqa: BLE001 - the refusal is what this test looks at
            return str(exc)

    try:
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(chat, range(12)))
    finally:
        demo.close()
    busy = [a for a in answers if a != "ok"]
    assert answers.count("ok") >= 2, answers
    assert busy and all("queue is full" in a.lower() for a in busy), answers


def test_searches_stay_consistent_during_an_ingest(tmp_path):
    from retrieval import movies
    from retrieval.search import SearchFilters, search
    from retrieval.store import MovieStore

    store = MovieStore(tmp_path / "db")
    films = movies.load_bundled()
    store.upsert(films[:150])
    known = {f.id for f in films}
    filters = SearchFilters.parse(1950, 1999, top_k=8)
    errors: list[BaseException] = []
    counts: list[int] = []
    done = threading.Event()

    def ingest():
        try:
            for start in range(150, len(films), 45):
                store.upsert(films[start:start + 45])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=ingest)
    writer.start()
    searches = 0
    while not done.is_set() or searches < 5:
        hits = search(store.table(), "a detective uncovers a conspiracy", filters)
        assert len(hits) == 8
        assert all(1950 <= h.release_year <= 1999 and h.id in known for h in hits)
        assert [h.distance for h in hits] == sorted(h.distance for h in hits)
        assert len({h.id for h in hits}) == 8  # no duplicates from half-written versions
        counts.append(store.table().count_rows())
        searches += 1
    writer.join()
    assert not errors, errors
    assert counts == sorted(counts) and store.table().count_rows() == len(films)
    assert searches >= 5
