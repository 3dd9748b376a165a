"""The movie table's embedder: loading sentence-transformers models (the bundled one by a portable name), a
cache of query vectors, the store's error type, and the embedder class LanceDB's registry knows. lancedb and
sentence-transformers are imported on first use, so the app starts without them; retrieval.store imports
this module, never the reverse."""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path

BUNDLED_EMBEDDER = "bundled/all-MiniLM-L6-v2"
REGISTRY_NAME = "studio-sentence-transformers"
QUERY_CACHE_SIZE = 1024 # query vectors kept (1.5 KB each for 384-d): repeated and edited-back queries skip the model


class StoreError(RuntimeError):
    """A store problem a user can act on; the message says what to do."""


def bundled_embedder_dir() -> Path:
    from pipeline.models.loading import ModelError, bundled_embedder_dir as find

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
    query_vectors.clear()  # a local embedder folder may hold new weights when it is loaded again
    from pipeline.training.generate import free_gpu_memory

    free_gpu_memory()


@lru_cache(maxsize=2)
def load_sentence_model(name: str):
    """A SentenceTransformer for a registry name: the bundled model, a folder the app may read, or a hub id
    (pipeline/models/sources.py's rule, checked here, where the model is opened, before anything is loaded)."""
    if name == BUNDLED_EMBEDDER:
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(bundled_embedder_dir()), device=_device())
    source = checked_embedder(name)
    from sentence_transformers import SentenceTransformer

    if source.kind == "local":
        return SentenceTransformer(source.value, device=_device())
    from pipeline.models.hub import hub_reachable
    from pipeline.models.sources import hub_cache_dir, hub_token

    online = hub_reachable()
    token = hub_token()
    if not online and token is False:  # a shared app: the server's cached copies are its own, like its token
        raise StoreError(f"Can't load embedder '{name}': the Hugging Face Hub is not reachable. Use the bundled "
                         f"'{BUNDLED_EMBEDDER}' offline.")
    try:
        # Offline, a model already in the local Hugging Face cache still loads.
        return SentenceTransformer(name, device=_device(), local_files_only=not online, trust_remote_code=False,
                                   token=token, cache_folder=hub_cache_dir())
    except Exception as exc:  # noqa: BLE001 - missing repo, no network, not a sentence-transformers model
        if not online:
            raise StoreError(f"Can't load embedder '{name}': the Hugging Face Hub is not reachable and it is not in "
                             f"the local cache. Use the bundled '{BUNDLED_EMBEDDER}' offline.") from None
        raise StoreError(f"Can't load embedder '{name}' ({type(exc).__name__}: {exc}). Give a sentence-transformers "
                         f"model id such as BAAI/bge-small-en-v1.5, or a local folder.") from None


def checked_embedder(name: str):
    """pipeline/models/sources.py's rule for an embedder name (a Source), or StoreError saying what is accepted."""
    import os

    from pipeline.models.sources import SourceRefused, check_source

    try:
        source = check_source(name, "embedder")
    except SourceRefused as exc:
        raise StoreError(f"{exc} The bundled '{BUNDLED_EMBEDDER}' works offline.") from None
    if source.kind == "local" and not Path(source.value).is_dir():
        raise StoreError(f"There is no embedder folder at '{name}'.")
    if source.kind == "bundled" or (source.kind == "hub" and os.path.lexists(name)):
        # sentence-transformers would read an id that is also a path in the working directory from disk.
        raise StoreError(f"'{name}' is not an embedder this app can load. Give a hub id such as "
                         f"BAAI/bge-small-en-v1.5, or the bundled '{BUNDLED_EMBEDDER}'.")
    return source


class QueryVectorCache:
    """A bounded, thread-safe LRU of query vectors keyed by (embedder, normalise, text).

    One per process, shared by every session on purpose: a vector depends only on the key, never on who
    asked, and LanceDB makes a new embedder object for each table it opens, so a per-object cache would
    be lost on every reopen.

    >>> cache = QueryVectorCache(2)
    >>> _ = cache.put(("m", True, "a"), [1.0]), cache.put(("m", True, "b"), [2.0])
    >>> cache.get(("m", True, "a"))
    (1.0,)
    >>> _ = cache.put(("m", True, "c"), [3.0]); cache.get(("m", True, "b")) is None  # least recently used goes
    True
    """

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            vector = self._items.get(key)
            if vector is not None:
                self._items.move_to_end(key)
            return vector

    def put(self, key, vector) -> tuple:
        stored = tuple(float(x) for x in vector)  # immutable: callers can't alter a cached vector
        with self._lock:
            self._items[key] = stored
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return stored

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


query_vectors = QueryVectorCache(QUERY_CACHE_SIZE)


_registered: list = []  # the registered class, once per process (the registry refuses a name twice)
_register_lock = threading.Lock()


def register_embedder():
    """Make the studio's embedder known to LanceDB's registry (a table's schema names it) and return its
    class. Done on first use, not at import: importing lancedb costs seconds that the app's start-up does
    not pay."""
    with _register_lock:
        if not _registered:
            _registered.append(_define_embedder())
        return _registered[0]


def _define_embedder():
    from lancedb.embeddings import register
    from lancedb.embeddings.sentence_transformers import SentenceTransformerEmbeddings

    @register(REGISTRY_NAME)
    class StudioSentenceTransformer(SentenceTransformerEmbeddings):
        """LanceDB's sentence-transformers embedder, with the bundled model addressed by a portable name
        (the table's metadata stores 'bundled/all-MiniLM-L6-v2', not a site-packages path), a fast, clear
        failure when a hub model can't be fetched, and a cache of query vectors (the query is most of a
        warm search's time)."""

        trust_remote_code: bool = False

        def get_embedding_model(self):
            # Looked up in this module at call time, so a test's stand-in model is what loads.
            return load_sentence_model(self.name)

        def compute_query_embeddings(self, query, *args, **kwargs):
            if not isinstance(query, str):  # a list of queries: not what the tab sends, computed as usual
                return super().compute_query_embeddings(query, *args, **kwargs)
            key = (self.name, self.normalize, query)
            vector = query_vectors.get(key)
            if vector is None:
                vector = query_vectors.put(key, super().compute_query_embeddings(query, *args, **kwargs)[0])
            return [list(vector)]

    return StudioSentenceTransformer
