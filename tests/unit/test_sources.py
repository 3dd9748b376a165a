"""What a user may type as a model, an embedder or a hub dataset (pipeline/models/sources.py), checked at every entry
point: the config check at Start, the loaders where files are opened, the Train tab's preview. And whose Hub
token the downloads use when the app is shared."""

import os

import pytest

import app
from pipeline.models import sources
from pipeline.setup.config import DatasetSpec, RunConfig
from pipeline.setup.data import DatasetError, load_rows
from pipeline.models.loading import ModelError, resolve_model
from pipeline.run_folder.paths import data_dir
from pipeline.models.sources import SourceRefused, check_source

SECRET = "API_KEY=sk-test-4f1c"


@pytest.fixture
def secret_folder(tmp_path):
    """A folder outside the data folder holding a key in a .txt: what a hub-id field once read back."""
    folder = tmp_path / "private"
    folder.mkdir()
    (folder / "keys.txt").write_text(SECRET + "\n")
    (folder / "config.json").write_text("{}")  # looks like a model folder too
    return folder


@pytest.fixture(autouse=True)
def no_operator_settings():
    """Each test starts as a private app with no extra folders, and leaves it so."""
    sources.allow_local_dirs([])
    sources.withhold_hub_token(False)
    yield
    sources.allow_local_dirs([])
    sources.withhold_hub_token(False)


@pytest.mark.parametrize("value", ["Qwen/Qwen2.5-0.5B-Instruct", "gpt2", "openai/gsm8k", "a_b/c.d-e"])
def test_hub_ids_are_accepted_as_hub_ids(value):
    assert check_source(value) == sources.Source("hub", value)


@pytest.mark.parametrize("value", [
    "/etc", "/etc/passwd", "~", "~/.cache/huggingface", "~root/.ssh", "./secrets", "../secrets", ".", "..",
    "a/b/c", "a/../b", "..hidden/x", "a//b", "a\\b", "https://example.org/model", "hf://datasets/a/b",
    "file:///etc", "hf:a/b", "name with space", "x" * 300, "a\x00b", "-dash", "_under/x",
])
def test_anything_else_is_refused_saying_what_is_accepted(value):
    with pytest.raises(SourceRefused) as refused:
        check_source(value, "dataset")
    message = str(refused.value)
    assert "hub id such as 'owner/name'" in message and str(data_dir()) in message, message


def test_folders_under_the_data_folder_or_an_allowed_one_only(tmp_path, secret_folder):
    inside = data_dir() / "runs" / "some-run" / "merged"
    inside.mkdir(parents=True, exist_ok=True)
    assert check_source(str(inside)) == sources.Source("local", str(inside))
    with pytest.raises(SourceRefused, match="outside the folders this app reads models from.*--allow-local-dir"):
        check_source(str(secret_folder))
    # A link inside the data folder to a folder outside it is judged by where it leads.
    link = data_dir() / "models" / "link-out"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(secret_folder, target_is_directory=True)
    try:
        with pytest.raises(SourceRefused, match="outside the folders"):
            check_source(str(link))
        assert check_source(str(inside / ".." / "merged")).value == str(inside)
        # The operator's flag adds a folder; its own subfolders come with it.
        sources.allow_local_dirs([tmp_path])
        assert check_source(str(secret_folder)).value == str(secret_folder)
        assert check_source(str(link)).value == str(secret_folder)
        with pytest.raises(SourceRefused, match="no such folder"):
            sources.allow_local_dirs([tmp_path / "nope"])
    finally:
        link.unlink()


def test_the_config_check_at_start_refuses_what_the_loaders_refuse(secret_folder):
    """RunConfig.problems() (pre-flight and runner.start at Start, the trainer's first step)."""
    assert RunConfig(model=str(secret_folder)).problems() == [
        f"'{secret_folder}' is outside the folders this app reads models from. " + sources.accepted("model")
        + " The operator can allow another folder with --allow-local-dir."]
    ds = DatasetSpec(source="hub", hub_id=str(secret_folder), prompt_column="text")
    problems = RunConfig(dataset=ds).problems()
    assert any("reads datasets from" in p for p in problems), problems
    for fine in ("Qwen/Qwen2.5-0.5B-Instruct", "bundled/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct (bundled, offline)"):
        assert RunConfig(model=fine).problems() == [], fine
    gsm8k = RunConfig(dataset=DatasetSpec(source="hub", hub_id="openai/gsm8k")).problems()
    assert not any("hub id" in p for p in gsm8k), gsm8k


def test_a_dataset_folder_outside_is_never_read(secret_folder):
    """The Train tab's hub dataset field with a server folder: refused before any loader runs; the Preview
    shows the reason, never the folder's rows."""
    from ui.form import config_to_form
    from ui.train_form import preview_dataset

    spec = DatasetSpec(source="hub", hub_id=str(secret_folder), prompt_column="text")
    with pytest.raises(DatasetError, match="outside the folders this app reads datasets from") as refused:
        load_rows(spec)
    assert SECRET not in str(refused.value)
    form = config_to_form(RunConfig(dataset=spec))
    shown = preview_dataset(progress=lambda *args, **kwargs: None, **form)
    assert shown.startswith("Can't preview: ") and "outside the folders" in shown and SECRET not in shown


