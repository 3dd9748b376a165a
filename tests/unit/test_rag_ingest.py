"""The store's ingest path and query cache on a real on-disk LanceDB table, with a tiny deterministic
embedder standing in for MiniLM (what is tested is the store, not the model): query vectors are cached,
a cancelled ingest leaves only whole batches, a re-run embeds only the rest, progress carries an ETA."""

import hashlib
import threading

import numpy as np
import pytest

from retrieval import embedder as embedder_mod
from retrieval import store as store_mod
from retrieval.movies import Movie
from retrieval.search import SearchFilters, search
from retrieval.embedder import query_vectors
from retrieval.store import MovieStore, UpsertReport, eta_text

DIMS = 8


def fake_vector(text: str) -> np.ndarray:
    raw = np.frombuffer(hashlib.sha256(text.encode()).digest()[:DIMS], dtype=np.uint8).astype(np.float32) + 1.0
    return raw / np.linalg.norm(raw)


class CountingModel:
    """Stands in for a SentenceTransformer: same call, deterministic vectors, counts every text it embeds."""

    def __init__(self):
        self.texts: list[str] = []
        self.calls = 0

    def encode(self, texts, convert_to_numpy=True, normalize_embeddings=True, **kwargs):
        self.calls += 1
        self.texts.extend(texts)
        return np.stack([fake_vector(t) for t in texts])

    def embedded(self, texts) -> int:
        return sum(1 for t in self.texts if t in set(texts))


@pytest.fixture
def model(monkeypatch):
    fake = CountingModel()
    monkeypatch.setattr(embedder_mod, "load_sentence_model", lambda name: fake)
    query_vectors.clear()
    yield fake
    query_vectors.clear()


def films(n: int, start: int = 1) -> list[Movie]:
    # Plots of different lengths, so the store's longest-first order differs from the input order.
    return [Movie(id=i, title=f"Film {i}", release_year=1950 + i % 50, genre=("Drama", "Horror")[i % 2],
                  director=f"Director {i}", plot=f"Plot {i}: " + "a long night " * (i % 7 + 1))
            for i in range(start, start + n)]


def test_query_cache_hit_returns_the_same_vector_and_skips_the_model(model, tmp_path):
    store = MovieStore(tmp_path / "db", table_name="t")
    store.upsert(films(12), embedder="test/counting")
    info = store.info()
    f = SearchFilters.parse(year_max=1990, genres=["Drama"], top_k=3, known_genres=info.genres)
    calls = model.calls
    first = search(store.table(), "a haunted lighthouse", f)
    assert model.calls == calls + 1  # a new query is embedded once
    func = store.table().embedding_functions["vector"].function
    again = search(store.table(), "a haunted lighthouse", f)
    vector = func.compute_query_embeddings("a haunted lighthouse")[0]
    assert model.calls == calls + 1, "a repeated query ran the model again"
    assert [h.id for h in again] == [h.id for h in first] and len(first) == 3
    assert np.allclose(vector, fake_vector("a haunted lighthouse"))
    # Another embedder with the same text is another key: its own vector, from its own model call.
    other = store_mod.embedding_function("test/other")
    other.compute_query_embeddings("a haunted lighthouse")
    assert model.calls == calls + 2


def test_query_cache_is_bounded_and_forgets_the_oldest(model):
    func = store_mod.embedding_function("test/counting")
    for i in range(embedder_mod.QUERY_CACHE_SIZE + 5):
        func.compute_query_embeddings(f"query {i}")
    assert len(query_vectors) == embedder_mod.QUERY_CACHE_SIZE
    calls = model.calls
    func.compute_query_embeddings("query 0")  # evicted: embedded again
    func.compute_query_embeddings(f"query {embedder_mod.QUERY_CACHE_SIZE + 4}")  # recent: cached
    assert model.calls == calls + 1


def test_cancel_mid_ingest_leaves_whole_batches_and_a_rerun_embeds_only_the_rest(model, tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "EMBED_BATCH", 4)
    monkeypatch.setattr(store_mod, "COMPACT_AFTER", 100)  # keep every commit as its own version to inspect
    store = MovieStore(tmp_path / "db", table_name="t")
    store.upsert(films(3, start=100), embedder="test/counting")  # a table that already holds other films
    cancel = threading.Event()
    batches = []

    def progress(done, total, what):
        if what.startswith("Embedding plots"):
            batches.append(done)
            if len(batches) == 3:  # the third batch is being embedded: press Cancel
                cancel.set()

    wanted = films(22)
    model.texts.clear()
    report = store.upsert(wanted, progress=progress, cancel=cancel)
    assert report.cancelled and "Add the same films again" in report.summary()
    # The batch in progress when Cancel came is finished and written; nothing after it is started.
    assert report.embedded == 12 and model.embedded([m.plot for m in wanted]) == 12
    table = store.table()
    assert table.count_rows() == 3 + 12
    # Every table version holds whole batches: 3 (the earlier films), then +4, +4, +4.
    counts = []
    for version in table.list_versions():
        table.checkout(version["version"])
        counts.append(table.count_rows())
    table.checkout_latest()
    assert sorted(set(counts)) == [0, 3, 7, 11, 15], counts
    # Each written row carries the vector of its own plot.
    rows = table.search().select(["plot", "vector"]).limit(100).to_list()
    assert all(np.allclose(r["vector"], fake_vector(r["plot"])) for r in rows)

    # Re-running the same upload embeds only the 10 films that were not written.
    model.texts.clear()
    again = store.upsert(wanted)
    assert not again.cancelled and again.unchanged == 12 and again.inserted == 10
    assert model.embedded([m.plot for m in wanted]) == 10
    assert store.table().count_rows() == 3 + 22


