"""The relevance set and the pure parts of the better search modes: no embedder, no database."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from retrieval import movies
from retrieval.chunks import MAX_CHUNKS_PER_FILM, split_plot
from retrieval.glossary import expand
from retrieval.search import DEFAULT_MODE, blend, search_modes, rrf_fuse

BENCH = Path(__file__).resolve().parents[2] / "bench" / "rag_relevance.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("rag_relevance", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def test_relevance_set_parses_and_every_expected_film_is_bundled_and_inside_its_filters(bench):
    cases = bench.load_cases()
    assert len(cases) >= 40
    films = {(m.title, m.release_year): m for m in movies.load_bundled()}
    genres = {m.genre for m in films.values()}
    for case in cases:
        assert set(case.genres) <= genres, case.query
        for title, year in case.expected:
            film = films.get((title, year))
            assert film is not None, f"{title} ({year}) is not a bundled film: {case.query}"
            # A case whose answer its own filters exclude could never be found.
            assert case.year_min is None or film.release_year >= case.year_min, case.query
            assert case.year_max is None or film.release_year <= case.year_max, case.query
            assert not case.genres or film.genre in case.genres, case.query
    assert len({c.query for c in cases}) == len(cases)
    assert len({c.kind for c in cases}) == len(bench.KINDS)  # every kind of query is represented
    by_query = {c.query: c for c in cases}
    # The two misses first seen in the RAG tab, with their caps.
    assert by_query["the protagonist turns out to be the bad guy"].expected == (("Angel Heart", 1987),)
    assert by_query["the protagonist turns out to be the bad guy"].year_max == 1989
    assert by_query["A man discovers that the friend who helped him was his own invention"].expected == (
        ("Fight Club", 1999),)
    assert by_query["A man discovers that the friend who helped him was his own invention"].year_max == 1999


def test_a_malformed_case_names_its_line(bench, tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps({"query": "a heist", "expected": [{"title": "Heat", "year": 1995}],
                                "kind": "theme"}) + "\n" + '{"query": "no answer", "kind": "theme"}\n')
    with pytest.raises(ValueError, match="line 2"):
        bench.load_cases(path)


def test_scores_count_any_expected_film_and_reciprocal_rank(bench):
    case = bench.Case("q", (("A", 1), ("B", 2)))
    assert bench.rank_of(case, [("C", 3), ("B", 2), ("A", 1)]) == 2
    assert bench.rank_of(case, [("C", 3)]) is None
    assert bench.scores([1, 2, None, 6]) == {"recall@1": 0.25, "recall@5": 0.5,
                                             "mrr": pytest.approx((1 + 0.5 + 1 / 6) / 4)}


def test_every_bundled_plot_splits_into_bounded_sentences():
    for film in movies.load_bundled():
        parts = split_plot(film.plot)
        assert 1 <= len(parts) <= MAX_CHUNKS_PER_FILM
        assert " ".join(parts) == " ".join(film.plot.split())  # nothing lost, nothing added
    long_plot = " ".join(f"Sentence number {i} says something new." for i in range(100))
    assert len(split_plot(long_plot)) == MAX_CHUNKS_PER_FILM


def test_fusion_and_blend_order():
    # An id ranked well by both lists beats one ranked first by only one of them.
    assert [i for i, _ in rrf_fuse([[1, 2, 3], [2, 3, 1]], k=60)] == [2, 1, 3]
    assert [i for i, _ in rrf_fuse([[1, 2], [3]], k=60)] == [1, 3, 2]  # tie 1/61 each: lower id first
    assert [i for i, _ in blend({1: 0.5, 2: 0.4}, {1: 0.3, 2: 0.6}, 0.5)] == [2, 1]
    assert [i for i, _ in blend({1: 0.5, 2: 0.4}, {1: 0.3, 2: 0.6}, 0.0)] == [1, 2]  # weight 0 = plot only


def test_glossary_widens_craft_terms_only():
    text, added = expand("the protagonist turns out to be the bad guy")
    assert text.startswith("the protagonist turns out to be the bad guy ")
    assert {"villain", "killer", "twist"} <= set(added)
    assert expand("A man discovers that the friend who helped him was his own invention")[1][:2] == [
        "imaginary", "hallucination"]
    assert expand("a shark terrorises a beach town")[1] == []
    assert expand("Maid in the house")[1] == []  # 'ai' matches whole words only, not inside 'maid'
    assert expand("an AI falls in love")[1][:2] == ["robot", "machine"]


def test_the_default_mode_is_one_of_the_modes():
    assert DEFAULT_MODE in search_modes
