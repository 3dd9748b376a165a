"""Every tab keeps one contract (ui/tab.py): `build(ctx: TabContext) -> Tab`. The app builds the tabs in
order and registers what each hands back, so a new tab is a module with a build() and one entry in
app.tab_builders()."""

import inspect

import pytest


@pytest.fixture
def own_data(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def page_loads(demo) -> list:
    return [f for f in demo.fns.values() if any(event == "load" for _, event in f.targets)]


def test_a_new_tab_is_built_and_its_page_load_registered(own_data):
    import gradio as gr

    import app
    from ui.tab import PageLoad, Tab, TabContext

    seen = []

    def greet():
        return "hello"

    def build(ctx: TabContext) -> Tab:
        seen.append(ctx)
        with gr.Tab("Fake", id="fake"):
            box = gr.Textbox(elem_id="fake-box")
        return Tab(loads=(PageLoad(greet, [], [box]),), scripts=("() => { window.fakeTab = 1; }",))

    demo = app.build_app(allow_custom_rewards=True, tabs=[build])
    assert len(seen) == 1 and seen[0].allow_custom_rewards is True and seen[0].cache is not None
    assert any(getattr(b, "elem_id", None) == "fake-box" for b in demo.blocks.values())
    loads = page_loads(demo)
    assert [f.fn for f in loads if f.fn is not None] == [greet]
    assert [f.js for f in loads if f.fn is None] == ["() => { window.fakeTab = 1; }"]


def test_every_tab_of_the_app_keeps_the_contract(own_data):
    import app
    from ui.tab import Tab

    for build in app.tab_builders():
        assert list(inspect.signature(build).parameters) == ["ctx"], build
    built = []
    demo = app.build_app(tabs=[lambda ctx, b=b: built.append(b(ctx)) or built[-1] for b in app.tab_builders()])
    assert len(built) == 4 and all(isinstance(tab, Tab) for tab in built)
    # Train, Chat and RAG each re-read their state from disk on page load (Train twice: its runs, then the Runs
    # panel's empty state; Chat twice: its models, then model A's held-out prompts; RAG twice: its table and
    # models, then the answering model's held-out questions). Train adds its six scripts
    # (fold the settings, label its charts' whole steps, move the run header's clock, follow the run files for the
    # live view and for the steer panel, keep the page's title on the run), Chat two (follow a push, and the models
    # on disk) and RAG one (the models on disk). The followers share the page's one poll endpoint.
    assert len([f for f in page_loads(demo) if f.fn is not None]) == 6
    assert len([f for f in page_loads(demo) if f.fn is None]) == 9
    assert [f.api_name for f in demo.fns.values()].count("live_stamps") == 1


def test_the_runs_panel_says_what_to_do_while_there_is_no_run(own_data):
    from pipeline.run_folder import runs
    from ui.runs_panel import NO_RUNS, runs_hint

    assert runs_hint().visible is True and "press **Start**" in NO_RUNS
    (runs.runs_dir() / "20261127-000000-first").mkdir(parents=True)
    (runs.runs_dir() / "20261127-000000-first" / "config.json").write_text("{}")
    assert runs_hint().visible is False


def test_no_component_offers_to_post_its_contents_to_another_site(own_data):
    """Gradio's Chatbot shows a "share" button by default, which posts the conversation to Hugging Face Spaces
    discussions: a conversation with a model under training, or on a shared app someone else's, should not leave
    the app from a button the app never meant to offer."""
    import app

    demo = app.build_app()
    offering = [(c.get("type"), c.get("props", {}).get("elem_id")) for c in demo.get_config_file()["components"]
                if "share" in (c.get("props", {}).get("buttons") or [])]
    assert offering == []
    chats = [c for c in demo.get_config_file()["components"] if c.get("type") == "chatbot"]
    assert len(chats) == 2 and all("copy" in c["props"]["buttons"] for c in chats)
