"""Search modes are declared once, in `retrieval.search.search_modes`: a mode registered there is what
`search` runs and what the RAG tab offers, with no second list to edit."""

import pytest

from retrieval.search import SearchError, SearchFilters, SearchMode, search, search_modes


@pytest.fixture
def fake_mode():
    """A mode that finds nothing, registered for one test (the registry is shared by the whole process)."""
    calls = []

    def run(table, text, filters, chunks, *, rrf_k, chunk_weight, widen):
        calls.append((text, widen))
        return []

    search_modes.register(SearchMode("fake", "Fake (test only)", run, "finds nothing", glossary=True))
    yield calls
    search_modes.unregister("fake")


def test_a_registered_mode_is_what_search_runs(fake_mode):
    assert search(None, "  a  detective ", SearchFilters.parse(), "fake") == []
    assert fake_mode == [("a detective", True)]  # the query tidied; the mode's own glossary default


def test_an_unknown_mode_names_the_valid_ones():
    with pytest.raises(SearchError, match="Search mode must be one of chunks\\+keywords, chunks, hybrid, vector."):
        search(None, "a detective", SearchFilters.parse(), "nearest")


def test_a_registered_mode_appears_in_the_rag_tab(fake_mode, tmp_path):
    import gradio as gr

    from pipeline.training.generate import ModelCache
    from retrieval.store import MovieStore
    from ui import rag
    from ui.tab import TabContext

    with gr.Blocks() as demo:
        rag.build(TabContext(ModelCache(capacity=1), MovieStore(tmp_path / "db", table_name="t")))
    radio = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "rag-mode")
    assert ("Fake (test only)", "fake") in radio.choices
    assert [name for _, name in radio.choices] == search_modes.names()


def test_the_rag_header_names_the_table_without_the_servers_paths():
    """Users of a shared app see the RAG tab's header: it names the table's folder inside the app's data folder,
    never the server's absolute path."""
    from pipeline.run_folder.paths import data_dir
    from retrieval.store import StoreInfo
    from ui.rag_table import status_html

    where = data_dir() / "lancedb"
    text = status_html(StoreInfo(rows=3, embedder="e", dims=4, genres=["Drama"], year_min=1999, year_max=2001,
                                 uri=str(where)))
    assert "&lt;data folder&gt;/lancedb" in text and str(data_dir()) not in text, text
    # No table (its folder deleted, or `make setup` skipped): the status says what the first search will do.
    assert "No movie table yet. The first search builds it" in status_html(StoreInfo())
