"""The check of an answer against the films it was given, on answers of the shapes the bundled model writes
(the prompt's own "[n] Title (year, genre, dir. name)" format, often cut off by the token limit)."""

from __future__ import annotations

import pytest

from pipeline.rewards.grounding import FilmDetails, GivenFilm, check_answer
from retrieval.rag import build_messages
from retrieval.search import Hit

HITS = [
    Hit(1, "Dune", 2021, "Science Fiction", "Denis Villeneuve", "Paul Atreides goes to the desert planet Arrakis.", .2),
    Hit(2, "Star Wars", 1977, "Science Fiction", "George Lucas", "Luke Skywalker leaves Tatooine in 1977.", .3),
    Hit(3, "Forrest Gump", 1994, "Drama", "Robert Zemeckis", "A kind man tells his life story on a bench.", .4),
]
SOURCE = build_messages("Which film from 2021 is this: the desert planet?", HITS)[-1]["content"]


def said(answer: str) -> list[str]:
    return [item.said for item in check_answer(answer, HITS, SOURCE)]


@pytest.mark.parametrize("answer", [
    "Film: [1] Dune (2021, Science Fiction, dir. Denis Villeneuve)",
    "Film: [1] Dune (2021, Science Fiction, dir. Denis Vill",  # cut off by the token limit
    "Film: [3] Forrest Gump (1994, Dra",
    "Dune [1] is about Paul Atreides; Star Wars (1977) [2] came out in 1977.",
    "The Dune (2021) film, directed by Denis Villeneuve.",
    "I'd say *Star Wars*, the question's year 2021 notwithstanding.",
    "",
])
def test_answers_true_to_the_films_pass(answer):
    assert said(answer) == []


def test_the_right_number_with_another_films_details_is_caught():
    items = check_answer("Film: [2] Star Wars (1977, Science Fiction, dir. Denis Villeneuve", HITS, SOURCE)
    assert [item.why for item in items] == ["[2] is Star Wars (1977, Science Fiction, dir. George Lucas)"]
    assert said("Film: [3] Forrest Gump (1994, Thriller, dir. Robert Zemeckis)") == [
        "[3] Forrest Gump (1994, Thriller, dir. Robert Zemeckis)"]
    assert said("Film: [1] Star Wars (2021, Science Fiction, dir. Denis Villeneuve)") != []


def test_films_and_facts_from_outside_the_list_are_caught():
    assert said("The film is: The Shawshank Redemption (1994, Drama, dir. Frank Darabont") == [
        "The Shawshank Redemption"]
    assert said("[4] Alien (1979)") == ["[4]", "Alien"]
    assert said("It was shot in 1962 and directed by Ridley Scott.") == ["1962", "Ridley Scott"]
    assert said('Like "Blade Runner", [1] is set in a desert.') == ["Blade Runner"]


def test_every_problem_is_listed_once_in_reading_order():
    answer = "[5] and 1999, then [5] again in 1999, Dune (1999)"
    assert said(answer) == ["[5]", "1999", "Dune (1999)"]


def test_names_the_films_do_not_have_are_caught_and_their_own_names_pass():
    hits = HITS + [Hit(4, "The Shining", 1980, "Horror", "Stanley Kubrick", "Jack Torrance keeps a hotel.", .5)]
    source = build_messages("Who directed the film about a haunted hotel?", hits)[-1]["content"]
    answer = "The director was: 1) Stanley Kubric; 2) Stanley Kubrick; 3) Michael Douglas. Jack Torrance and Paul stay."
    assert [item.said for item in check_answer(answer, hits, source)] == ["Stanley Kubric", "Michael Douglas"]
    # A misspelt name is only forgiven where the answer stops in the middle of it (the token limit).
    assert check_answer("The director was Stanley Kubr", hits, source) == []


