"""RAG in the browser: a query with a year filter shows results inside the range and a streamed answer."""

import re
import time

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, set_number_in_fold

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def short_answers(page, tokens: str = "48") -> None:
    """Set "Max new tokens" under Answer settings, as a user would: a short answer streams and is checked the same."""
    set_number_in_fold(page, "Answer settings", "rag-max-tokens", tokens)


def test_year_filtered_query_shows_results_and_streams_an_answer(page, app_url):
    page.goto(app_url)
    page.get_by_role("tab", name="RAG").click()
    # The bundled films' table is there before the first search, as `make setup` leaves it.
    expect(page.locator("#rag-status")).to_contain_text("330 films", timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "rag-01-ready.png"), full_page=True)

    short_answers(page)
    page.locator("#rag-query textarea").fill("the protagonist turns out to be the bad guy")
    year_max = page.locator("#rag-year-max input")
    year_max.fill("1989")
    year_max.press("Tab")  # commit the number before the click
    page.locator("#rag-answer").click()

    rows = page.locator("#rag-results-table tr")
    expect(rows).to_have_count(6, timeout=240_000)  # header + top 5
    years = [int(rows.nth(i).locator("td").nth(2).inner_text()) for i in range(1, 6)]
    assert all(year <= 1989 for year in years), years
    expect(page.locator("#rag-results")).to_contain_text("released up to 1989")
    expect(page.locator("#rag-status")).to_contain_text(re.compile(r"\d{3,} films"))

    # The answer streams: seen at several growing lengths.
    answer = page.locator("#rag-answer-text")
    lengths: list[int] = []
    deadline = time.time() + 240
    while time.time() < deadline and len(lengths) < 3:
        text = answer.inner_text().strip()
        if text and "Loading" not in text and "appears here" not in text and (not lengths or len(text) != lengths[-1]):
            lengths.append(len(text))
        time.sleep(0.1)
    assert len(lengths) >= 3 and lengths == sorted(lengths), lengths
    expect(page.locator("#rag-used")).to_have_text(re.compile(r"Drew on|names none"), timeout=240_000)
    # Under it, the answer checked against the films given; what they lack is marked in the answer itself.
    expect(page.locator("#rag-used")).to_contain_text(re.compile(r"Checked against the films given|Not in the films "
                                                                 r"given"))
    marks = answer.locator("mark")
    if "Not in the films given" in page.locator("#rag-used").inner_text():
        expect(marks.first).to_be_visible()
        assert marks.first.get_attribute("title"), "a mark says why on hover"
    else:
        expect(marks).to_have_count(0)

    # The exact prompt is one click away and holds the query and the numbered films.
    page.get_by_text("Prompt sent to the model").click()
    prompt = page.locator("#rag-prompt textarea")
    expect(prompt).to_have_value(re.compile(r"\[1\] .*\(\d{4}, "), timeout=10_000)
    expect(prompt).to_have_value(re.compile(r"Question: the protagonist turns out to be the bad guy"))
    page.screenshot(path=str(ARTIFACTS / "rag-02-answer.png"), full_page=True)


def test_hostile_filter_values_are_refused_not_run(page, app_url):
    page.goto(app_url)
    page.get_by_role("tab", name="RAG").click()
    page.locator("#rag-query textarea").fill("it's a \"twist\" ' OR 1=1 --")
    year_min = page.locator("#rag-year-min input")
    year_min.fill("1995")
    year_min.press("Tab")
    year_max = page.locator("#rag-year-max input")
    year_max.fill("1980")
    year_max.press("Tab")
    page.locator("#rag-search").click()
    expect(page.locator("#rag-results")).to_contain_text("swap them", timeout=240_000)


def upload_films(page, app_url, films) -> None:
    """Open the RAG tab's Movie table and upload a file, as a user would; wait for its columns."""
    page.goto(app_url)
    page.get_by_role("tab", name="RAG").click()
    page.locator("span:has-text('Movie table')").last.click()
    with page.expect_file_chooser() as chooser:
        page.get_by_text("Click to Upload").click()
    chooser.value.set_files(str(films))
    expect(page.get_by_text(f"{films.name}: 4 columns")).to_be_visible(timeout=60_000)


