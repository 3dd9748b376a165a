"""The movie store on a temporary LanceDB database with the bundled embedder: build, prefiltered search,
idempotent upserts, embedder changes, hybrid search, answers from the bundled model."""

import shutil

import pytest

from retrieval import movies
from retrieval.bundled_table import ensure_bundled_table
from retrieval.search import DEFAULT_MODE, SearchError, SearchFilters, search, search_modes
from retrieval.embedder import BUNDLED_EMBEDDER, StoreError, bundled_embedder_dir
from retrieval.store import MovieStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = MovieStore(tmp_path_factory.mktemp("lancedb"))
    seen = []
    # The way `make setup` and the RAG tab's first search build it.
    report = ensure_bundled_table(s, progress=lambda done, total, what: seen.append((done, total)))
    s.build_report, s.progress_seen = report, seen
    return s


def test_build_embeds_every_bundled_film_with_progress(store):
    n = len(movies.load_bundled())
    assert store.build_report.inserted == n and store.build_report.rows == n
    assert store.progress_seen[0] == (0, n) and store.progress_seen[-1] == (n, n)
    assert len(store.progress_seen) > 3  # moves during the build, not only at the end
    info = store.info()
    assert info.rows == n and info.embedder == BUNDLED_EMBEDDER and info.dims == 384
    assert (info.year_min, info.year_max) == (1920, 2024) and "Science Fiction" in info.genres
    # The schema records the embedder through LanceDB's registry, by its portable name.
    meta = store.table().schema.metadata[b"embedding_functions"].decode()
    assert "studio-sentence-transformers" in meta and BUNDLED_EMBEDDER in meta and "site-packages" not in meta


def test_the_bundled_table_is_built_once_and_a_users_own_table_is_left_alone(store, tmp_path):
    rows = store.info().rows
    assert ensure_bundled_table(store) is None and store.info().rows == rows
    own = MovieStore(tmp_path / "db")
    own.upsert([movies.make_movie({"title": "Paper Moons", "release_year": 2001, "genre": "Comedy",
                                   "plot": "A forger fakes the moon landing on a soundstage."}, "test")])
    assert ensure_bundled_table(own) is None and own.info().rows == 1


def test_prefiltered_search_stays_inside_the_year_range(store):
    info = store.info()
    for low, high in ((None, 1989), (1990, 1999), (2015, None)):
        f = SearchFilters.parse(low, high, top_k=20, known_genres=info.genres)
        hits = search(store.table(), "the protagonist turns out to be the bad guy", f)
        assert len(hits) == 20
        assert all((low is None or h.release_year >= low) and (high is None or h.release_year <= high) for h in hits)
        assert [h.distance for h in hits] == sorted(h.distance for h in hits)


def test_prefilter_is_applied_before_the_search(store):
    # A narrow filter still fills top-k from inside it (a post-filter on the global top-k would come back short).
    info = store.info()
    f = SearchFilters.parse(1920, 1929, ["Comedy"], top_k=50, known_genres=info.genres)
    hits = search(store.table(), "a spaceship crew fights an alien", f)
    expected = sum(1 for m in movies.load_bundled() if 1920 <= m.release_year <= 1929 and m.genre == "Comedy")
    assert expected >= 2 and len(hits) == expected
    assert {h.genre for h in hits} == {"Comedy"}


def test_search_finds_the_obvious_film(store):
    hits = search(store.table(), "a shark terrorises a beach town", SearchFilters.parse(top_k=3))
    assert "Jaws" in [h.title for h in hits]


@pytest.mark.parametrize("query", ["it's a \"twist\" ' OR 1=1 --", "`drop` table; \\", "a AND b OR NOT c (",
                                   '"unbalanced', "genre = 'Horror'"])
@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_hostile_queries_neither_break_nor_widen(store, query, mode):
    f = SearchFilters.parse(1950, 1959, ["Thriller"], top_k=50, known_genres=store.info().genres)
    hits = search(store.table(), query, f, mode)
    assert hits and all(1950 <= h.release_year <= 1959 and h.genre == "Thriller" for h in hits)


def test_hostile_genre_is_refused_before_the_database(store):
    with pytest.raises(SearchError, match="Unknown genre"):
        SearchFilters.parse(genres=["Thriller' OR 1=1 --"], known_genres=store.info().genres)


def test_repeated_upsert_keeps_the_row_count(store):
    n = store.table().count_rows()
    again = store.upsert(movies.load_bundled())
    assert (again.inserted, again.updated, again.unchanged, again.rows) == (0, 0, n, n)
    assert again.embedded == 0  # unchanged rows are not embedded again


