"""The Chat and RAG model lists follow the runs while the page is open: a run that finishes after the page
loaded becomes Model A in Chat (and, tuned on Movie questions, RAG's answering model) without a reload."""

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from pipeline.run_folder import runs
from pipeline.setup.config import DatasetSpec, RunConfig

pytestmark = [pytest.mark.browser]


def finished_run(label: str, source: str, model_dir) -> Path:
    """A run that has just finished, whose merged model is the bundled base (a link): nothing is trained."""
    run_dir = runs.new_run_dir(label)
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
        made.append(finished_run("follow-movies", "movies", bundled_model_dir))
        expect(rag_model).to_have_value(re.compile(re.escape(made[-1].name)), timeout=20_000)
    finally:
        for run_dir in made:
            runs.delete_run(run_dir)
