"""The Movie questions set: questions that don't name their film, a held-out split by film, the title and
citation rewards, and the accuracy / retrieval-recall metric."""

from __future__ import annotations

import re

import pytest

from pipeline.setup.config import RunConfig
from pipeline.setup.presets import PRESETS, apply_preset
from pipeline.setup.data import load_dataset_split, movie_rows, split_rows
from pipeline.setup.movie_questions import PROMPT_TOP_K, QUESTION_PREFIX, question_for
from pipeline.rewards import FilmCitation, MovieTitle, reward_registry
from pipeline.rewards.text import names_title, normalise_title
from pipeline.training.task_metrics import movie_metrics, task_metrics
from retrieval.movies import load_bundled

ROWS = movie_rows()


def _leaks(question: str, title: str) -> bool:
    folded = " " + re.sub(r"[\W_]+", " ", question.lower()) + " "
    long_enough = len(title) >= 4  # "M" or "Her" are inside many words; for them the word checks below count
    return ((long_enough and title.lower() in question.lower()) or names_title(question, title)
            or f" {normalise_title(title)} " in folded)


def test_no_bundled_question_names_its_film():
    leaks = [(r["answer"], r["question"]) for r in ROWS if _leaks(r["question"], r["answer"])]
    assert not leaks
    for film in load_bundled():  # the builder itself, on every bundled film
        question = question_for(film.title, film.plot, film.director, year=film.release_year)
        assert question is None or not _leaks(question, film.title), (film.title, question)


def test_builder_takes_names_and_title_words_out():
    question = question_for("The Birds", "In Bodega Bay, socialite Melanie Daniels is attacked by birds while "
                            "she courts a lawyer named Mitch Brenner in his seaside town.", plot_chars=200)
    assert question.startswith(QUESTION_PREFIX)
    assert not re.search(r"bodega|melanie|daniels|mitch|brenner|\bbirds\b", question, re.I), question
    assert "courts a lawyer" in question


def test_rows_hold_the_rag_prompt_with_the_films_shuffled():
    assert len(ROWS) >= 200 and len({r["film_id"] for r in ROWS}) == len(ROWS)
    for row in ROWS[:20]:
        user = row["prompt"][-1]["content"]
        assert row["question"] in user and "citing the films you use by number" in user
        assert all(f"[{i}] {t} (" in user for i, t in enumerate(row["candidates"], 1))
        assert row["retrieved"] == (row["answer"] in row["candidates"])
    assert {len(r["candidates"]) for r in ROWS} == {PROMPT_TOP_K}
    positions = [r["candidates"].index(r["answer"]) for r in ROWS if r["retrieved"]]
    fair = len(positions) / PROMPT_TOP_K  # position gives nothing away: no slot far above its fair share
    assert max(positions.count(p) for p in range(PROMPT_TOP_K)) < 1.3 * fair


@pytest.mark.parametrize("seed", [1, 2, 3, 42])
def test_held_out_questions_are_about_films_never_trained_on(seed):
    cfg = apply_preset(RunConfig(seed=seed), "Movie questions")
    train, held = load_dataset_split(cfg.dataset, seed)
    assert len(held) >= 40
    assert not {r["film_id"] for r in train} & {r["film_id"] for r in held}
    assert not {r["answer"] for r in train} & {r["answer"] for r in held} - {
        r["answer"] for r in ROWS if sum(x["answer"] == r["answer"] for x in ROWS) > 1}


def test_split_is_by_film_even_with_two_questions_for_a_film():
    rows = [{"prompt": "q", "answer": f"film {i % 10}", "film_id": i % 10} for i in range(20)]
    train, held = split_rows(rows, 0.2, seed=3)
    assert len(rows) == len(train) + len(held)  # one question per film is how the bundled set keeps the split


def test_title_reward_normalises_and_refuses_lists():
    films = ["The Cabinet of Dr. Caligari", "Nosferatu", "Metropolis"]
    got = MovieTitle()(["cabinet of dr caligari [1]", "THE CABINET OF DR. CALIGARI!", "A Cabinet of Dr Caligari",
                        "Caligari", "[1] The Cabinet of Dr. Caligari, [2] Nosferatu, [3] Metropolis", ""],
                       answer=[films[0]] * 6, candidates=[films] * 6)
    assert got == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert MovieTitle()([[{"role": "assistant", "content": "Metropolis [3]"}]], answer=["Metropolis"]) == [1.0]


def test_citation_reward():
    got = FilmCitation()(["Nosferatu [2]", "film 2", "#3", "[1] and [2]", "Nosferatu", "[6]"],
                         candidates=[["a", "b", "c", "d", "e"]] * 6)
    assert got == [1.0, 1.0, 1.0, 0.5, 0.0, 0.0]


def test_preset_is_valid_and_correctness_dominates():
    cfg = apply_preset(RunConfig(), "Movie questions")
    assert cfg.problems() == []
    weights = {r.name: r.weight for r in cfg.rewards}
    assert weights["movie_title"] > 2 * weights["film_citation"] > 0
    assert reward_registry.needs_answer("movie_title") and not reward_registry.needs_answer("film_citation")
    assert "Movie questions" in PRESETS


def test_metrics_accuracy_never_passes_recall():
    rows = [{"answer": "Psycho", "candidates": ["Psycho", "Jaws"], "retrieved": True},
            {"answer": "Heat", "candidates": ["Psycho", "Jaws"], "retrieved": False},
            {"answer": "Jaws", "candidates": ["Psycho", "Jaws"], "retrieved": True}]
    m = task_metrics(rows, ["The film is Psycho [1].", "Heat", "Psycho [1]"])
    assert m["kind"] == "movie" and m["accuracy"] == pytest.approx(1 / 3, abs=1e-3)
    assert m["retrieval_recall"] == pytest.approx(2 / 3, abs=1e-3)
    assert m["per_prompt"] == [1.0, 0.0, 0.0]  # Heat named, but its plot was never retrieved
    every = movie_metrics(ROWS, [r["answer"] for r in ROWS])
    assert every["accuracy"] == every["retrieval_recall"] <= 1.0


def test_preset_credits_only_a_citation_of_the_right_film():
    """Copying the first numbered line whatever the question earns no citation credit: only the right film's
    number does (with any citation credited, runs learned to copy line [1])."""
    cfg = apply_preset(RunConfig(), "Movie questions")
    spec = next(r for r in cfg.rewards if r.name == "film_citation")
    cite = reward_registry.build(spec)
    row = next(r for r in ROWS if r["retrieved"] and r["candidates"].index(r["answer"]) > 0)
    right = row["candidates"].index(row["answer"]) + 1
    first = f"[1] {row['candidates'][0]}"
    scores = cite([first, f"[{right}] {row['answer']}"], answer=[row["answer"]] * 2, candidates=[row["candidates"]] * 2)
    assert scores == [0.0, 1.0]
    assert all(q.startswith(QUESTION_PREFIX + "from ") for q in (r["question"] for r in ROWS))  # the year's clue