def test_upload_own_films_then_find_one(page, app_url, tmp_path):
    films = tmp_path / "my_films.csv"
    films.write_text("Title,Release Year,Plot,Genre\n"
                     "Paper Moons,2001,A forger fakes the moon landing on a soundstage. Nobody notices for "
                     "thirty years.,Comedy\n"
                     "Bad Row,19x9,Broken year. Still broken.,Drama\n", encoding="utf-8")
    upload_films(page, app_url, films)
    page.get_by_role("button", name="Add these films").click()
    expect(page.get_by_text("1 added")).to_be_visible(timeout=240_000)
    expect(page.get_by_text("my_films.csv row 3: release year '19x9' is not a number")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "rag-03-upload.png"), full_page=True)

    page.locator("#rag-query textarea").fill("a faked moon landing")
    for selector, value in (("#rag-year-min input", "2000"), ("#rag-year-max input", "2002")):
        page.locator(selector).fill(value)
        page.locator(selector).press("Tab")
    page.locator("#rag-search").click()
    first = page.locator("#rag-results-table tr").nth(1)
    expect(first).to_contain_text("Paper Moons", timeout=120_000)


def test_big_upload_shows_time_left_and_cancel_keeps_whole_batches(page, app_url, tmp_path):
    # 600 films = batches of 256, 256 and 88. The time left appears once the first batch is embedded, i.e.
    # while the second one is; Cancel then lets that batch finish and stops before the third.
    films = tmp_path / "many_films.csv"
    lines = ["Title,Release Year,Plot,Genre"]
    for i in range(600):
        lines.append(f"Harbour Story {i},{1950 + i % 70},A ferry pilot numbered {i} keeps a lighthouse log; "
                     f"storm {i} tests the crew and a letter from {i % 17} old friends arrives late.,Drama")
    films.write_text("\n".join(lines) + "\n", encoding="utf-8")
    upload_films(page, app_url, films)
    page.get_by_role("button", name="Add these films").click()
    expect(page.get_by_text(re.compile(r"embedded · \d+ plots/s · about .+ left")).first).to_be_visible(
        timeout=400_000)
    page.screenshot(path=str(ARTIFACTS / "rag-04-upload-eta.png"), full_page=True)
    page.locator("#rag-cancel-ingest").click()
    expect(page.get_by_text("Cancelled after writing 512 of the 600")).to_be_visible(timeout=400_000)
    page.screenshot(path=str(ARTIFACTS / "rag-05-upload-cancelled.png"), full_page=True)


def test_compare_with_base_answers_from_the_same_films_side_by_side(page, app_url, bundled_model_dir):
    """A tuned run as the answering model, *Compare with base* ticked: its base model answers from the same
    retrieved films in a column of its own, each column named."""
    from tests.integration.helpers import evaluable_run

    run_dir = evaluable_run("rag-compare", bundled_model_dir)
    page.goto(app_url)
    page.get_by_role("tab", name="RAG").click()
    page.locator("#rag-model input").click()
    page.get_by_role("option", name=f"{run_dir.name} (tuned, final)", exact=True).click()
    page.locator("#rag-compare input").check()
    short_answers(page)  # two models share the CPU
    page.locator("#rag-query textarea").fill("A story told by someone who is already dead")
    page.locator("#rag-answer").click()
    tuned, base = page.locator("#rag-answer-text"), page.locator("#rag-base-answer-text")
    expect(tuned).to_contain_text(f"Tuned: {run_dir.name}", timeout=240_000)
    expect(base).to_contain_text("Base: bundled/SmolLM2-135M-Instruct", timeout=60_000)
    expect(page.locator("#rag-used")).to_have_text(re.compile(r"Drew on|names none"), timeout=240_000)
    # Each answer checked against the films, under its model's name.
    expect(page.locator("#rag-used")).to_contain_text(re.compile(r"Tuned: (Checked|Not in)"))
    expect(page.locator("#rag-used")).to_contain_text(re.compile(r"Base: (Checked|Not in)"))
    for column in (tuned, base):  # both answered: more than the name and the loading line
        expect(column).not_to_contain_text("Loading the model", timeout=60_000)
    assert len(base.inner_text().strip()) > len("Base: bundled/SmolLM2-135M-Instruct") + 3
    page.screenshot(path=str(ARTIFACTS / "rag-03-compare.png"), full_page=True)

    # Untick it: one column again.
    page.locator("#rag-compare input").uncheck()
    page.locator("#rag-answer").click()
    expect(base).to_be_hidden(timeout=60_000)
