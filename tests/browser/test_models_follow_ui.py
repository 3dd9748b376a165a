"""The Chat and RAG model lists follow the runs while the page is open: a run that finishes after the page
loaded becomes Model A in Chat (and, tuned on Movie questions, RAG's answering model) without a reload."""

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from pipeline.run_folder import runs
from pipeline.setup.config import DatasetSpec, RunConfig

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser]


def finished_run(label: str, source: str, model_dir, questions: list[str] = ()) -> Path:
    """A run that has just finished, whose merged model is the bundled base (a link): nothing is trained. A Movie
    questions run's held-out `questions` go where the trainer writes them."""
    run_dir = runs.new_run_dir(label)
    if questions:
        runs.write_json_atomic(run_dir / "eval_prompts.json", [{"prompt": [], "question": q} for q in questions])
    runs.write_json_atomic(run_dir / "config.json", RunConfig(dataset=DatasetSpec(source=source)).to_dict())
    (run_dir / "merged").symlink_to(model_dir, target_is_directory=True)
    now = time.time()
    runs.write_status(run_dir, "finished", started_at=now - 60, ended_at=now)
    return run_dir


def test_a_run_that_finishes_while_the_page_is_open_is_offered_in_chat_and_rag(page, app_url, bundled_model_dir):
    page.goto(app_url)
    page.get_by_role("tab", name="Chat").click()
    model_a = page.locator("#chat-model-a input")
    expect(model_a).not_to_have_value("", timeout=30_000)
    page.wait_for_timeout(2_500)  # the tab's first poll has read the lists: what follows is a change
    made = []
    try:
        made.append(finished_run("follow-tldr", "tldr", bundled_model_dir))
        # The tab's poll sees the new model within a second or two; Model A had not been picked, so it follows.
        expect(model_a).to_have_value(re.compile(re.escape(made[-1].name)), timeout=20_000)

        page.get_by_role("tab", name="RAG").click()
        rag_model = page.locator("#rag-model input")
        expect(rag_model).not_to_have_value("", timeout=30_000)
        page.wait_for_timeout(2_500)  # a TL;DR run is no answering model: the choice stays
        expect(rag_model).not_to_have_value(re.compile(re.escape(made[0].name)))
        expect(page.locator("#rag-held-out")).to_be_hidden()  # a base model has no held-out questions
        question = "Which film from 1921 is this: a poor unmarried mother leaves her newborn in a rich family's car."
        made.append(finished_run("follow-movies", "movies", bundled_model_dir, questions=[question]))
        expect(rag_model).to_have_value(re.compile(re.escape(made[-1].name)), timeout=20_000)
        # Its held-out questions are one click away; a click asks it as the run's evaluation does: top 3, no
        # filters, greedy, no repetition penalty, answers as long as the run's completions (its config's cap).
        page.locator("#rag-held-out").get_by_text("Which film from 1921").click()
        expect(page.locator("#rag-query textarea")).to_have_value(question)
        expect(page.locator("#rag-top-k input[type=number]")).to_have_value("3")
        cap = RunConfig().max_completion_length
        page.get_by_role("button", name="Answer settings").click()
        expect(page.locator("#rag-max-tokens input[type=number]")).to_have_value(str(-(-cap // 8) * 8))
        expect(page.locator("#rag-temperature input[type=number]")).to_have_value("0")
        expect(page.locator("#rag-penalty input[type=number]")).to_have_value("1")
        page.screenshot(path=str(ARTIFACTS / "rag-held-out-questions.png"), full_page=True)
    finally:
        for run_dir in made:
            runs.delete_run(run_dir)
