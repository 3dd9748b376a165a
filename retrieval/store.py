"""The movie-plot table: an embedded LanceDB database under the data directory whose schema declares its
sentence-transformers embedder through LanceDB's embedding registry. Upserts by id, rebuilds when the
embedder changes (so vector sizes never mix)."""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

# StoreError is imported by callers from here too: the store's errors are the embedder's.
from retrieval.embedder import BUNDLED_EMBEDDER, REGISTRY_NAME, StoreError, register_embedder  # noqa: F401
from retrieval.movies import FIELDS, Movie

TABLE_NAME = "movies"
EMBED_BATCH = 256       # texts per encode call, and rows per commit: ~6 s of MiniLM on 2 cores, so progress and
                        # Cancel answer within seconds, while each call still sorts enough texts by length
LOOKUP_BATCH = 2048     # ids per "is it already there?" read before embedding
WRITER_QUEUE = 2        # embedded batches waiting for the writer thread; bounds memory if the disk is slow
COMPACT_AFTER = 8       # commits in one ingest after which the table is compacted (fewer fragments to scan)
# An ANN index (IVF_HNSW_SQ, cosine) is built once the table reaches this many films. Measured
# (bench/results/rag-2026-11-23.txt, filtered queries): the index is faster at p50 from 2,000 rows, but costs
# 1-4% of the top-10; brute force stays exact and within a 50 ms p95 up to 10,000 (40 ms) and not at
# 20,000 (95 ms), so exact search is kept up to here.
ANN_MIN_ROWS = 10_000

Progress = Callable[[int, int, str], None]  # (done, total, what)


def embedding_function(name: str = BUNDLED_EMBEDDER):
    from lancedb.embeddings import get_registry

    register_embedder()
    name = (name or "").strip() or BUNDLED_EMBEDDER
    return get_registry().get(REGISTRY_NAME).create(name=name)


def movie_schema(embedder):
    """The table schema: the film's fields, plus a vector the registry fills from `plot`."""
    from lancedb.pydantic import LanceModel, Vector

    class MovieRow(LanceModel):
        id: int
        title: str
        release_year: int
        genre: str
        director: str
        plot: str = embedder.SourceField()
        vector: Vector(embedder.ndims()) = embedder.VectorField()

    return MovieRow


@dataclass
class StoreInfo:
    rows: int = 0
    embedder: str | None = None
    dims: int | None = None
    genres: list[str] = field(default_factory=list)
    year_min: int | None = None
    year_max: int | None = None
    uri: str = ""


@dataclass
class UpsertReport:
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    rows: int = 0
    seconds: float = 0.0
    embedded: int = 0       # plots embedded and committed by this call
    to_embed: int = 0       # plots that were new or changed (the rest were skipped before embedding)
    commits: int = 0
    cancelled: bool = False

    @property
    def plots_per_s(self) -> float:
        return self.embedded / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        counts = f"{self.inserted} added, {self.updated} updated, {self.unchanged} unchanged"
        if self.cancelled:
            return (f"Cancelled after writing {self.embedded} of the {self.to_embed} new or changed films ({counts}); "
                    f"the table has {self.rows} films ({self.seconds:.1f} s). Add the same films again to finish: "
                    "films already written are skipped without being embedded again.")
        return f"{counts}; the table has {self.rows} films ({self.seconds:.1f} s)"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} min"


def eta_text(embedded: int, to_embed: int, seconds: float) -> str:
    """The rate and time left of an ingest, from the plots embedded so far in `seconds`.

    >>> eta_text(380, 1380, 10.0)
    '380/1380 embedded · 38 plots/s · about 26 s left'
    >>> eta_text(1024, 50000, 27.0)
    '1024/50000 embedded · 38 plots/s · about 22 min left'
    >>> eta_text(0, 500, 0.0)
    '0/500 embedded · estimating time left'
    """
    if embedded <= 0 or seconds <= 0:
        return f"{embedded}/{to_embed} embedded · estimating time left"
    rate = embedded / seconds
    return (f"{embedded}/{to_embed} embedded · {rate:.0f} plots/s · "
            f"about {_duration((to_embed - embedded) / rate)} left")


