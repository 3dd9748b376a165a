"""Movie rows for the RAG table: the bundled films, an uploaded CSV with its columns mapped, or the
seed's Wikipedia CSV from the Hub. Every row is checked here, before anything is embedded."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "movies"
BUNDLED_MOVIES = ASSETS / "movies.jsonl"

# The seed's dataset (Wikipedia movie plots with summaries), read through pandas' hf:// support when online.
WIKI_PLOTS_URL = ("hf://datasets/vishnupriyavr/wiki-movie-plots-with-summaries/"
                  "wiki_movie_plots_deduped_with_summaries.csv")

FIELDS = ("id", "title", "release_year", "genre", "director", "plot")
REQUIRED = ("title", "release_year", "plot")
YEAR_RANGE = (1870, 2100)  # the first films to well past today: anything else is a typo or a wrong column
MAX_PLOT_CHARS = 20_000    # the embedder reads the first ~256 tokens anyway; this only keeps rows sane
UNKNOWN = "Unknown"

# Column names people's CSVs use for each field, lower-cased (the Wikipedia CSV's among them).
ALIASES = {
    "id": ("id", "movie_id", "film_id"),
    "title": ("title", "name", "movie", "film", "movie_title"),
    "release_year": ("release_year", "release year", "year", "released"),
    "genre": ("genre", "genres", "category"),
    "director": ("director", "directors", "directed_by"),
    "plot": ("plot", "movie_plot", "summary", "synopsis", "overview", "description", "plot summary"),
}


class MovieDataError(ValueError):
    """A movie file or row that can't be used; the message names the file/row and what to fix."""


@dataclass(frozen=True)
class Movie:
    id: int
    title: str
    release_year: int
    genre: str
    director: str
    plot: str

    def as_row(self) -> dict:
        return {name: getattr(self, name) for name in FIELDS}


def stable_id(title: str, year: int) -> int:
    """An id from title + year, so re-adding the same film (from any file) updates it instead of duplicating.

    >>> stable_id("Psycho", 1960) == stable_id("  psycho ", 1960)
    True
    """
    key = f"{' '.join(title.lower().split())}|{year}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:7], "big") + 1_000_000  # clear of small bundled ids


def normalise_genre(value) -> str:
    """'science fiction' -> 'Science Fiction'; blanks and 'unknown' -> 'Unknown'; 'drama, comedy' -> 'Drama'."""
    text = "" if value is None else str(value).strip()
    if not text or text.lower() in ("unknown", "nan", "none", "-"):
        return UNKNOWN
    first = text.replace("/", ",").split(",")[0].strip()
    return " ".join(w[:1].upper() + w[1:] for w in first.split())[:60] or UNKNOWN


def _year(value, where: str) -> int:
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        raise MovieDataError(f"{where}: release year '{value}' is not a number.") from None
    if number != int(number) or not YEAR_RANGE[0] <= number <= YEAR_RANGE[1]:
        raise MovieDataError(f"{where}: release year {value} is outside {YEAR_RANGE[0]}–{YEAR_RANGE[1]}.")
    return int(number)


def make_movie(raw: dict, where: str) -> Movie:
    """One checked Movie from a dict with FIELDS keys (id, genre and director optional)."""
    title = " ".join(str(raw.get("title") or "").split())
    plot = " ".join(str(raw.get("plot") or "").split())
    if not title or title.lower() == "nan":
        raise MovieDataError(f"{where}: the title is empty.")
    if not plot or plot.lower() == "nan":
        raise MovieDataError(f"{where}: the plot of '{title}' is empty.")
    year = _year(raw.get("release_year"), where)
    raw_id = raw.get("id")
    if raw_id is None or str(raw_id).strip() in ("", "nan"):
        movie_id = stable_id(title, year)
    else:
        try:
            movie_id = int(float(str(raw_id)))
        except ValueError:
            movie_id = stable_id(str(raw_id), 0)  # non-numeric ids (e.g. 'tt0054215') stay stable too
    director = " ".join(str(raw.get("director") or "").split())
    return Movie(id=movie_id, title=title[:300], release_year=year, genre=normalise_genre(raw.get("genre")),
                 director=(director if director and director.lower() != "nan" else UNKNOWN)[:200],
                 plot=plot[:MAX_PLOT_CHARS])


def load_bundled() -> list[Movie]:
    """The films that ship with the app (assets/movies/movies.jsonl, written for this project)."""
    out = []
    with BUNDLED_MOVIES.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                out.append(make_movie(json.loads(line), f"{BUNDLED_MOVIES.name} line {number}"))
    return out