def test_upload_adds_and_updates_by_id(store, tmp_path):
    n = store.table().count_rows()
    path = tmp_path / "mine.csv"
    path.write_text("Title,Release Year,Plot,Genre\n"
                    "Paper Moons,1850,A forger fakes the moon landing. Nobody notices.,Comedy\n"
                    "Lantern Street,1999,A night watchman guards an empty street. A stranger arrives.,drama\n",
                    encoding="utf-8")
    films, problems = movies.read_movies_file(path)
    assert [f.title for f in films] == ["Lantern Street"] and "1850" in problems[0]
    first = store.upsert(films)
    second = store.upsert(films)
    assert (first.inserted, second.inserted, second.rows) == (1, 0, n + 1)
    changed = [movies.Movie(**{**films[0].as_row(), "plot": "A night watchman guards a street. It is haunted."})]
    third = store.upsert(changed)
    assert (third.updated, third.rows) == (1, n + 1)
    hit = search(store.table(), "a haunted street watchman", SearchFilters.parse(1999, 1999, top_k=1))[0]
    assert hit.title == "Lantern Street" and "haunted" in hit.plot


def test_unknown_embedder_fails_clearly_and_keeps_the_table(store):
    n = store.table().count_rows()
    with pytest.raises(StoreError, match="not-a-real/embedder"):
        store.rebuild("not-a-real/embedder")
    assert store.table().count_rows() == n and store.info().embedder == BUNDLED_EMBEDDER


def test_changing_the_embedder_rebuilds_with_the_new_vector_size(tmp_path):
    # A second, offline embedder with another vector size: the bundled encoder plus a 128-d projection.
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense

    base = SentenceTransformer(str(bundled_embedder_dir()), device="cpu")
    from pipeline.run_folder.paths import data_dir

    small_dir = data_dir() / "embedders" / "minilm-128"  # a local embedder is read from under the data folder
    SentenceTransformer(modules=[base[0], base[1], Dense(384, 128)], device="cpu").save(str(small_dir))

    s = MovieStore(tmp_path / "db")
    films = movies.load_bundled()[:40]
    s.upsert(films)
    assert s.info().dims == 384
    report = s.upsert(films[:5], embedder=str(small_dir))  # a different embedder: the whole table is redone
    info = s.info()
    assert (info.embedder, info.dims, info.rows) == (str(small_dir), 128, 40)
    assert report.rows == 40
    vectors = s.table().search().select(["vector"]).limit(100).to_arrow()["vector"].to_pylist()
    assert {len(v) for v in vectors} == {128}
    hits = search(s.table(), films[3].plot, SearchFilters.parse(top_k=1))
    assert hits[0].title == films[3].title
    s.rebuild(BUNDLED_EMBEDDER)
    assert s.info().dims == 384 and s.info().rows == 40


def test_answer_streams_from_the_bundled_model(store, bundled_model_dir):
    from pipeline.setup.config import BUNDLED_MODEL_ID
    from pipeline.models.loading import load_model
    from retrieval.rag import build_messages, films_used, stream_answer

    f = SearchFilters.parse(year_max=1989, top_k=3)
    query = "What's common in movies where the protagonist turns out to be the bad guy?"
    hits = search(store.table(), query, f)
    assert "Question: " + query in build_messages(query, hits)[-1]["content"]
    model, tokenizer = load_model(BUNDLED_MODEL_ID)
    pieces = list(stream_answer(model, tokenizer, query, hits, max_new_tokens=40))
    assert len(pieces) > 3 and pieces[-1].startswith(pieces[0]) and len(pieces[-1].split()) > 5
    assert all(1 <= n <= 3 for n in films_used(pieces[-1], hits))


def test_an_answer_with_no_text_says_so_beside_the_base_models(store, tiny_model_dir):
    """The RAG tab's tuned-vs-base answers: a tuned model that ends without a word (the two-layer random one,
    greedy) gets a notice in its column instead of an empty box; the base model beside it answers as usual."""
    import shutil

    from pipeline.training.generate import EMPTY_REPLY, ModelCache
    from ui import rag as rag_ui

    from .helpers import evaluable_run

    run_dir = evaluable_run("empty-answer", tiny_model_dir)
    try:
        _, do_answer = rag_ui.make_handlers(store, ModelCache())
        steps = list(do_answer("a detective solves a murder", 0, 0, [], 3, "vector", f"run:{run_dir.name}", True,
                               8, 0.0, 1.0))
    finally:
        shutil.rmtree(run_dir)  # a finished run would be every later test's default model
    _, _, tuned, notes, _, base = steps[-1]
    assert tuned.startswith("**Tuned:") and EMPTY_REPLY in tuned, tuned
    assert base.startswith("**Base:") and EMPTY_REPLY not in base and len(base.split()) > 3, base
    assert "Checked against" not in notes.split("Base:")[0], notes  # an empty answer has nothing to check


