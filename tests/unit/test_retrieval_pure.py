"""Filter builder, movie rows and RAG prompt: pure logic, no embedder, no database."""

import pytest

from retrieval import movies
from retrieval.rag import build_messages, films_used, prompt_text
from retrieval.search import Hit, SearchError, SearchFilters, check_query

GENRES = ["Drama", "Horror", "Science Fiction", "Thriller"]
HOSTILE = ["Drama' OR 1=1 --", "Drama\" OR \"1\"=\"1", "`genre`", "x'); DROP TABLE movies; --", "' OR ''='",
           "Horror OR 1=1", "\\'", "Drama\x00"]


# ---- filters -----------------------------------------------------------------------------------

def test_no_filters_means_no_prefilter():
    f = SearchFilters.parse(known_genres=GENRES)
    assert f.to_expr() is None and f.top_k == 5


def test_year_range_and_genres_become_typed_expression():
    f = SearchFilters.parse(1950, 1989.0, ["Thriller", "Horror", "Thriller"], "7", known_genres=GENRES)
    assert (f.year_min, f.year_max, f.genres, f.top_k) == (1950, 1989, ("Thriller", "Horror"), 7)
    sql = f.to_expr().to_sql()
    assert "release_year >= 1950" in sql and "release_year <= 1989" in sql
    assert "genre IN ('Thriller', 'Horror')" in sql


@pytest.mark.parametrize("genre", HOSTILE)
def test_hostile_genre_is_refused_by_name(genre):
    with pytest.raises(SearchError, match="Unknown genre"):
        SearchFilters.parse(genres=[genre], known_genres=GENRES)


@pytest.fixture(scope="module")
def hostile_table(tmp_path_factory):
    """A real on-disk LanceDB table whose genres are the hostile strings themselves (2-d vectors: no embedder)."""
    import lancedb
    import pyarrow as pa

    genres = HOSTILE + GENRES
    db = lancedb.connect(tmp_path_factory.mktemp("hostile"))
    return db.create_table("t", data=pa.table({
        "id": list(range(len(genres))), "genre": genres, "release_year": [1950 + i for i in range(len(genres))],
        "vector": [[float(i), 1.0] for i in range(len(genres))]}))


@pytest.mark.parametrize("genre", HOSTILE)
def test_a_real_genre_with_quotes_matches_only_itself(hostile_table, genre):
    # If a table really holds such a genre, the prefilter compares against exactly that one string:
    # values travel as typed literals, never through SQL text.
    f = SearchFilters.parse(genres=[genre], known_genres=HOSTILE + GENRES, top_k=50)
    rows = hostile_table.search([0.0, 1.0]).where(f.to_expr(), prefilter=True).limit(50).to_list()
    assert [r["genre"] for r in rows] == [genre]


def test_year_range_prefilter_on_a_real_table(hostile_table):
    f = SearchFilters.parse(1952, 1955, top_k=50)
    rows = hostile_table.search([0.0, 1.0]).where(f.to_expr(), prefilter=True).limit(50).to_list()
    assert sorted(r["release_year"] for r in rows) == [1952, 1953, 1954, 1955]


@pytest.mark.parametrize("value", ["1990 OR 1=1", "1990; DROP", "'1990'", "19.5", True, [1990], "nan", float("nan")])
def test_years_must_be_whole_numbers(value):
    with pytest.raises(SearchError):
        SearchFilters.parse(year_min=value)


@pytest.mark.parametrize("kwargs, message", [
    (dict(year_min=1995, year_max=1980), "swap"),
    (dict(year_min=1200), "outside"),
    (dict(year_max=3000), "outside"),
    (dict(top_k=0), "Top-k"),
    (dict(top_k=51), "Top-k"),
    (dict(top_k="many"), "Top-k"),
    (dict(genres=[3]), "not a name"),
    (dict(genres="Drama' OR 1=1"), "Unknown genre"),
])
def test_bad_filters_explain_themselves(kwargs, message):
    with pytest.raises(SearchError, match=message):
        SearchFilters.parse(known_genres=GENRES, **kwargs)


def test_blank_years_mean_no_bound():
    f = SearchFilters.parse(year_min="", year_max=None, known_genres=GENRES)
    assert f.year_min is None and f.year_max is None and f.to_expr() is None


def test_describe_reads_like_a_sentence():
    assert SearchFilters.parse(1950, 1989, ["Horror"], 3).describe() == "released 1950–1989; genre Horror; top 3"
    assert SearchFilters.parse(year_min=2000).describe() == "released from 2000; top 5"


@pytest.mark.parametrize("query", ["", "   ", None, "x" * 2001])
def test_query_must_be_present_and_bounded(query):
    with pytest.raises(SearchError):
        check_query(query)


def test_query_text_is_kept_verbatim_apart_from_whitespace():
    assert check_query("  it's a \"twist\"\n OR 1=1 `x` ") == "it's a \"twist\" OR 1=1 `x`"


# ---- movie rows --------------------------------------------------------------------------------

