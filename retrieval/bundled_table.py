"""The movie table made from the bundled films before anyone searches: `make setup` builds it once, so the RAG tab's
first search answers at once instead of embedding 330 plots and their sentences while the user waits."""

from __future__ import annotations

from retrieval import movies
from retrieval.chunks import PlotChunks
from retrieval.store import MovieStore, Progress, UpsertReport


def ensure_bundled_table(store: MovieStore, progress: Progress | None = None) -> UpsertReport | None:
    """Build the table from the bundled films when there is none. Returns the build's report, or None when a table
    was there already (whatever films it holds: a user's own table is never touched)."""
    if store.table() is not None:
        return None
    return store.upsert(movies.load_bundled(), progress=progress)


def prepare(store: MovieStore) -> tuple[UpsertReport | None, int]:
    """The bundled table when there is no table, and the sentence index the default search mode reads, in line
    with the table. Returns the build's report (None when a table was there) and how many films were chunked."""
    report = ensure_bundled_table(store)
    return report, PlotChunks(store).sync()


def main() -> None:
    """python -m retrieval.bundled_table: the bundled films' table and its sentence index, in the data folder."""
    import logging
    import time

    from pipeline.run_folder.paths import keep_private

    keep_private()  # the table under the data folder: this user's only
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("sentence_transformers").setLevel(logging.WARNING)  # one line for `make setup`, no bars
    start = time.time()
    store = MovieStore()
    report, synced = prepare(store)
    if report is None and not synced:
        print(f"The movie table is ready: {store.info().rows} films ({store.info().uri}).")
    else:
        print(f"Built the movie table from the bundled films in {time.time() - start:.0f} s: {store.info().uri}")


if __name__ == "__main__":
    main()