def test_a_write_failure_stops_the_ingest_and_keeps_committed_batches(model, tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "EMBED_BATCH", 4)
    real_commit = store_mod._BatchWriter._commit
    calls = []

    def failing_commit(self, movies, vectors):
        calls.append(len(movies))
        if len(calls) == 2:
            raise OSError("disk full")
        real_commit(self, movies, vectors)

    monkeypatch.setattr(store_mod._BatchWriter, "_commit", failing_commit)
    store = MovieStore(tmp_path / "db", table_name="t")
    with pytest.raises(OSError, match="disk full"):
        store.upsert(films(40), embedder="test/counting")
    assert store.table().count_rows() == 4  # the first batch, whole; nothing of the failed one
    # It stopped instead of embedding all 10 batches: the writer's queue lets embedding run at most
    # WRITER_QUEUE + 2 batches ahead of the failed commit.
    assert model.embedded([m.plot for m in films(40)]) <= 4 * (2 + store_mod.WRITER_QUEUE + 2)


def test_progress_reports_an_eta(model, tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "EMBED_BATCH", 4)
    seen = []
    MovieStore(tmp_path / "db", table_name="t").upsert(
        films(16), embedder="test/counting", progress=lambda done, total, what: seen.append((done, total, what)))
    embedding = [what for _, _, what in seen if what.startswith("Embedding plots")]
    assert len(embedding) == 4
    assert "estimating time left" in embedding[0]
    assert all("plots/s" in what and " left" in what for what in embedding[1:]), embedding
    assert seen[-1][:2] == (16, 16)


def test_eta_text_counts_down():
    assert eta_text(100, 50_000, 2.5) == "100/50000 embedded · 40 plots/s · about 21 min left"
    assert eta_text(100, 500_000, 2.5).endswith("about 3 h 28 min left")


def test_cancelled_summary_says_how_to_resume():
    report = UpsertReport(inserted=8, unchanged=2, embedded=8, to_embed=30, rows=10, cancelled=True)
    assert "Cancelled after writing 8 of the 30" in report.summary()
    assert "skipped without being embedded again" in report.summary()


# ---- the RAG tab's upload handler: Cancel stops this session's upload, not another's ----------------

class FakeRequest:
    def __init__(self, session_hash: str):
        self.session_hash = session_hash


def test_cancel_button_stops_only_its_own_sessions_upload(model, tmp_path, monkeypatch):
    from ui import rag_table as rag_ui

    monkeypatch.setattr(store_mod, "EMBED_BATCH", 4)
    in_second_batch, release = threading.Event(), threading.Event()
    encode = model.encode

    def gated_encode(texts, **kwargs):
        if texts and texts[0].startswith("Plot") and model.calls >= 2:  # 'f','o','o' probe, batch 1, then here
            in_second_batch.set()
            release.wait(30)
        return encode(texts, **kwargs)

    monkeypatch.setattr(model, "encode", gated_encode)
    csv = tmp_path / "films.csv"
    csv.write_text("Title,Release Year,Plot,Genre\n" + "".join(
        f"Film {i},{1950 + i},Plot {i}: {'a long night ' * (i % 7 + 1)},Drama\n" for i in range(20)))
    store = MovieStore(tmp_path / "db", table_name="t")
    _, receive_upload, add_upload, _, _, cancel_ingest = rag_ui.make_table_handlers(store)
    stored, message, *_ = receive_upload(str(csv))
    assert stored and "4 columns" in message

    mine, theirs = FakeRequest("mine"), FakeRequest("theirs")
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=add_upload(
        stored, "test/counting", "Title", "Release Year", "Plot", "Genre", "", "", request=mine)))
    worker.start()
    assert in_second_batch.wait(30)
    assert cancel_ingest(theirs) == "Nothing is being added from this page."
    assert cancel_ingest(mine).startswith("Cancelling")
    release.set()
    worker.join(30)
    text = result["out"][0]
    assert text.startswith("⏹ Upload: Cancelled after writing 8 of the 20"), text
    assert store.table().count_rows() == 8
    assert cancel_ingest(mine) == "Nothing is being added from this page."  # the job is over


def test_the_ann_index_is_built_only_above_the_threshold(model, tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "ANN_MIN_ROWS", 300)
    store = MovieStore(tmp_path / "db", table_name="t")
    store.upsert(films(200), embedder="test/counting")
    assert not store_mod.has_vector_index(store.table())  # small: brute force, exact
    store.upsert(films(150, start=1000))
    assert store_mod.has_vector_index(store.table())
    f = SearchFilters.parse(year_min=1960, year_max=1980, genres=["Horror"], top_k=5,
                            known_genres=store.info().genres)
    hits = search(store.table(), "a long night", f)
    assert len(hits) == 5 and all(1960 <= h.release_year <= 1980 and h.genre == "Horror" for h in hits)
