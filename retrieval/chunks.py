"""Plot chunks: every film's plot split into sentences, each embedded on its own, in a second LanceDB table
beside the movie table. A twist told in one sentence ("Harry is Johnny himself") is diluted in the whole
plot's single vector; a sentence vector keeps it. The chunk rows carry the film's year and genre, so the
search filters apply to them as a prefilter, exactly as they do to the films.

The chunk table follows the movie table: `sync` embeds the chunks of films that are new or changed since
the last sync and drops those of films that changed or are gone (keyed by film id and a hash of its
fields), so it costs nothing when nothing was written, and a large table is indexed once."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from typing import Callable

from retrieval.movies import FIELDS

CHUNK_SUFFIX = "__chunks"
MIN_CHUNK_CHARS = 25     # "He survives." alone says little; it is joined to the sentence before it
MAX_CHUNKS_PER_FILM = 24  # a 20,000-character uploaded plot still gets a bounded number of rows
EMBED_BATCH = 128        # sentences per embedding call (short texts: larger batches than whole plots)

Progress = Callable[[int, int, str], None]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def split_plot(plot: str) -> list[str]:
    """The plot's sentences, a very short one joined to the one before it, at most MAX_CHUNKS_PER_FILM.

    >>> split_plot("Harry hunts a singer. He fails. The twist: Harry is the singer himself!")
    ['Harry hunts a singer. He fails.', 'The twist: Harry is the singer himself!']
    >>> split_plot("Dr. No hides on an island.")
    ['Dr. No hides on an island.']
    """
    text = " ".join(str(plot or "").split())
    chunks: list[str] = []
    for piece in _SENTENCE_END.split(text):
        piece = piece.strip()
        if not piece:
            continue
        # "Dr." or "St." ends no sentence, and a fragment too short to mean anything joins the previous one.
        if chunks and (len(piece) < MIN_CHUNK_CHARS or re.search(r"\b(Dr|Mr|Mrs|Ms|St|Jr|Sr)\.$", chunks[-1])):
            chunks[-1] = f"{chunks[-1]} {piece}"
        else:
            chunks.append(piece)
    return chunks[:MAX_CHUNKS_PER_FILM] or ([text] if text else [])


def film_hash(row: dict) -> str:
    """What the chunks of a film depend on: its plot (the text) and the fields the filters read."""
    key = json.dumps([row[f] for f in FIELDS], ensure_ascii=False, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class PlotChunks:
    """The chunk table of one MovieStore. Safe to share between sessions: syncs are serialised, searches
    run freely."""

    def __init__(self, store):
        self.store = store
        self._lock = threading.Lock()
        self._synced: tuple[int, int] | None = None   # (id of the movie table object, its version)
        self._table = None  # the chunk table as the last sync left it (searches reuse it: no reopen per query)

    @property
    def table_name(self) -> str:
        return self.store.table_name + CHUNK_SUFFIX

    def table(self):
        if self._table is None:
            db = self.store.db()
            self._table = db.open_table(self.table_name) if self.table_name in db.list_tables().tables else None
        return self._table

    def _schema(self, dims: int, embedder: str | None):
        import pyarrow as pa

        return pa.schema([
            pa.field("film_id", pa.int64()), pa.field("part", pa.int32()), pa.field("film_hash", pa.string()),
            pa.field("release_year", pa.int64()), pa.field("genre", pa.string()), pa.field("chunk", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dims)),
        ], metadata={b"studio_chunk_embedder": json.dumps(embedder).encode()})

    def sync(self, progress: Progress | None = None) -> int:
        """Bring the chunk table in line with the movie table; returns how many films were (re)chunked."""
        movies = self.store.table()
        if movies is None:
            return 0
        state = (id(movies), movies.version)
        if self._synced == state:
            return 0
        with self._lock:
            if self._synced == state:
                return 0
            done = self._sync_locked(movies, progress or (lambda *a: None))
            self._synced = state
            return done

    def _sync_locked(self, movies, progress: Progress) -> int:
        from lancedb.expr import col, lit

        func = movies.embedding_functions["vector"].function
        embedder = getattr(func, "name", None)
        dims = movies.schema.field("vector").type.list_size
        db = self.store.db()
        chunks = self.table()
        if chunks is not None:
            meta = json.loads((chunks.schema.metadata or {}).get(b"studio_chunk_embedder", b"null"))
            if meta != embedder or chunks.schema.field("vector").type.list_size != dims:
                db.drop_table(self.table_name)  # another embedder: vectors of two models never mix
                chunks = self._table = None
        if chunks is None:
            chunks = self._table = db.create_table(self.table_name, schema=self._schema(dims, embedder),
                                                   exist_ok=True)

        rows = movies.search().select(list(FIELDS)).limit(movies.count_rows() + 1).to_list()
        wanted = {r["id"]: (film_hash(r), r) for r in rows}
        have_tbl = chunks.search().select(["film_id", "film_hash"]).limit(chunks.count_rows() + 1).to_arrow()
        have = dict(zip(have_tbl["film_id"].to_pylist(), have_tbl["film_hash"].to_pylist()))
        stale = [fid for fid, h in have.items() if fid not in wanted or wanted[fid][0] != h]
        for start in range(0, len(stale), 1000):
            chunks.delete(col("film_id").isin([lit(int(f)) for f in stale[start:start + 1000]]))
        todo = [fid for fid, (h, _) in wanted.items() if have.get(fid) != h]

        import pyarrow as pa

        total = len(todo)
        done = 0
        progress(0, total, "Indexing plot sentences")
        batch_rows: list[dict] = []
        batch_texts: list[str] = []

        def flush():
            if not batch_rows:
                return
            vectors = func.compute_source_embeddings(batch_texts)
            data = pa.Table.from_pylist([dict(r, vector=v) for r, v in zip(batch_rows, vectors)],
                                        schema=chunks.schema)
            chunks.add(data)  # written per batch: an interrupted sync keeps what it embedded
            batch_rows.clear()
            batch_texts.clear()

        for fid in todo:
            h, row = wanted[fid]
            for part, text in enumerate(split_plot(row["plot"])):
                batch_rows.append({"film_id": fid, "part": part, "film_hash": h, "release_year": row["release_year"],
                                   "genre": row["genre"], "chunk": text})
                batch_texts.append(text)
            done += 1
            if len(batch_texts) >= EMBED_BATCH:
                flush()
                progress(done, total, "Indexing plot sentences")
        flush()
        progress(total, total, "Indexing plot sentences")
        return total

    def best(self, vector, expr=None, limit: int = 50, film_ids: list[int] | None = None) -> dict[int, float]:
        """film id -> cosine similarity of its closest chunk, over the `limit` closest chunks that pass the
        prefilter `expr` (and, when given, belong to `film_ids`)."""
        from lancedb.expr import col, lit

        chunks = self.table()
        if chunks is None:
            return {}
        if film_ids is not None:
            if not film_ids:
                return {}
            only = col("film_id").isin([lit(int(f)) for f in film_ids])
            expr = only if expr is None else expr & only
        builder = chunks.search(vector, vector_column_name="vector").distance_type("cosine")
        if expr is not None:
            builder = builder.where(expr, prefilter=True)
        rows = builder.limit(limit).select(["film_id", "_distance"]).to_arrow()
        best: dict[int, float] = {}
        for fid, dist in zip(rows["film_id"].to_pylist(), rows["_distance"].to_pylist()):
            sim = 1.0 - float(dist)
            if sim > best.get(fid, -2.0):
                best[fid] = sim
        return best
