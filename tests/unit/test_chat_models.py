import json

import gradio as gr
import pytest

from pipeline.run_folder import run_files, runs
from pipeline.training import generate
from pipeline.training.generate import ChatModelError, ModelCache, chat_choices, run_for_choice
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


_MADE: list = []


@pytest.fixture(autouse=True)
def _remove_made_runs():
    """The runs these tests make are taken away after each test: the data folder is the session's, and a
    left-over run would show in every later test's run lists (a browser test's run picker chose one)."""
    import shutil

    yield
    while _MADE:
        shutil.rmtree(_MADE.pop(), ignore_errors=True)


def _run(name, merged=False, checkpoint=None, state="running"):
    run_dir = runs.runs_dir() / name
    _MADE.append(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"model": "bundled/SmolLM2-135M-Instruct"}))
    runs.write_status(run_dir, state)
    if merged:
        (run_dir / "merged").mkdir(exist_ok=True)
        (run_dir / "merged" / "config.json").write_text("{}")
    if checkpoint:
        ckpt = run_dir / f"checkpoint-{checkpoint}"
        ckpt.mkdir(exist_ok=True)
        (ckpt / run_files.CHECKPOINT_MARKER).write_text("x")
    return run_dir


def test_choices_list_finished_runs_checkpoints_and_base_models():
    _run("zz-done", merged=True, checkpoint=4, state="finished")
    values = [v for _, v in chat_choices()]
    assert "run:zz-done" in values and "ckpt:zz-done:4" in values
    assert "bundled/SmolLM2-135M-Instruct" in values


def test_a_stopped_runs_model_says_how_far_it_trained():
    """A Stop saves and merges the model it has: its label gives the step, not "final"."""
    _run("zz-whole", merged=True, state="finished")
    stopped = _run("zz-early", merged=True, state="stopped")
    runs.write_status(stopped, "stopped", step=2, max_steps=11)
    labels = dict((v, label) for label, v in chat_choices())
    assert labels["run:zz-whole"] == "zz-whole (tuned, final)"
    assert labels["run:zz-early"] == "zz-early (tuned, stopped at step 2 of 11)"


def test_unmerged_run_and_bad_names_give_clear_messages():
    _run("zz-busy", state="running")
    with pytest.raises(ChatModelError, match="no merged model yet"):
        generate._load_choice("run:zz-busy")
    with pytest.raises(ChatModelError, match="is not a run name"):
        run_for_choice("run:../../etc")
    with pytest.raises(ChatModelError, match="no run named"):
        run_for_choice("run:zz-never-made")
    with pytest.raises(ChatModelError, match="missing or incomplete"):
        generate._load_choice("ckpt:zz-busy:9")


def test_the_base_of_a_run_or_checkpoint_is_the_model_it_was_trained_from():
    """What the RAG tab's *Compare with base* answers with."""
    _run("zz-based", merged=True, checkpoint=2, state="finished")
    trained_from = runs.read_json(runs.resolve_run("zz-based") / run_files.CONFIG)["model"]
    assert generate.base_choice("run:zz-based") == generate.base_choice("ckpt:zz-based:2") == trained_from
    assert generate.base_choice("bundled/SmolLM2-135M-Instruct") is None  # a base model has no base
    with pytest.raises(ChatModelError, match="no run named"):
        generate.base_choice("run:zz-never-made")


def test_chatbot_content_formats():
    assert content_text("hi") == "hi"
    assert content_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "ab"
    assert content_text(None) == ""


def test_export_zips_merged_and_adapter_and_push_fails_clearly_offline(monkeypatch):
    import zipfile

    from ui.chat import export_run, exported_views, push_to_hub

    run_dir = _run("zz-export", merged=True, state="finished")
    (run_dir / "adapter").mkdir()
    (run_dir / "adapter" / "adapter_config.json").write_text("{}")
    files, message, snippet = export_run("run:zz-export", progress=lambda *a, **k: None)
    assert "Exported" in message and "AutoModelForCausalLM.from_pretrained" in snippet
    names = [zipfile.ZipFile(f).namelist() for f in files]
    assert "config.json" in names[0] and "adapter_config.json" in names[1]
    assert all(str(runs.data_dir()) in f for f in files)
    # The downloads and the loading code show after an export, and hide after one that failed (no files).
    # The GGUF's run commands stay hidden after a zip, and the loading code after a GGUF.
    assert [v.constructor_args["visible"] for v in exported_views("zip")(files)] == [True, True, False]
    assert [v.constructor_args["visible"] for v in exported_views("gguf")(files)] == [True, False, True]
    failed, _, _ = export_run("bundled/SmolLM2-135M-Instruct", progress=lambda *a, **k: None)
    assert [v.constructor_args["visible"] for v in exported_views("zip")(failed)] == [False, False, False]

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "Can't reach the Hugging Face Hub" in push_to_hub("run:zz-export", "me/model", "hf_x")
    assert "repository id" in push_to_hub("run:zz-export", "no-slash", "hf_x")
    assert "finished run" in push_to_hub("bundled/SmolLM2-135M-Instruct", "me/model", "hf_x")
    (run_dir / "checkpoint-2").mkdir(exist_ok=True)
    assert "uploads a run's final model" in push_to_hub("ckpt:zz-export:2", "me/model", "hf_x")