# ---- search modes, and LanceDB's scoring-column warning ------------------------------------------------

@pytest.fixture(scope="module")
def bundled(movie_table, tmp_path_factory):
    """The bundled films' table with its sentence index as `make setup` leaves them (the session's, copied): the
    build is checked above, and embedding every sentence again would cost about 20 s."""
    target = tmp_path_factory.mktemp("bundled") / "lancedb"
    shutil.copytree(movie_table, target)
    return MovieStore(target)


@pytest.fixture(scope="module")
def chunks(bundled):
    from retrieval.chunks import PlotChunks

    index = PlotChunks(bundled)
    assert index.sync() == 0  # already follows the table
    return index


@pytest.mark.parametrize("mode", search_modes.names())
def test_every_mode_keeps_the_prefilter_and_fills_top_k_from_inside_it(bundled, chunks, mode):
    info = bundled.info()
    for low, high, genres in ((None, 1989, []), (1990, 1999, ["Thriller", "Crime"]), (2015, None, ["Horror"])):
        f = SearchFilters.parse(low, high, genres, top_k=8, known_genres=info.genres)
        hits = search(bundled.table(), "the protagonist turns out to be the bad guy", f, mode, chunks=chunks)
        inside = [m for m in movies.load_bundled() if (low is None or m.release_year >= low)
                  and (high is None or m.release_year <= high) and (not genres or m.genre in genres)]
        assert len(hits) == min(8, len(inside)), (mode, low, high, genres)
        assert all((low is None or h.release_year >= low) and (high is None or h.release_year <= high)
                   and (not genres or h.genre in genres) for h in hits), (mode, [h.label for h in hits])
        assert len({h.id for h in hits}) == len(hits)  # a film found by several sentences appears once
    # A window narrower than top-k gives every film in it, and nothing from outside.
    f = SearchFilters.parse(1920, 1929, ["Comedy"], top_k=50, known_genres=info.genres)
    hits = search(bundled.table(), "a spaceship crew fights an alien", f, mode, chunks=chunks)
    expected = {m.id for m in movies.load_bundled() if 1920 <= m.release_year <= 1929 and m.genre == "Comedy"}
    assert {h.id for h in hits} == expected


def test_the_default_mode_finds_the_seeds_twist_query(bundled, chunks):
    # Capped at 1989, plain vector search returns Sherlock Jr., Full Metal Jacket, ... and no Angel Heart.
    f = SearchFilters.parse(year_max=1989, top_k=5, known_genres=bundled.info().genres)
    hits = search(bundled.table(), "the protagonist turns out to be the bad guy", f, DEFAULT_MODE, chunks=chunks)
    assert "Angel Heart" in [h.title for h in hits], [h.label for h in hits]


def test_chunk_index_follows_the_movie_table(tmp_path):
    from retrieval.chunks import PlotChunks, split_plot

    s = MovieStore(tmp_path / "db")
    films = movies.load_bundled()[:12]
    s.upsert(films)
    index = PlotChunks(s)
    assert index.sync() == 12 and index.sync() == 0  # nothing written since: nothing embedded
    assert index.table().count_rows() == sum(len(split_plot(m.plot)) for m in films)
    changed = movies.Movie(**{**films[0].as_row(), "plot": "A lighthouse keeper befriends a talking gull. "
                                                            "The gull turns out to be his drowned brother."})
    s.upsert([changed])
    assert index.sync() == 1  # only the changed film is embedded again
    rows = index.table().search().where(f"film_id = {changed.id}").select(["chunk"]).to_list()
    assert sorted(r["chunk"] for r in rows) == sorted(split_plot(changed.plot))
    hits = search(s.table(), "a seabird is really the keeper's dead brother", SearchFilters.parse(top_k=1), "chunks",
                  chunks=index)
    assert hits[0].title == films[0].title


def test_no_scoring_column_warning_in_any_mode(bundled, chunks, capfd):
    # LanceDB prints "search specified output columns but did not include `_distance`" (a Rust log line, on
    # the process's stderr) when a query selects columns without its score column.
    capfd.readouterr()
    for mode in search_modes.names():
        search(bundled.table(), "a detective hunts a killer", SearchFilters.parse(year_max=1999, top_k=5), mode,
               chunks=chunks)
    err = capfd.readouterr().err
    assert "did not include" not in err and "disable_scoring_autoprojection" not in err, err[-600:]
