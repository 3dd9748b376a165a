"""The Train and RAG tabs' own upload type check, behind Gradio's: each tab's handler is called directly (as any
caller that gets past the component's `file_types` would reach it) with files of a type the tab does not read.
It answers with its own message and copies nothing under the data directory. `.txt` is the sharp case: the RAG
reader would parse a .txt as CSV, so only the tab's check keeps it out."""

import pytest

from pipeline.run_folder import runs

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


@pytest.mark.parametrize("name", ["films.txt", "films.exe", "prompts.xlsx"])
def test_train_tab_refuses_other_file_types_itself(own_data, tmp_path, name):
    from ui.train_form import store_upload

    stored, prompt_col, answer_col, message = store_upload(str(upload_file(tmp_path, name)))
    assert message == f"❌ {name}: use a .csv, .tsv, .jsonl, .json file."
    assert stored == "" and prompt_col.choices == [] and answer_col.choices == []
    assert stored_uploads(own_data) == []


@pytest.mark.parametrize("name", ["films.txt", "films.exe", "films.json"])
def test_rag_tab_refuses_other_file_types_itself(own_data, tmp_path, name):
    from retrieval.store import MovieStore
    from ui import rag_table as rag_ui

    _, receive_upload, *_ = rag_ui.make_table_handlers(MovieStore(tmp_path / "db", table_name="t"))
    stored, message, *drops = receive_upload(str(upload_file(tmp_path, name)))
    assert message == f"⚠️ {name}: use a .csv, .tsv, .jsonl file."
    assert stored is None and all(d.choices == [] for d in drops)
    assert stored_uploads(own_data) == []


def test_both_tabs_take_a_csv(own_data, tmp_path):
    """The same handlers with an accepted type do store it: the refusals above are the type check's."""
    from retrieval.store import MovieStore
    from ui import rag_table as rag_ui
    from ui.train_form import store_upload

    films = upload_file(tmp_path, "films.csv")
    stored, _, _, message = store_upload(str(films))
    assert message == "✓ films.csv: 3 columns." and stored
    _, receive_upload, *_ = rag_ui.make_table_handlers(MovieStore(tmp_path / "db", table_name="t"))
    stored, message, *_ = receive_upload(str(films))
    assert stored["name"] == "films.csv" and message.startswith("films.csv: 3 columns.")
    assert len(stored_uploads(own_data)) == 2


def test_the_shared_upload_helper_checks_copies_and_names(own_data, tmp_path):
    """ui/uploads.py is the one place both tabs check, copy and name an upload."""
    from ui import uploads

    with pytest.raises(uploads.UploadRefused, match=r"^films\.txt: use a \.csv, \.tsv file\.$"):
        uploads.store_upload(str(upload_file(tmp_path, "films.txt")), [".csv", ".tsv"])
    assert stored_uploads(own_data) == [] and uploads.store_upload(None, [".csv"]) is None
    stored = uploads.store_upload(str(upload_file(tmp_path, "My Films.CSV")), [".csv"])
    assert stored.path.parent == own_data / "uploads" and stored.path.read_text() == CSV
    assert stored.name == "My Films.CSV" and stored.tell(f"{stored.path.name}: bad row 2") == "My Films.CSV: bad row 2"
    stored.discard()
    assert stored_uploads(own_data) == []


@pytest.mark.parametrize("tab", ["train", "rag"])
def test_an_unreadable_upload_is_named_as_given_and_not_kept(own_data, tmp_path, tab):
    from retrieval.store import MovieStore
    from ui import rag_table as rag_ui
    from ui.train_form import store_upload

    bad = tmp_path / "broken.jsonl"
    bad.write_text("{not json\n")
    if tab == "train":
        stored, *_, message = store_upload(str(bad))
    else:
        _, receive_upload, *_ = rag_ui.make_table_handlers(MovieStore(tmp_path / "db", table_name="t"))
        stored, message, *_ = receive_upload(str(bad))
    assert not stored and "broken.jsonl" in message, message
    assert stored_uploads(own_data) == []
