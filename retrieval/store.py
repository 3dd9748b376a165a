"""The movie-plot table: an embedded LanceDB database under the data directory whose schema declares its
sentence-transformers embedder through LanceDB's embedding registry. Upserts by id, rebuilds when the
embedder changes (so vector sizes never mix)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable

from lancedb.embeddings import get_registry, register
from lancedb.embeddings.sentence_transformers import SentenceTransformerEmbeddings

from retrieval.movies import FIELDS, Movie

BUNDLED_EMBEDDER = "bundled/all-MiniLM-L6-v2"
REGISTRY_NAME = "studio-sentence-transformers"
TABLE_NAME = "movies"
EMBED_BATCH = 64        # texts per embedding call: progress moves often, throughput is already flat here
WRITE_BATCH = 2048      # rows per merge_insert: few table versions, and bounded memory for big files

Progress = Callable[[int, int, str], None]  # (done, total, what)


class StoreError(RuntimeError):
    """A store problem a user can act on; the message says what to do."""


def bundled_embedder_dir() -> Path:
    from pipeline.models import ModelError, bundled_embedder_dir as find

    try:
        return find()
    except ModelError as exc:
        raise StoreError(str(exc)) from None


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def release_embedders() -> None:
    """Drop the loaded sentence models (a training is about to use the GPU); the next search reloads."""
    load_sentence_model.cache_clear()
    from pipeline.generate import free_gpu_memory

    free_gpu_memory()


@lru_cache(maxsize=2)
def load_sentence_model(name: str):
    """A SentenceTransformer for a registry name: the bundled model, a local folder, or a hub id."""
    from sentence_transformers import SentenceTransformer

    if name == BUNDLED_EMBEDDER:
        return SentenceTransformer(str(bundled_embedder_dir()), device=_device())
    if Path(name).expanduser().is_dir():
        return SentenceTransformer(str(Path(name).expanduser()), device=_device())
    from pipeline.hub import hub_reachable

    online = hub_reachable()
    try:
        # Offline, a model already in the local Hugging Face cache still loads.
        return SentenceTransformer(name, device=_device(), local_files_only=not online, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - missing repo, no network, not a sentence-transformers model
        if not online:
            raise StoreError(f"Can't load embedder '{name}': the Hugging Face Hub is not reachable and it is not in "
                             f"the local cache. Use the bundled '{BUNDLED_EMBEDDER}' offline.") from None
        raise StoreError(f"Can't load embedder '{name}' ({type(exc).__name__}: {exc}). Give a sentence-transformers "
                         f"model id such as BAAI/bge-small-en-v1.5, or a local folder.") from None


@register(REGISTRY_NAME)
class StudioSentenceTransformer(SentenceTransformerEmbeddings):
    """LanceDB's sentence-transformers embedder, with the bundled model addressed by a portable name
    (the table's metadata stores 'bundled/all-MiniLM-L6-v2', not a site-packages path) and a fast,
    clear failure when a hub model can't be fetched."""

    trust_remote_code: bool = False

    def get_embedding_model(self):
        return load_sentence_model(self.name)


def embedding_function(name: str = BUNDLED_EMBEDDER):
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
    embedded: int = 0

    @property
    def plots_per_s(self) -> float:
        return self.embedded / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        return (f"{self.inserted} added, {self.updated} updated, {self.unchanged} unchanged; the table has "
                f"{self.rows} films ({self.seconds:.1f} s)")


class MovieStore:
    """One LanceDB table of movie plots. The app creates one and shares it between sessions; writes are
    serialised, reads run freely (LanceDB readers see a consistent version)."""

    def __init__(self, uri: str | Path | None = None, table_name: str = TABLE_NAME):
        if uri is None:
            # GRPO_STUDIO_LANCEDB_URI points RAG at another database, e.g. s3://bucket/movies (LanceDB reads
            # the usual AWS_* / GOOGLE_* / AZURE_* credentials from the environment).
            uri = os.environ.get("GRPO_STUDIO_LANCEDB_URI", "").strip()
            if not uri:
                from pipeline.runs import data_dir

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
               progress: Progress | None = None) -> UpsertReport:
        """Add or update films by id. The first call creates the table with `embedder` (default: bundled);
        a different embedder than the table's rebuilds the whole table with it first."""
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
            report = self._write(table, func, movies, progress)
        report.rows = table.count_rows()
        report.seconds = time.perf_counter() - start
        return report

    def _write(self, table, func, movies: list[Movie], progress: Progress) -> UpsertReport:
        import pyarrow as pa
        from lancedb.expr import col

        report = UpsertReport()
        total = len(movies)
        done = 0
        progress(0, total, "Embedding plots")
        for start in range(0, total, WRITE_BATCH):
            chunk = movies[start:start + WRITE_BATCH]
            # Rows whose text is unchanged need no new embedding: re-adding a file is nearly free.
            existing = {r["id"]: r for r in table.search().where(col("id").isin([m.id for m in chunk]))
                        .select(list(FIELDS)).limit(len(chunk)).to_list()}
            changed = [m for m in chunk if existing.get(m.id) is None
                       or any(existing[m.id][f] != getattr(m, f) for f in FIELDS)]
            report.unchanged += len(chunk) - len(changed)
            done += len(chunk) - len(changed)
            vectors: list = []
            for emb_start in range(0, len(changed), EMBED_BATCH):
                batch = changed[emb_start:emb_start + EMBED_BATCH]
                vectors.extend(func.compute_source_embeddings([m.plot for m in batch]))
                done += len(batch)
                progress(done, total, "Embedding plots")
            if changed:
                data = pa.Table.from_pylist([dict(m.as_row(), vector=v) for m, v in zip(changed, vectors)],
                                            schema=table.schema)
                result = (table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
                          .execute(data))
                report.inserted += result.num_inserted_rows
                report.updated += result.num_updated_rows
                report.embedded += len(changed)
            progress(done, total, "Writing")
        return report

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
        report.rows = self._table.count_rows()
        return report

    def delete_all(self) -> None:
        with self._write_lock, self._open_lock:
            if self.exists():
                self.db().drop_table(self.table_name)
            self._table = None

