"""Search the movie table: query text plus filters (release years, genres, top-k) applied as a prefilter
before the vector search. Filters are typed values checked against what the table holds, turned into a
LanceDB expression with `col`/`lit`; no user text is ever pasted into a SQL string."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from retrieval.movies import FIELDS, YEAR_RANGE, Movie

MAX_TOP_K = 50
MAX_QUERY_CHARS = 2000
# The search modes are declared once, in `search_modes` at the end of this file: name, the RAG tab's label, the
# function that runs it and its help. bench/rag_relevance.py measures each; docs/rag.md's RAG relevance table
# says why the tab defaults to one.
DEFAULT_MODE = "chunks+keywords"
# Above this many films the tab starts on plain vector search: the sentence table holds about four rows a film
# and its first build costs about four times the upload's own embedding, and bench/rag.py's 50 ms p95 at
# 50,000 films is the vector path (with its ANN index from retrieval.store.ANN_MIN_ROWS, the same size).
SENTENCE_MODES_MAX_ROWS = 10_000
LARGE_TABLE_MODE = "vector"
RESULT_COLUMNS = list(FIELDS)
ANN_EF = 64  # recall@10 vs brute force ~0.95 at 50k films (default ef: ~0.80), for a few ms more
# Selecting the score columns by name adopts LanceDB's future behaviour (no scoring autoprojection), which
# is what stops its "specified output columns but did not include `_distance`" warning on every search.
VECTOR_COLUMNS = RESULT_COLUMNS + ["_distance"]
FTS_COLUMNS = RESULT_COLUMNS + ["_score"]
# Reciprocal-rank fusion constant. LanceDB's default is 60; on bench/rag_relevance.jsonl k = 5 was best for
# both fused modes (--sweep: 5, 20, 60, 100), since a film ranked first by one leg should beat films that
# both legs rank middling. Tuned on the same 57 queries it is reported on (docs/rag.md, RAG relevance).
RRF_K = 5
CHUNK_WEIGHT = 0.5    # chunks mode: score = (1 - w) * plot cosine + w * best sentence cosine
CANDIDATES = 40       # films each leg of a fused search fetches (at least 4 x top-k)


def default_mode(rows: int) -> str:
    """The mode the RAG tab starts on for a table of `rows` films.

    >>> default_mode(330), default_mode(50_000)
    ('chunks+keywords', 'vector')
    """
    return DEFAULT_MODE if rows <= SENTENCE_MODES_MAX_ROWS else LARGE_TABLE_MODE


class SearchError(ValueError):
    """A query or filter that can't be run; the message says what to change."""