class _BatchWriter:
    """Commits embedded batches on its own thread, so writing batch n overlaps embedding batch n+1.
    Each batch is one merge_insert: a table version holds whole batches only."""

    def __init__(self, table, report: UpsertReport):
        self.table, self.report = table, report
        self.error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=WRITER_QUEUE)
        self._thread = threading.Thread(target=self._run, name="movie-writer", daemon=True)
        self._thread.start()

    def put(self, movies: list[Movie], vectors) -> None:
        if self.error is not None:
            raise self.error
        self._queue.put((movies, vectors))

    def close(self) -> None:
        """Wait until every queued batch is committed; re-raise a write failure."""
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self.error is None:  # after a failure, drain without writing so put() never blocks forever
                try:
                    self._commit(*item)
                except BaseException as exc:  # noqa: BLE001 - handed to the ingest thread by close()/put()
                    self.error = exc

    def _commit(self, movies: list[Movie], vectors) -> None:
        import numpy as np
        import pyarrow as pa

        schema = self.table.schema
        matrix = np.asarray(vectors, dtype=np.float32)
        columns = {f: pa.array([getattr(m, f) for m in movies], type=schema.field(f).type) for f in FIELDS}
        columns["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), matrix.shape[1])
        data = pa.table({name: columns[name] for name in schema.names}).cast(schema)
        result = self.table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(data)
        self.report.inserted += result.num_inserted_rows
        self.report.updated += result.num_updated_rows
        self.report.embedded += len(movies)
        self.report.commits += 1


def has_vector_index(table) -> bool:
    return any(getattr(ix, "columns", None) == ["vector"] for ix in table.list_indices())


def ensure_vector_index(table, min_rows: int | None = None) -> bool:
    """Build the ANN index once the table is big enough for brute force to be the slow part; True if built.
    Rows added later are searched exactly until the next compaction folds them into the index."""
    from lancedb.index import IvfHnswSq

    if table.count_rows() < (ANN_MIN_ROWS if min_rows is None else min_rows) or has_vector_index(table):
        return False
    table.create_index("vector", config=IvfHnswSq(distance_type="cosine"), replace=True)
    return True


class MovieStore:
    """One LanceDB table of movie plots. The app creates one and shares it between sessions; writes are
    serialised, reads run freely (LanceDB readers see a consistent version)."""

    def __init__(self, uri: str | Path | None = None, table_name: str = TABLE_NAME):
        if uri is None:
            # GRPO_STUDIO_LANCEDB_URI points RAG at another database, e.g. s3://bucket/movies (LanceDB reads
            # the usual AWS_* / GOOGLE_* / AZURE_* credentials from the environment).
            uri = os.environ.get("GRPO_STUDIO_LANCEDB_URI", "").strip()
            if not uri:
                from pipeline.run_folder.paths import data_dir

                uri = data_dir() / "lancedb"
        self.uri = str(uri)
        self.table_name = table_name
        self._db = None
        self._table = None
        self._write_lock = threading.Lock()
        self._open_lock = threading.Lock()
        # (table, version, info): every search asks for the genres; recomputed only after a write or rebuild.
        self._info: tuple[object, int, StoreInfo] | None = None

    # ---- opening -------------------------------------------------------------------------------

    def db(self):
        if self._db is None:
            import lancedb

            register_embedder()  # before a table is opened: its schema names the embedder

            if "://" not in self.uri:
                Path(self.uri).mkdir(parents=True, exist_ok=True)
            self._db = lancedb.connect(self.uri)
        return self._db

    def exists(self) -> bool:
        return self.table_name in self.db().list_tables().tables

    def table(self):
        """The open table, or None before the first build."""
        with self._open_lock:
            if self._table is None and self.exists():
                self._table = self.db().open_table(self.table_name)
            return self._table

    def embedder_name(self) -> str | None:
        table = self.table()
        if table is None:
            return None
        import json

        meta = (table.schema.metadata or {}).get(b"embedding_functions")
        if not meta:
            return None
        return json.loads(meta)[0].get("model", {}).get("name")

    def info(self) -> StoreInfo:
        table = self.table()
        if table is None:
            return StoreInfo(uri=self.uri)
        version = table.version
        cached = self._info
        if cached is not None and cached[0] is table and cached[1] == version:
            return cached[2]
        import pyarrow.compute as pc

        rows = table.count_rows()
        cols = table.search().select(["genre", "release_year"]).limit(max(rows, 1)).to_arrow()
        years = cols["release_year"]
        info = StoreInfo(rows=rows, embedder=self.embedder_name(), dims=table.schema.field("vector").type.list_size,
                         genres=sorted(pc.unique(cols["genre"]).to_pylist()) if rows else [],
                         year_min=pc.min(years).as_py() if rows else None,
                         year_max=pc.max(years).as_py() if rows else None, uri=self.uri)
        self._info = (table, version, info)
        return info

    # ---- writing -------------------------------------------------------------------------------

    def upsert(self, movies: Iterable[Movie], embedder: str | None = None,
               progress: Progress | None = None, cancel: threading.Event | None = None) -> UpsertReport:
        """Add or update films by id. The first call creates the table with `embedder` (default: bundled);
        a different embedder than the table's rebuilds the whole table with it first.

        Setting `cancel` stops between batches: every batch already embedded is committed whole, and the
        report says `cancelled`. Calling again with the same films resumes: rows already in the table with
        the same content are skipped before embedding."""
        movies = list(movies)
        progress = progress or (lambda done, total, what: None)
        start = time.perf_counter()
        with self._write_lock:
            current = self.embedder_name()
            wanted = (embedder or "").strip() or current or BUNDLED_EMBEDDER
            if current is not None and wanted != current:
                self._rebuild_locked(wanted, progress)
            func = embedding_function(wanted)
            progress(0, len(movies), "Loading the embedder")
            func.ndims()  # loads the model once per process (several seconds the first time)
            table = self.table()
            if table is None:
                table = self.db().create_table(self.table_name, schema=movie_schema(func), exist_ok=True)
                with self._open_lock:
                    self._table = table
            report = self._write(table, func, movies, progress, cancel)
        report.rows = table.count_rows()
        report.seconds = time.perf_counter() - start
        return report

    def _write(self, table, func, movies: list[Movie], progress: Progress,
               cancel: threading.Event | None = None) -> UpsertReport:
        report = UpsertReport()
        # 1. One row per id; the last one wins, as a later line of a file overwrites an earlier one.
        movies = list({m.id: m for m in movies}.values())
        total = len(movies)
        progress(0, total, "Checking which films are new or changed")
        # 2. Skip rows already in the table with the same content before embedding anything: adding a file
        #    again, or resuming a cancelled upload, embeds only what is new or changed.
        changed = self._new_or_changed(table, movies)
        report.unchanged, report.to_embed = total - len(changed), len(changed)
        # 3. Longest plots first, as encode() itself orders one call's texts: batches of similar lengths pad
        #    little, so embedding batch by batch costs what one encode() over every text costs.
        changed.sort(key=lambda m: -len(m.plot))
        # 4. Embed here, commit on the writer thread (one merge_insert per batch, so a table version never
        #    holds part of a batch); Cancel is checked between batches.
        writer = _BatchWriter(table, report)
        embedded, started = 0, time.perf_counter()
        try:
            for begin in range(0, len(changed), EMBED_BATCH):
                if cancel is not None and cancel.is_set():
                    report.cancelled = True
                    break
                progress(report.unchanged + embedded, total,
                         "Embedding plots · " + eta_text(embedded, len(changed), time.perf_counter() - started))
                batch = changed[begin:begin + EMBED_BATCH]
                writer.put(batch, func.compute_source_embeddings([m.plot for m in batch]))
                embedded += len(batch)
        finally:
            progress(report.unchanged + embedded, total, "Writing the last batch")
            writer.close()
        # 5. Many small commits leave many small files to scan: compact once after a big ingest.
        if report.commits >= COMPACT_AFTER:
            progress(report.unchanged + embedded, total, "Compacting the table")
            table.optimize()
        if ensure_vector_index(table):
            progress(report.unchanged + report.embedded, total, "Built the search index")
        progress(report.unchanged + report.embedded, total, "Cancelled" if report.cancelled else "Done")
        return report

    @staticmethod
    def _new_or_changed(table, movies: list[Movie]) -> list[Movie]:
        from lancedb.expr import col

        if not movies or table.count_rows() == 0:
            return list(movies)
        changed = []
        for begin in range(0, len(movies), LOOKUP_BATCH):
            chunk = movies[begin:begin + LOOKUP_BATCH]
            existing = {r["id"]: r for r in table.search().where(col("id").isin([m.id for m in chunk]))
                        .select(list(FIELDS)).limit(len(chunk)).to_list()}
            changed += [m for m in chunk if existing.get(m.id) is None
                        or any(existing[m.id][f] != getattr(m, f) for f in FIELDS)]
        return changed

    def rebuild(self, embedder: str, progress: Progress | None = None) -> UpsertReport:
        """Re-embed every film with another embedder (a new table; vectors of two sizes never mix)."""
        start = time.perf_counter()
        with self._write_lock:
            report = self._rebuild_locked(embedder.strip() or BUNDLED_EMBEDDER, progress or (lambda *a: None))
        report.seconds = time.perf_counter() - start
        return report

    def _rebuild_locked(self, embedder: str, progress: Progress) -> UpsertReport:
        func = embedding_function(embedder)
        func.ndims()  # load it first: an unusable embedder fails here, before the old table is touched
        table = self.table()
        movies = []
        if table is not None:
            rows = table.search().select(list(FIELDS)).limit(table.count_rows() + 1).to_list()
            movies = [Movie(**{f: r[f] for f in FIELDS}) for r in rows]
        # Build the new table beside the old one first, so a failure part-way leaves the old one usable;
        # then swap (LanceDB OSS has no rename, so the staged rows, vectors included, are copied across).
        staging = f"{self.table_name}__rebuild"
        if staging in self.db().list_tables().tables:
            self.db().drop_table(staging)
        new = self.db().create_table(staging, schema=movie_schema(func))
        report = self._write(new, func, movies, progress)
        with self._open_lock:
            self._table = None
            if self.exists():
                self.db().drop_table(self.table_name)
            self._table = self.db().create_table(self.table_name, data=new.to_arrow(), schema=new.schema)
            self.db().drop_table(staging)
        ensure_vector_index(self._table)  # the copy carries rows, not indexes
        report.rows = self._table.count_rows()
        return report

    def delete_all(self) -> None:
        with self._write_lock, self._open_lock:
            if self.exists():
                self.db().drop_table(self.table_name)
            self._table = None