def test_genres_and_ordinary_capitalised_words_read_as_what_they_are():
    items = check_answer("Genre: Thriller\nDirector: Denis Villeneuve\nBoth Dune and Star Wars. Like Blade Runner, "
                         "I'd call it a Film.", HITS, SOURCE)
    assert [(item.said, item.why) for item in items] == [("Thriller", "no film given is in this genre"),
                                                         ("Blade Runner", "no film given has this name")]


def test_a_title_on_the_line_before_a_films_details_is_not_read_as_part_of_its_title():
    assert said("Dune (2021) - 20 Films\nFrozen (1963) - 1 Film") == ["Frozen"]


def test_the_films_of_an_answer_prompt_read_back_as_they_were_given():
    from pipeline.rewards.grounding import films_in_prompt

    films = [(h.title, h.release_year, h.genre, h.director) for h in HITS]
    assert [(f.title, f.release_year, f.genre, f.director) for f in films_in_prompt(SOURCE)] == films


def test_the_film_details_reward_on_the_movie_questions_prompts():
    import json
    from pathlib import Path

    from pipeline.rewards import FilmDetails

    row = json.loads((Path(__file__).resolve().parents[2] / "assets/prompts/movies.jsonl").read_text().splitlines()[0])
    number = row["candidates"].index(row["answer"]) + 1
    line = next(text for text in row["prompt"][-1]["content"].splitlines() if text.startswith(f"[{number}] "))
    right = line.split("):")[0] + ")"  # "[3] The Kid (1921, Comedy, dir. Charlie Chaplin)", as the prompt lists it
    year = right.split("(")[1][:4]
    answers = [right, right[:-5],  # cut off by the token limit
               right.replace(year, "1899"), "I do not know.", f"[{len(row['candidates']) + 1}]"]
    assert FilmDetails()(answers, prompts=[row["prompt"]] * 5) == [1.0, 1.0, 0.0, 0.0, 0.0]
    # As a penalty: only the answers that invent something lose, naming nothing costs nothing.
    assert FilmDetails(penalty=True)(answers, prompts=[row["prompt"]] * 5) == [0.0, 0.0, -1.0, 0.0, -1.0]


def test_every_place_a_problem_is_said_is_marked_in_the_answer():
    from pipeline.rewards.grounding import marked

    answer = "1) Michael Douglas; 2) Denis Villeneuve; 3) Michael Douglas"
    items = check_answer(answer, HITS, SOURCE)
    assert [item.said for item in items] == ["Michael Douglas"] and len(items[0].where) == 2
    assert marked(answer, items) == ("1) <mark title=\"no film given has this name\">Michael Douglas</mark>; "
                                     "2) Denis Villeneuve; 3) <mark title=\"no film given has this name\">Michael "
                                     "Douglas</mark>")
    assert marked(answer, []) == answer


def test_a_nationality_the_films_lack_is_reported_as_a_claim_not_a_name():
    hits = [GivenFilm("Seven Samurai", 1954, "Action", "Akira Kurosawa")]
    source = "[1] Seven Samurai (1954, Action, dir. Akira Kurosawa): Farmers hire samurai to defend their village."
    items = check_answer("[1] is a Japanese film about samurai.", hits, source)
    assert [(item.said, item.why) for item in items] == [("Japanese", "no film given mentions this")]
    # Still something the films given do not say: film_details scores it as before.
    prompt = [{"role": "user", "content": source}]
    assert FilmDetails()(["[1] is a Japanese film about samurai."], prompts=[prompt]) == [0.0]
    # Said in a plot, it is supported.
    assert check_answer("[1] is Japanese.", hits, source.replace("Farmers", "Japanese farmers")) == []


def test_a_sentence_opened_after_a_closing_quote_or_by_a_contraction_is_not_a_name():
    """'… as "Dune." They're …': the capital of "They're" is the sentence's, as after a plain full stop; and a
    contraction of an ordinary opener ("They're", "It'll") is no name anywhere. A real name there still is."""
    assert said('It is known as "Dune." They\'re sent to Arrakis, and we\'re told They\'ll stay.') == []
    assert said("Paul goes to 'Arrakis.' Norman Bates is next.") == ["Norman Bates"]
