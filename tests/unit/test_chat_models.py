import json

import pytest

from pipeline import generate, runs
from pipeline.generate import ChatModelError, ModelCache, chat_choices, run_for_choice
from ui.chat import content_text


def test_cache_keeps_at_most_two_models_and_reuses_them(monkeypatch):
    loaded = []
    monkeypatch.setattr(generate, "_load_choice", lambda choice: loaded.append(choice) or (f"model-{choice}", "tok"))
    cache = ModelCache(capacity=2)
    assert cache.get("a")[0] == "model-a"
    cache.get("b")
    cache.get("a")  # hit: no reload, and 'a' becomes the most recent
    cache.get("c")  # evicts 'b', the least recently used
    assert loaded == ["a", "b", "c"] and cache.keys() == ["a", "c"]
    cache.get("b")
    assert loaded[-1] == "b" and cache.keys() == ["c", "b"]


def _run(name, merged=False, checkpoint=None, state="running"):
    run_dir = runs.runs_dir() / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"model": "bundled/SmolLM2-135M-Instruct"}))
    runs.write_status(run_dir, state)
    if merged:
        (run_dir / "merged").mkdir(exist_ok=True)
        (run_dir / "merged" / "config.json").write_text("{}")
    if checkpoint:
        ckpt = run_dir / f"checkpoint-{checkpoint}"
        ckpt.mkdir(exist_ok=True)
        (ckpt / runs.CHECKPOINT_MARKER).write_text("x")
    return run_dir


def test_choices_list_finished_runs_checkpoints_and_base_models():
    _run("zz-done", merged=True, checkpoint=4, state="finished")
    values = [v for _, v in chat_choices()]
    assert "run:zz-done" in values and "ckpt:zz-done:4" in values
    assert "bundled/SmolLM2-135M-Instruct" in values


def test_unmerged_run_and_bad_names_give_clear_messages():
    _run("zz-busy", state="running")
    with pytest.raises(ChatModelError, match="no merged model yet"):
        generate._load_choice("run:zz-busy")
    with pytest.raises(ChatModelError, match="no run named"):
        run_for_choice("run:../../etc")
    with pytest.raises(ChatModelError, match="missing or incomplete"):
        generate._load_choice("ckpt:zz-busy:9")


def test_chatbot_content_formats():
    assert content_text("hi") == "hi"
    assert content_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "ab"
    assert content_text(None) == ""