def test_a_hub_id_is_looked_up_on_the_hub_never_as_a_folder_here(tmp_path, monkeypatch):
    """A bare id that is also a folder in the app's working directory: the datasets library would read the
    folder. Offline, the hub lookup fails; the folder's rows never come back."""
    leak = tmp_path / "leak"
    leak.mkdir()
    (leak / "keys.txt").write_text(SECRET + "\n")
    import datasets

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    # The libraries read those variables once, at import: set what they read, so no request waits on the network.
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # never the user's own cache
    monkeypatch.setattr("pipeline.models.hub.require_hub", lambda *args, **kwargs: None)  # as if online
    spec = DatasetSpec(source="hub", hub_id="leak", prompt_column="text")
    with pytest.raises(DatasetError) as failed:
        load_rows(spec)
    assert "could not be loaded" in str(failed.value) and SECRET not in str(failed.value)


def test_a_dataset_folder_under_the_data_folder_loads():
    folder = data_dir() / "datasets" / "qa"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.jsonl").write_text('{"question": "2+2?", "answer": "4"}\n{"question": "3+3?", "answer": "6"}\n')
    rows = load_rows(DatasetSpec(source="hub", hub_id=str(folder), prompt_column="question", answer_column="answer"))
    assert [r["answer"] for r in rows] == ["4", "6"]


def test_model_fields_refuse_server_folders_where_the_model_is_opened(secret_folder):
    """resolve_model is where the trainer, the evaluator, Chat, RAG and the reward bench open a model."""
    from pipeline.training.generate import ChatModelError, _load_choice

    with pytest.raises(ModelError, match="outside the folders this app reads models from"):
        resolve_model(str(secret_folder))
    with pytest.raises(ChatModelError, match="outside the folders"):
        _load_choice(str(secret_folder))  # a Chat, RAG or reward bench model choice
    with pytest.raises(ModelError, match="is not a hub id"):
        resolve_model("someone/../../" + secret_folder.name)


def test_embedder_names_follow_the_same_rule(secret_folder, tmp_path, monkeypatch):
    from retrieval.embedder import StoreError, load_sentence_model

    with pytest.raises(StoreError, match="outside the folders this app reads embedders from"):
        load_sentence_model(str(secret_folder))
    (tmp_path / "leak").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="not an embedder this app can load"):
        load_sentence_model("leak")  # sentence-transformers would read ./leak


def test_a_shared_app_withholds_its_hub_token_unless_lent(monkeypatch):
    """Downloads of typed ids go with token=False (the Hub answers as to anyone: private and gated repos are
    refused) when the app is shared, and with the server's token when it is lent or the app is private."""
    calls = []

    def snapshot_download(repo_id, **kwargs):
        calls.append(kwargs)
        if kwargs.get("local_files_only"):
            raise FileNotFoundError("not cached")
        return "/snapshot"

    monkeypatch.setattr("huggingface_hub.snapshot_download", snapshot_download)
    monkeypatch.setattr("pipeline.models.loading.require_hub", lambda *args, **kwargs: None)
    anonymous = str(data_dir() / "cache" / "hub-anonymous")
    for flags, shared, token, cache in (
            ([], False, None, None), (["--auth", "a:b"], True, False, anonymous),
            (["--share", "--lend-hub-token"], True, None, None), (["--host", "0.0.0.0"], True, False, anonymous)):
        args = app.parse_args(flags)
        app.configure_sources(args, shared=app.is_shared(args.host, args.share, bool(args.auth)))
        calls.clear()
        assert resolve_model("someone/private-model") == "/snapshot"
        assert (calls[-1]["token"], calls[-1]["cache_dir"]) == (token, cache), flags
        # With the token withheld, the server's cached copies are not handed out either: not looked up first,
        # and not found by the Hub library when the Hub refuses (it answers a refusal from its cache).
        assert (calls[0].get("local_files_only") is True) is (token is None), flags


def test_a_shared_app_withholds_its_token_from_dataset_downloads(monkeypatch):
    import datasets

    seen = {}

    def load_dataset(path, *args, **kwargs):
        seen.update(path=path, token=kwargs.get("token"), cache_dir=kwargs.get("cache_dir"))
        raise ConnectionError("offline in this test")

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr("pipeline.models.hub.require_hub", lambda *args, **kwargs: None)
    sources.withhold_hub_token(True)
    with pytest.raises(DatasetError, match="could not be loaded"):
        load_rows(DatasetSpec(source="hub", hub_id="someone/private-set"))
    assert seen == {"path": "hf://datasets/someone/private-set", "token": False,
                    "cache_dir": str(data_dir() / "cache" / "hub-anonymous")}
    assert os.environ[sources.WITHHOLD_TOKEN_ENV] == "1"  # the trainer and evaluator inherit it