def _int_value(value, name: str) -> int | None:
    """An integer from a form value (int, float like 1990.0, numeric string); None when blank."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise SearchError(f"{name} must be a year, not {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SearchError(f"{name} must be a year like 1990, not {str(value)[:40]!r}.") from None
    if number != number or number != int(number):  # NaN or a fraction
        raise SearchError(f"{name} must be a whole year, not {value!r}.")
    return int(number)


@dataclass(frozen=True)
class SearchFilters:
    """Validated filters. Build with `SearchFilters.parse`, which checks every value.

    >>> SearchFilters.parse(year_max=1989, genres=["Thriller"], known_genres=["Thriller", "Drama"]).describe()
    'released up to 1989; genre Thriller; top 5'
    """

    year_min: int | None = None
    year_max: int | None = None
    genres: tuple[str, ...] = field(default_factory=tuple)
    top_k: int = 5

    @classmethod
    def parse(cls, year_min=None, year_max=None, genres=None, top_k=5,
              known_genres: list[str] | None = None) -> "SearchFilters":
        low, high = _int_value(year_min, "From year"), _int_value(year_max, "To year")
        for name, year in (("From year", low), ("To year", high)):
            if year is not None and not YEAR_RANGE[0] <= year <= YEAR_RANGE[1]:
                raise SearchError(f"{name} {year} is outside {YEAR_RANGE[0]}–{YEAR_RANGE[1]}.")
        if low is not None and high is not None and low > high:
            raise SearchError(f"From year {low} is after To year {high}: swap them.")
        if genres is None:
            genres = []
        if isinstance(genres, str):
            genres = [genres]
        if not isinstance(genres, (list, tuple)):
            raise SearchError("Genres must be a list of genre names.")
        picked: list[str] = []
        for genre in genres:
            if not isinstance(genre, str):
                raise SearchError(f"Genre {genre!r} is not a name.")
            if known_genres is not None and genre not in known_genres:
                shown = genre if len(genre) <= 40 else genre[:37] + "..."
                raise SearchError(f"Unknown genre {shown!r}. Pick from: {', '.join(known_genres) or 'none yet'}.")
            if genre not in picked:
                picked.append(genre)
        k = _int_value(top_k, "Top-k")
        if k is None or not 1 <= k <= MAX_TOP_K:
            raise SearchError(f"Top-k must be between 1 and {MAX_TOP_K}.")
        return cls(low, high, tuple(picked), k)

    def to_expr(self):
        """A LanceDB expression for the prefilter, or None when nothing is filtered.

        Values travel as typed literals (`lit`), so a genre holding quotes or `OR 1=1` is just a string.
        """
        from lancedb.expr import col, lit

        parts = []
        if self.year_min is not None:
            parts.append(col("release_year") >= lit(self.year_min))
        if self.year_max is not None:
            parts.append(col("release_year") <= lit(self.year_max))
        if self.genres:
            parts.append(col("genre").isin([lit(g) for g in self.genres]))
        if not parts:
            return None
        expr = parts[0]
        for part in parts[1:]:
            expr = expr & part
        return expr

    def describe(self) -> str:
        bits = []
        if self.year_min is not None and self.year_max is not None:
            bits.append(f"released {self.year_min}–{self.year_max}")
        elif self.year_min is not None:
            bits.append(f"released from {self.year_min}")
        elif self.year_max is not None:
            bits.append(f"released up to {self.year_max}")
        if self.genres:
            bits.append(("genre " if len(self.genres) == 1 else "genres ") + ", ".join(self.genres))
        bits.append(f"top {self.top_k}")
        return "; ".join(bits)


@dataclass(frozen=True)
class Hit(Movie):
    """A film found by a search, with how close it is to the query."""

    # cosine distance (vector; chunks: 1 - the blended cosine; smaller is closer) or fused relevance (hybrid)
    distance: float = 0.0
    metric: str = "distance"

    @property
    def label(self) -> str:
        return f"{self.title} ({self.release_year})"


def check_query(query) -> str:
    text = " ".join(str(query or "").split())
    if not text:
        raise SearchError("Type what the film is about, e.g. 'the narrator turns out to be the killer'.")
    if len(text) > MAX_QUERY_CHARS:
        raise SearchError(f"The query is {len(text)} characters; keep it under {MAX_QUERY_CHARS}.")
    return text


def ensure_fts_index(table) -> None:
    """A full-text index on the plots, for hybrid search (built once; cheap on the bundled table)."""
    if not any(getattr(ix, "columns", None) == ["plot"] and "FTS" in str(getattr(ix, "index_type", "")).upper()
               for ix in table.list_indices()):
        from lancedb.index import FTS

        table.create_index("plot", config=FTS(), replace=True)


def query_vector(table, query: str):
    """The query embedded by the table's own embedder (the one its schema declares)."""
    return table.embedding_functions["vector"].function.compute_query_embeddings(query)[0]


def build_query(table, query, filters: SearchFilters, columns: list[str] | None = None):
    """The prefiltered cosine vector query the app runs (also what bench/rag.py times). `query` is the text
    or its vector."""
    # ef: HNSW candidates per query when the store built an ANN index (big tables); no effect otherwise.
    builder = table.search(query, query_type="vector").distance_type("cosine").ef(ANN_EF)
    expr = filters.to_expr()
    if expr is not None:
        builder = builder.where(expr, prefilter=True)
    return builder.limit(filters.top_k).select(columns or VECTOR_COLUMNS)


def keyword_rows(table, query: str, filters: SearchFilters, limit: int) -> list[dict]:
    """Full-text (BM25) search of the plots, prefiltered. The text is matched as plain words
    (`MatchQuery`): quotes, AND/OR and brackets in a query are never query syntax."""
    from lancedb.query import MatchQuery

    ensure_fts_index(table)
    builder = table.search(MatchQuery(query, "plot"), query_type="fts")
    expr = filters.to_expr()
    if expr is not None:
        builder = builder.where(expr, prefilter=True)
    return builder.limit(limit).select(FTS_COLUMNS).to_list()


