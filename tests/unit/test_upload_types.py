"""The Train and RAG tabs' own upload type check, behind Gradio's: each tab's handler is called directly (as any
caller that gets past the component's `file_types` would reach it) with files of a type the tab does not read.
It answers with its own message and copies nothing under the data directory. `.txt` is the sharp case: the RAG
reader would parse a .txt as CSV, so only the tab's check keeps it out."""

import pytest

from pipeline import runs

CSV = "Title,Release Year,Plot\nPaper Moons,2001,A forger fakes the moon. Nobody notices.\n"


@pytest.fixture
def own_data(tmp_path, monkeypatch):
    """A data directory of this test's own, so the uploads folder holds only what these handlers put there."""
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path / "data"))
    return runs.data_dir()


def stored_uploads(data) -> list:
    uploads = data / "uploads"
    return sorted(uploads.iterdir()) if uploads.exists() else []


def upload_file(tmp_path, name: str):
    path = tmp_path / name
    if name.endswith(".exe"):
        path.write_bytes(b"MZ\x90\x00not a table")
    else:
        path.write_text(CSV)
    return path


@pytest.mark.parametrize("name", ["films.txt", "films.exe", "prompts.tsv"])
def test_train_tab_refuses_other_file_types_itself(own_data, tmp_path, name):
    from ui.train import store_upload

    stored, prompt_col, answer_col, message = store_upload(str(upload_file(tmp_path, name)))
    assert message == f"❌ {name}: use a .csv, .jsonl, .json file."
    assert stored == "" and prompt_col.choices == [] and answer_col.choices == []
    assert stored_uploads(own_data) == []


@pytest.mark.parametrize("name", ["films.txt", "films.exe", "films.json"])
def test_rag_tab_refuses_other_file_types_itself(own_data, tmp_path, name):
    from retrieval.store import MovieStore
    from ui import rag as rag_ui

    _, receive_upload, *_ = rag_ui.make_table_handlers(MovieStore(tmp_path / "db", table_name="t"))
    stored, message, *drops = receive_upload(str(upload_file(tmp_path, name)))
    assert message == f"⚠️ {name}: use a .csv, .tsv, .jsonl file."
    assert stored is None and all(d.choices == [] for d in drops)
    assert stored_uploads(own_data) == []


def test_both_tabs_take_a_csv(own_data, tmp_path):
    """The same handlers with an accepted type do store it: the refusals above are the type check's."""
    from retrieval.store import MovieStore
    from ui import rag as rag_ui
    from ui.train import store_upload

    films = upload_file(tmp_path, "films.csv")
    stored, _, _, message = store_upload(str(films))
    assert message == "✓ films.csv: 3 columns." and stored
    _, receive_upload, *_ = rag_ui.make_table_handlers(MovieStore(tmp_path / "db", table_name="t"))
    stored, message, *_ = receive_upload(str(films))
    assert stored["name"] == "films.csv" and message.startswith("films.csv: 3 columns.")
    assert len(stored_uploads(own_data)) == 2