def test_bundled_films_are_valid_and_varied():
    films = movies.load_bundled()
    assert len(films) >= 300 and len({f.id for f in films}) == len(films)
    decades = {f.release_year // 10 * 10 for f in films}
    assert {1920, 1950, 1980, 2000, 2020} <= decades
    assert len({f.genre for f in films}) >= 10
    for film in films:
        sentences = [s for s in film.plot.replace("!", ".").replace("?", ".").split(". ") if s.strip()]
        assert 2 <= len(sentences) <= 6, film.title


def test_mapping_guess_covers_the_wikipedia_csv():
    cols = ["Release Year", "Title", "Origin/Ethnicity", "Director", "Cast", "Genre", "Wiki Page", "Plot"]
    assert movies.guess_mapping(cols) == {"id": None, "title": "Title", "release_year": "Release Year",
                                          "genre": "Genre", "director": "Director", "plot": "Plot"}


def test_csv_rows_are_checked_and_bad_rows_listed(tmp_path):
    path = tmp_path / "films.csv"
    path.write_text("Name,Year,Story,Kind\n"
                    "Alien,1979,A crew finds a creature. It hunts them.,science fiction\n"
                    "Nope,19x9,Something happens. Then more.,drama\n"
                    "Empty,1990,,drama\n"
                    "Alien,1979,The same film again. Updated text.,horror\n", encoding="utf-8")
    mapping = {"title": "Name", "release_year": "Year", "plot": "Story", "genre": "Kind"}
    films, problems = movies.read_movies_file(path, mapping)
    assert [(f.title, f.release_year, f.genre) for f in films] == [("Alien", 1979, "Horror")]
    assert films[0].id == movies.stable_id("alien", 1979)
    assert len(problems) == 2 and "row 3" in problems[0] and "19x9" in problems[0] and "row 4" in problems[1]
    with pytest.raises(movies.MovieDataError, match="row 3"):
        movies.read_movies_file(path, mapping, skip_bad=False)


def test_a_csv_saved_with_semicolons_is_read_by_its_columns(tmp_path):
    path = tmp_path / "films.csv"
    path.write_text("Title;Release Year;Genre;Plot\n"
                    "Alien;1979;horror;\"A crew finds a creature; it hunts them.\"\n", encoding="utf-8")
    films, problems = movies.read_movies_file(path)
    assert [(f.title, f.release_year, f.genre, f.plot) for f in films] == [
        ("Alien", 1979, "Horror", "A crew finds a creature; it hunts them.")] and problems == []


@pytest.mark.parametrize("content, suffix, message", [
    ("", ".csv", "could not be read|no rows"),
    ("title,year\n", ".csv", "no rows"),
    ("a,b\n1,2\n", ".csv", "choose the column"),
    ("x", ".xlsx", "use a .csv"),
    ('{"title": "A", "release_year": 2000, "plot": "One. Two."}\n{"title": ', ".jsonl", "could not be read"),
])
def test_bad_files_name_the_problem(tmp_path, content, suffix, message):
    path = tmp_path / f"films{suffix}"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(movies.MovieDataError, match=message):
        movies.read_movies_file(path)


def test_non_utf8_file_is_explained(tmp_path):
    path = tmp_path / "films.csv"
    path.write_bytes("title,year,plot\nAm\xe9lie,2001,Caf\xe9. Gnome.\n".encode("latin-1"))
    with pytest.raises(movies.MovieDataError, match="UTF-8"):
        movies.read_movies_file(path)


def test_mapping_to_a_missing_column_is_refused(tmp_path):
    path = tmp_path / "films.csv"
    path.write_text("title,year,plot\nA,2000,B. C.\n", encoding="utf-8")
    with pytest.raises(movies.MovieDataError, match="no column named 'Plot'"):
        movies.read_movies_file(path, {"title": "title", "release_year": "year", "plot": "Plot"})


# ---- RAG prompt --------------------------------------------------------------------------------

HITS = [Hit(1, "Psycho", 1960, "Horror", "Alfred Hitchcock", "A secretary steals cash. " * 60, 0.3),
        Hit(2, "Vertigo", 1958, "Thriller", "Alfred Hitchcock", "A detective follows a woman.", 0.4),
        Hit(3, "M", 1931, "Crime", "Fritz Lang", "A city hunts a killer.", 0.5)]


def test_prompt_numbers_every_film_and_clips_long_plots():
    messages = build_messages("Who steals?", HITS, plot_chars=100)
    user = messages[-1]["content"]
    assert messages[0]["role"] == "system" and "[2] Vertigo (1958, Thriller" in user
    first = next(line for line in user.splitlines() if line.startswith("[1]"))
    assert first.endswith("…") and len(first) < 200
    assert user.rstrip().splitlines()[-2] == "Question: Who steals?"
    assert "[system]" in prompt_text(messages) and "[user]" in prompt_text(messages)


def test_prompt_says_when_nothing_matched():
    assert "(no films matched the filters)" in build_messages("q", [])[-1]["content"]


@pytest.mark.parametrize("answer, used", [
    ("See [2] and [3].", [2, 3]),
    ("Film 1 and movie 3 both do it.", [1, 3]),
    ("PSYCHO is the classic case.", [1]),
    ("[9] is not a film we gave it, nor is [0].", []),
    ("Mmm, a mystery.", []),  # a one-letter title never matches inside words
])
def test_films_used(answer, used):
    assert films_used(answer, HITS) == used