def guess_mapping(columns: list[str]) -> dict[str, str | None]:
    """Field -> column for a file's columns, by the usual names; None where nothing fits.

    >>> guess_mapping(["Release Year", "Title", "Origin/Ethnicity", "Plot"])["release_year"]
    'Release Year'
    """
    lower = {c.strip().lower(): c for c in columns}
    return {field: next((lower[a] for a in names if a in lower), None) for field, names in ALIASES.items()}


def read_table(path: str | Path, max_rows: int | None = None):
    """A pandas DataFrame from a CSV (comma, semicolon or tab separated), TSV or JSONL file, with file-level
    problems explained."""
    import pandas as pd

    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson"):
            frame = pd.read_json(path, lines=True, nrows=max_rows, dtype=False)
        elif suffix in (".csv", ".tsv", ".txt"):
            from pipeline.setup.data import csv_delimiter

            with path.open(encoding="utf-8-sig", errors="replace") as head:
                sep = csv_delimiter(head.readline(), suffix)
            frame = pd.read_csv(path, sep=sep, nrows=max_rows, dtype=str, keep_default_na=False)
        else:
            raise MovieDataError(f"{path.name}: use a .csv, .tsv or .jsonl file (got '{suffix or 'no extension'}').")
    except MovieDataError:
        raise
    except UnicodeDecodeError:
        raise MovieDataError(f"{path.name}: the file is not UTF-8 text. Save it as UTF-8 and try again.") from None
    except Exception as exc:  # noqa: BLE001 - pandas raises many parser error types
        raise MovieDataError(f"{path.name}: could not be read as {suffix[1:].upper()} ({exc}).") from None
    if frame.empty:
        raise MovieDataError(f"{path.name}: the file has no rows.")
    return frame


def rows_from_frame(frame, mapping: dict[str, str | None], source: str,
                    skip_bad: bool = False) -> tuple[list[Movie], list[str]]:
    """Movies from a DataFrame using `mapping` (field -> column). Returns (movies, problems).

    With skip_bad=False the first bad row raises; with True bad rows are left out and listed.
    """
    missing = [f for f in REQUIRED if not mapping.get(f)]
    if missing:
        raise MovieDataError(f"{source}: choose the column that holds {', '.join(missing)} "
                             f"(columns: {', '.join(map(str, frame.columns))}).")
    unknown = [c for c in mapping.values() if c and c not in frame.columns]
    if unknown:
        raise MovieDataError(f"{source}: there is no column named {', '.join(map(repr, unknown))}.")
    movies: dict[int, Movie] = {}
    problems: list[str] = []
    for index, record in enumerate(frame.to_dict("records")):
        raw = {field: record.get(column) for field, column in mapping.items() if column}
        try:
            movie = make_movie(raw, f"{source} row {index + 2}")  # +2: header line, 1-based
        except MovieDataError as exc:
            if not skip_bad:
                raise
            problems.append(str(exc))
            continue
        movies[movie.id] = movie  # the same film twice in one file: the later row wins
    if not movies:
        raise MovieDataError(f"{source}: no usable rows." + (f" First problem: {problems[0]}" if problems else ""))
    return list(movies.values()), problems


def read_movies_file(path: str | Path, mapping: dict[str, str | None] | None = None,
                     skip_bad: bool = True, max_rows: int | None = None,
                     display_name: str | None = None) -> tuple[list[Movie], list[str]]:
    """Movies from a file; messages name it `display_name` (the user's file name for a stored upload)."""
    frame = read_table(path, max_rows)
    mapping = mapping or guess_mapping([str(c) for c in frame.columns])
    return rows_from_frame(frame, mapping, display_name or Path(path).name, skip_bad=skip_bad)


def read_wiki_plots(max_rows: int = 2000) -> tuple[list[Movie], list[str]]:
    """The seed's Wikipedia movie-plot CSV from the Hub (online only; fails fast offline)."""
    from pipeline.models.hub import require_hub

    require_hub("the Wikipedia movie-plots CSV", "The bundled films work offline; or upload a CSV of your own.")
    import pandas as pd

    frame = pd.read_csv(WIKI_PLOTS_URL, nrows=max_rows, dtype=str, keep_default_na=False)
    return rows_from_frame(frame, guess_mapping(list(frame.columns)), "wiki_movie_plots", skip_bad=True)
