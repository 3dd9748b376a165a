"""Search the movie table: query text plus filters (release years, genres, top-k) applied as a prefilter
before the vector search. Filters are typed values checked against what the table holds, turned into a
LanceDB expression with `col`/`lit`; no user text is ever pasted into a SQL string."""

from __future__ import annotations

from dataclasses import dataclass, field

from retrieval.movies import FIELDS, YEAR_RANGE, Movie

MAX_TOP_K = 50
MAX_QUERY_CHARS = 2000
MODES = ("vector", "hybrid")
RESULT_COLUMNS = list(FIELDS)
ANN_EF = 64  # recall@10 vs brute force ~0.95 at 50k films (default ef: ~0.80), for a few ms more


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

    distance: float = 0.0    # cosine distance (vector mode; smaller is closer) or fused relevance (hybrid)
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
        table.create_fts_index("plot", replace=True)


def build_query(table, query: str, filters: SearchFilters, mode: str = "vector"):
    """The LanceDB query the app runs (also what bench/rag.py times)."""
    if mode == "hybrid":
        ensure_fts_index(table)
        builder = table.search(query, query_type="hybrid")
    else:
        # ef: HNSW candidates per query when the store built an ANN index (big tables); no effect otherwise.
        builder = table.search(query, query_type="vector").distance_type("cosine").ef(ANN_EF)
    expr = filters.to_expr()
    if expr is not None:
        builder = builder.where(expr, prefilter=True)
    return builder.limit(filters.top_k).select(RESULT_COLUMNS)


def search(table, query: str, filters: SearchFilters, mode: str = "vector") -> list[Hit]:
    """The films closest to `query` among those the filters allow, nearest first."""
    if mode not in MODES:
        raise SearchError(f"Search mode must be one of {', '.join(MODES)}.")
    text = check_query(query)
    rows = build_query(table, text, filters, mode).to_list()
    return [Hit(**{f: r[f] for f in FIELDS},
                distance=float(r["_distance"] if "_distance" in r else r.get("_relevance_score") or 0.0),
                metric="distance" if "_distance" in r else "relevance") for r in rows]