def test_concurrent_requests_for_one_model_load_it_once(monkeypatch):
    import threading
    import time

    calls = []

    def slow_load(choice):
        calls.append(choice)
        time.sleep(0.2)
        return ("m", "t")

    monkeypatch.setattr(generate, "_load_choice", slow_load)
    cache = ModelCache()
    threads = [threading.Thread(target=cache.get, args=("same",)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["same"]


def test_model_a_offers_the_run_that_finished_last_until_the_user_picks_a_model():
    from pipeline.setup.config import BUNDLED_MODEL_ID as base
    from ui.model_choices import default_choice, refreshed_choice

    no_runs = [("SmolLM2 (base)", base)]
    assert default_choice(no_runs) == base
    # Page opened before any run finished: Model A shows the base model it was offered.
    assert refreshed_choice(base, base, no_runs) == base

    # A run finishes (a command-line name sorts above the dated ones, so age decides, not the name).
    runs.write_status(_run("zz-cli-demo", merged=True, state="finished"), "finished", ended_at=100.0)
    runs.write_status(_run("20990101-000000-app", merged=True, state="finished"), "finished", ended_at=200.0)
    choices = [("zz-cli-demo", "run:zz-cli-demo"), ("app", "run:20990101-000000-app"), ("ckpt", "ckpt:zz-cli-demo:4"),
               *no_runs]
    assert default_choice(choices) == "run:20990101-000000-app"
    # ↻ or a page load: the untouched default moves to that run...
    assert refreshed_choice(base, base, choices) == "run:20990101-000000-app"
    # ...a model the user picked stays, the base model included...
    assert refreshed_choice("ckpt:zz-cli-demo:4", "run:20990101-000000-app", choices) == "ckpt:zz-cli-demo:4"
    assert refreshed_choice(base, "run:20990101-000000-app", choices) == base
    # ...and a model that is gone (its run deleted) falls back to the default.
    assert refreshed_choice("run:deleted", base, choices) == "run:20990101-000000-app"


def test_a_run_that_finishes_mid_conversation_leaves_the_conversations_models_as_they_are(monkeypatch):
    """The page's poll re-reads the lists when a run finishes: with no conversation yet, Model A moves to it; with
    one, A and B stay (only their lists grow) and what each was offered is left as it was."""
    from pipeline.setup.config import BUNDLED_MODEL_ID as base
    from ui import model_choices
    from ui.model_choices import follow_runs

    runs.write_status(_run("20990101-000000-new", merged=True, state="finished"), "finished", ended_at=300.0)
    # The models on disk as the poll finds them: that run and the base model (not the session's other runs).
    monkeypatch.setattr(model_choices, "chat_choices", lambda: [("new", "run:20990101-000000-new"), ("SmolLM2", base)])
    a, b, offered_a, offered_b = follow_runs(base, base, base, base, [])
    assert a.constructor_args["value"] == offered_a == "run:20990101-000000-new"
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    a, b, offered_a, offered_b = follow_runs(base, base, base, base, history)
    assert "run:20990101-000000-new" in [value for _, value in a.choices]
    assert "value" not in a.constructor_args and "value" not in b.constructor_args  # the dropdowns keep theirs
    assert all(isinstance(x, type(gr.skip())) for x in (offered_a, offered_b))


def test_releasing_models_empties_every_cache(monkeypatch):
    """A training about to use the GPU makes the app's caches drop their models (they reload on demand)."""
    from pipeline.training import generate

    monkeypatch.setattr(generate, "_load_choice", lambda choice: (object(), object()))
    cache = generate.ModelCache(capacity=2)
    cache.get("a"), cache.get("b")
    assert cache.keys() == ["a", "b"]
    assert generate.release_models() >= 2
    assert cache.keys() == []
    cache.get("a")
    assert cache.loads == 3  # loaded again on the next request


def test_model_choices_are_typed_and_bad_checkpoint_values_refused():
    from pipeline.training.generate import ModelChoice

    for choice in (ModelChoice("run", "demo"), ModelChoice("checkpoint", "demo", 12), ModelChoice("base", "org/m")):
        assert ModelChoice.parse(choice.value) == choice
    assert ModelChoice.parse("ckpt:a:b:7") == ModelChoice("checkpoint", "a:b", 7)
    for bad in ("ckpt:demo", "ckpt:demo:x", "ckpt::3"):
        with pytest.raises(ChatModelError, match="not a checkpoint choice"):
            ModelChoice.parse(bad)


def test_a_failed_reply_is_neither_scored_nor_sent_back_as_context():
    """An error shown in the chat is marked as such: scoring skips it and the next turn leaves it out."""
    from pipeline.training.generate import error_reply
    from ui.chat import _messages, make_handlers

    failed = error_reply(ChatModelError("There is no run named 'x'."))
    history = [{"role": "user", "content": "hi"}, failed]
    assert failed["content"].startswith("⚠️ There is no run named")
    assert _messages(history, "") == [{"role": "user", "content": "hi"}]
    _, score_replies = make_handlers(ModelCache())
    assert score_replies(history, [], "bundled/SmolLM2-135M-Instruct", None, False) == (
        "Nothing to score yet: send a message first.")
    ok = history + [{"role": "user", "content": "again"}, {"role": "assistant", "content": "A short reply."}]
    assert score_replies(ok, [], "bundled/SmolLM2-135M-Instruct", None, False).startswith("**A**")


def test_a_chat_reply_is_scored_by_the_rewards_it_can_be_and_the_rest_are_named(monkeypatch):
    """The default run's post_similarity compares the reply with the user's message it answers (as the reward bench
    compares with its prompt); an answer reward has no reference in a chat, so it is named as not scored instead
    of failing with a warning, and the weighted total is of the others."""
    from pipeline.setup.config import RewardSpec
    from ui import chat

    _, score_replies = chat.make_handlers(ModelCache())
    history = [{"role": "user", "content": "TL;DR: the town shut its water plant after a chemical leak."},
               {"role": "assistant", "content": "The town closed its water plant because of a leak."}]
    text = score_replies(history, [], "bundled/SmolLM2-135M-Instruct", None, False)
    assert text.startswith("**A** (the default run's rewards): length_target = ") and "⚠️" not in text, text
    assert "post_similarity = " in text and "post_similarity = -" not in text and "Not scored" not in text, text

    specs = [RewardSpec("length_target", 1.0, {}), RewardSpec("numeric_tolerance", 2.0, {})]
    monkeypatch.setattr(chat, "rewards_for", lambda choice, partner=None: (specs, "rewards of a run"))
    text = score_replies(history, [], "x", None, False)
    assert "Not scored here: numeric_tolerance (compares with a reference answer)" in text and "⚠️" not in text


def test_a_base_model_beside_a_run_is_scored_with_that_runs_rewards():
    """Side by side, base vs tuned: both replies are scored with the run's rewards, so the two totals compare. A base
    model alone, or beside another base model, gets the default run's; a run keeps its own beside anything."""
    from pipeline.setup.config import RewardSpec, RunConfig
    from ui import chat

    run_dir = _run("zz-scored-arith", merged=True, state="finished")
    cfg = RunConfig(rewards=[RewardSpec("strict_format", 1.0, {}), RewardSpec("incremental_format", 1.0, {})])
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    _, score_replies = chat.make_handlers(ModelCache())
    said = [{"role": "user", "content": "Calculate 2 + 5"}, {"role": "assistant", "content": "<answer>7</answer>"}]
    base = "bundled/SmolLM2-135M-Instruct"
    a, b = score_replies(said, said, "run:zz-scored-arith", base, True).split("\n\n")
    assert a.startswith("**A** (rewards of zz-scored-arith): strict_format = "), a
    assert b.startswith("**B** (rewards of zz-scored-arith, as the other side's run): strict_format = "), b
    assert a.split(": ", 1)[1] == b.split(": ", 1)[1]  # the same reply scores the same on both sides
    b_first = score_replies(said, said, base, "run:zz-scored-arith", True)
    assert b_first.startswith("**A** (rewards of zz-scored-arith, as the other side's run)"), b_first
    alone = score_replies(said, said, base, "run:zz-scored-arith", False)  # B is hidden: A is a base model alone
    assert alone.startswith("**A** (the default run's rewards)") and "**B**" not in alone, alone


def test_a_held_out_prompt_sent_as_it_is_is_scored_against_its_reference_answer():
    """A typed message has no reference answer, so numeric_tolerance is left out; a run's held-out prompt brings its
    own (eval_prompts.json), so the reply to it is scored on correctness as in training, on both sides."""
    from pipeline.setup.config import RewardSpec, RunConfig
    from ui import chat

    run_dir = _run("zz-scored-answers", merged=True, state="finished")
    cfg = RunConfig(rewards=[RewardSpec("incremental_format", 1.0, {}), RewardSpec("numeric_tolerance", 2.0, {})])
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    prompt = [{"role": "system", "content": "Answer in tags."}, {"role": "user", "content": "Calculate 46 - 7"}]
    (run_dir / run_files.EVAL_PROMPTS).write_text(json.dumps([{"prompt": prompt, "answer": "39"}]))
    _, score_replies = chat.make_handlers(ModelCache())
    right = [{"role": "user", "content": "Calculate 46 - 7"}, {"role": "assistant", "content": "<answer>39</answer>"}]
    wrong = [right[0], {"role": "assistant", "content": "<answer>41</answer>"}]
    text = score_replies(right, wrong, "run:zz-scored-answers", "bundled/SmolLM2-135M-Instruct", True)
    a, b, reference = text.split("\n\n")  # the reference answer is said once, under both
    assert "numeric_tolerance = 1;" in a and "Not scored" not in a, a
    assert "numeric_tolerance = 0;" in b and "Not scored" not in b, b
    assert reference == "Reference answer of this held-out prompt: `39`", reference
    typed = [{"role": "user", "content": "Calculate 46 - 8"}, right[1]]
    text = score_replies(typed, [], "run:zz-scored-answers", None, False)
    assert "Not scored here: numeric_tolerance (compares with a reference answer)" in text, text


def test_held_out_prompts_are_read_as_trained_and_a_missing_or_damaged_file_offers_none(tmp_path):
    from ui.held_out import held_out_offers

    def held_out_prompts(run_dir):  # the texts Chat offers
        return [text for text, _ in held_out_offers(run_dir)]

    path = tmp_path / "eval_prompts.json"
    assert held_out_prompts(None) == [] and held_out_prompts(tmp_path) == []  # a base model; a run with none
    path.write_text('{"prompt": [')
    assert held_out_prompts(tmp_path) == []
    rows = [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Post 1\n\nTL;DR:"}]},
            {"prompt": "What is 2 + 2?"}, {"prompt": [{"role": "system", "content": "no user turn"}]}, "junk",
            *({"prompt": f"Question {i}"} for i in range(10))]
    path.write_text(json.dumps(rows))
    assert held_out_prompts(tmp_path) == ["Post 1\n\nTL;DR:", "What is 2 + 2?", *(f"Question {i}" for i in range(4))]


def test_the_rag_tab_offers_the_newest_run_tuned_on_movie_questions_else_the_base_model():
    from pipeline.setup.config import BUNDLED_MODEL_ID as base
    from ui.model_choices import default_choice, trained_on

    def finished(name, source, ended_at):
        run_dir = _run(name, merged=True, state="finished")
        (run_dir / "config.json").write_text(json.dumps({"model": base, "dataset": {"source": source}}))
        runs.write_status(run_dir, "finished", ended_at=ended_at)
        return (name, f"run:{name}")

    choices = [finished("20990201-000000-movies", "movies", 300.0), finished("20990202-000000-tldr", "tldr", 400.0),
               ("SmolLM2 (base)", base)]
    assert trained_on("20990202-000000-tldr") == "tldr" and trained_on("no-such-run") is None
    assert default_choice(choices) == "run:20990202-000000-tldr"  # Chat: the newest run, whatever it learned
    assert default_choice(choices, source="movies") == "run:20990201-000000-movies"
    assert default_choice(choices[1:], source="movies") == base  # no movie run: the base model, not the TL;DR one


def test_model_b_is_model_as_base_until_the_user_picks_it():
    from pipeline.setup.config import BUNDLED_MODEL_ID as base
    from ui.model_choices import model_b

    own = _run("20990301-000000-own-base", merged=True, checkpoint=2, state="finished")
    (own / "config.json").write_text(json.dumps({"model": "/models/my-qwen"}))
    bundled = _run("20990302-000000-bundled-base", merged=True, state="finished")
    choices = [(name, f"run:{name}") for name in (own.name, bundled.name)] + [("SmolLM2 (base)", base)]
    # A run from a local folder: B is that folder, added to B's choices (the catalog doesn't list it).
    listed, b = model_b(f"run:{own.name}", base, base, choices)
    assert b == "/models/my-qwen" and listed[-1] == ("/models/my-qwen (base of model A)", "/models/my-qwen")
    assert model_b(f"ckpt:{own.name}:2", base, base, choices)[1] == "/models/my-qwen"  # a checkpoint: its run's
    assert model_b(f"run:{bundled.name}", "/models/my-qwen", "/models/my-qwen", choices)[1] == base
    assert model_b(base, base, base, choices) == (choices, base)  # a base model as A: the bundled one beside it
    # Picked by the user: it stays whatever A becomes; one that is gone falls back to A's base.
    assert model_b(f"run:{own.name}", f"run:{bundled.name}", base, choices)[1] == f"run:{bundled.name}"
    assert model_b(f"run:{bundled.name}", "run:deleted", base, choices)[1] == base