def rrf_fuse(rankings: list[list[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal-rank fusion: each list adds 1 / (k + rank) to an id's score; best first.

    >>> rrf_fuse([[7, 3, 5], [3, 9]], k=60)[:2]
    [(3, 0.03252247488101534), (7, 0.01639344262295082)]
    """
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, 1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def blend(plot_sims: dict[int, float], chunk_sims: dict[int, float], weight: float = CHUNK_WEIGHT
          ) -> list[tuple[int, float]]:
    """Chunks mode's film score, best first: (1 - weight) * plot cosine + weight * best chunk cosine.
    A film needs both; a film whose plot has no chunk row yet counts its plot cosine for both.

    >>> blend({1: 0.30, 2: 0.50}, {1: 0.70, 2: 0.40})
    [(1, 0.5), (2, 0.45)]
    """
    scored = {fid: (1 - weight) * sim + weight * chunk_sims.get(fid, sim) for fid, sim in plot_sims.items()}
    return sorted(((f, round(v, 12)) for f, v in scored.items()), key=lambda kv: (-kv[1], kv[0]))


def _hit(row: dict, distance: float, metric: str) -> Hit:
    return Hit(**{f: row[f] for f in FIELDS}, distance=float(distance), metric=metric)


def _fused(table, text: str, filters: SearchFilters, dense: list[Hit], keywords: str, k: int) -> list[Hit]:
    """`dense` (best first) and a keyword search for `keywords`, fused by reciprocal rank."""
    pool = max(CANDIDATES, 4 * filters.top_k)
    sparse = keyword_rows(table, keywords, filters, pool)
    hits = {h.id: h for h in dense}
    rows = {r["id"]: r for r in sparse}
    fused = rrf_fuse([[h.id for h in dense], [r["id"] for r in sparse]], k)
    return [replace(hits[fid], distance=score, metric="relevance") if fid in hits else
            _hit(rows[fid], score, "relevance") for fid, score in fused[:filters.top_k]]


def _wide(filters: SearchFilters, factor: int = 4) -> SearchFilters:
    """The same filters with a candidate pool of at least CANDIDATES (a fused search draws from it)."""
    return replace(filters, top_k=max(CANDIDATES, factor * filters.top_k))


def _chunked(table, text: str, filters: SearchFilters, chunks, weight: float = CHUNK_WEIGHT) -> list[Hit]:
    from lancedb.expr import col, lit

    from retrieval.chunks import MAX_CHUNKS_PER_FILM

    if chunks is None:
        raise SearchError("Chunks mode needs the plot-chunk index; pick Vector or Hybrid.")
    chunks.sync()
    vector = query_vector(table, text)
    # A fused search already asks for a wide top-k; twice that is enough candidates for its dense leg.
    wide = _wide(filters, factor=2)
    pool, expr = wide.top_k, filters.to_expr()
    # Candidates from both sides: the films whose whole plot is close, and those with a close sentence.
    rows = {r["id"]: r for r in build_query(table, vector, wide).to_list()}
    chunk_sims = chunks.best(vector, expr, limit=pool * 4)
    extra = [fid for fid in chunk_sims if fid not in rows]
    if extra:
        only = col("id").isin([lit(int(f)) for f in extra])
        builder = table.search(vector, query_type="vector").distance_type("cosine")
        builder = builder.where(only if expr is None else expr & only, prefilter=True)
        rows.update({r["id"]: r for r in builder.limit(len(extra)).select(VECTOR_COLUMNS).to_list()})
    missing = [fid for fid in rows if fid not in chunk_sims]
    if missing:  # every sentence of these films, to score them exactly
        chunk_sims.update(chunks.best(vector, expr, limit=len(missing) * MAX_CHUNKS_PER_FILM, film_ids=missing))
    plot_sims = {fid: 1.0 - float(r["_distance"]) for fid, r in rows.items()}
    return [_hit(rows[fid], 1.0 - score, "distance") for fid, score in blend(plot_sims, chunk_sims, weight)
            [:filters.top_k]]


def _vector(table, text: str, filters: SearchFilters) -> list[Hit]:
    return [_hit(r, r["_distance"], "distance") for r in build_query(table, text, filters).to_list()]


def _hybrid(table, text: str, filters: SearchFilters, chunks, *, rrf_k: int, chunk_weight: float,
            widen: bool) -> list[Hit]:
    return _fused(table, text, filters, _vector(table, text, _wide(filters)), _keywords(text, widen), rrf_k)


def _chunks(table, text: str, filters: SearchFilters, chunks, *, rrf_k: int, chunk_weight: float,
            widen: bool) -> list[Hit]:
    return _chunked(table, text, filters, chunks, chunk_weight)


def _chunks_keywords(table, text: str, filters: SearchFilters, chunks, *, rrf_k: int, chunk_weight: float,
                     widen: bool) -> list[Hit]:
    dense = _chunked(table, text, _wide(filters), chunks, chunk_weight)
    return _fused(table, text, filters, dense, _keywords(text, widen), rrf_k)


def _vector_mode(table, text: str, filters: SearchFilters, chunks, *, rrf_k: int, chunk_weight: float,
                 widen: bool) -> list[Hit]:
    return _vector(table, text, filters)


def _keywords(text: str, widen: bool) -> str:
    """The keyword leg's text: the query, widened by the storytelling glossary when asked."""
    if not widen:
        return text
    from retrieval.glossary import expand

    return expand(text)[0]


@dataclass(frozen=True)
class SearchMode:
    """One way to search the table. `run(table, text, filters, chunks, *, rrf_k, chunk_weight, widen)` returns
    the hits, best first."""

    name: str
    label: str                       # as the RAG tab names it
    run: Callable[..., list[Hit]]
    help: str
    uses_chunks: bool = False        # needs the sentence table (retrieval/chunks.py) synced before it runs
    glossary: bool = False           # its keyword leg is widened by the glossary unless told otherwise


class SearchModes:
    """The search modes by name, in the order the RAG tab lists them. An unknown name fails with the list of
    valid names.

    >>> [m.name for m in search_modes]
    ['chunks+keywords', 'chunks', 'hybrid', 'vector']
    """

    def __init__(self) -> None:
        self._modes: dict[str, SearchMode] = {}

    def register(self, mode: SearchMode) -> None:
        self._modes[mode.name] = mode

    def unregister(self, name: str) -> None:
        self._modes.pop(name, None)

    def get(self, name: str) -> SearchMode:
        try:
            return self._modes[name]
        except (KeyError, TypeError):
            raise SearchError(f"Search mode must be one of {', '.join(self._modes)}.") from None

    def names(self) -> list[str]:
        return list(self._modes)

    def choices(self) -> list[tuple[str, str]]:
        """(label, name) pairs for a radio button."""
        return [(m.label, m.name) for m in self._modes.values()]

    def __contains__(self, name) -> bool:
        return name in self._modes

    def __iter__(self) -> Iterator[SearchMode]:
        return iter(list(self._modes.values()))


search_modes = SearchModes()
# Best first on bench/rag_relevance.py (docs/rag.md, RAG relevance); the tab defaults to DEFAULT_MODE.
search_modes.register(SearchMode(
    "chunks+keywords", "Sentences + keywords", _chunks_keywords,
    "chunks fused with full-text keywords by reciprocal rank, the keywords widened by the storytelling "
    "glossary (retrieval/glossary.py).", uses_chunks=True, glossary=True))
search_modes.register(SearchMode(
    "chunks", "Sentences (plot + best sentence)", _chunks,
    "the plot's embedding blended with its best sentence's (retrieval/chunks.py).", uses_chunks=True))
search_modes.register(SearchMode(
    "hybrid", "Hybrid (vector + keywords)", _hybrid,
    "the whole plot's embedding and full-text keywords, fused by reciprocal rank."))
search_modes.register(SearchMode(
    "vector", "Vector", _vector_mode, "the whole plot's embedding."))


def search(table, query: str, filters: SearchFilters, mode: str = "vector", chunks=None, *, rrf_k: int = RRF_K,
           chunk_weight: float = CHUNK_WEIGHT, glossary: bool | None = None) -> list[Hit]:
    """The films closest to `query` among those the filters allow, best first. `chunks` (a
    retrieval.chunks.PlotChunks of the same store) is needed for the chunk modes. `rrf_k`, `chunk_weight`
    and `glossary` (widen the keyword leg; on by default in the modes declared with `glossary=True`) are for
    the benchmark."""
    found = search_modes.get(mode)
    text = check_query(query)
    widen = found.glossary if glossary is None else glossary
    return found.run(table, text, filters, chunks, rrf_k=rrf_k, chunk_weight=chunk_weight, widen=widen)
