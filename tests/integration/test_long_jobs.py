"""Long jobs on the bundled model, through the launched app's public API: the evaluation is a runner job
the Runs panel follows, and the reward bench samples through the app's one model cache."""

import pytest

from pipeline import runner
from pipeline.run_folder import runs
from pipeline.setup.config import BUNDLED_MODEL_ID

from .helpers import evaluable_run, serve_app, value_of, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def app(bundled_model_dir):
    from gradio_client import Client

    demo, url = serve_app()
    yield demo, Client(url, verbose=False)
    demo.close()


def offer_runs(client) -> None:
    """What a page load does: the Runs panel's dropdown offers the runs on disk."""
    client.predict(None, api_name="/refresh_runs")


def view(client, name: str) -> str:
    out = client.predict(name, api_name="/eval_view")
    return str(value_of(out[0] if isinstance(out, (list, tuple)) else out) or "")


def test_evaluate_returns_at_once_and_the_runs_panel_follows_the_job(app, bundled_model_dir):
    _, client = app
    run_dir = evaluable_run("eval-job", bundled_model_dir, held_out=3)
    offer_runs(client)
    # The page's "Held-out prompts to evaluate" reaches the evaluator: 2 of the run's 3.
    message = client.predict(run_dir.name, 2, api_name="/evaluate_run")
    assert "Started evaluating" in str(value_of(message)) and "on up to 2 held-out" in str(value_of(message)), message
    # The handler has returned while the job is still under way: it started a process, it did not wait.
    assert runner.status("eval", run_dir)["state"] in ("queued", "running")
    assert not (run_dir / "eval.json").exists()

    seen = []

    def finished():
        text = view(client, run_dir.name)
        seen.append(text)
        return "Delta (tuned - base)" in text

    wait_for(finished, 600, "the evaluation's result in the Runs panel")
    assert any("Evaluating" in t and "answers" in t for t in seen), seen  # progress was shown on the way
    result = runs.read_json(run_dir / "eval.json")
    status = runner.status("eval", run_dir)
    assert status["state"] == "done" and status["done"] == status["total"] == 2 * result["n"]
    assert result["n"] == len(result["samples"]) == 2
    # The "tuned" model is the base model: greedy answers, and so every total, are the same.
    assert result["base"]["totals"] == result["tuned"]["totals"] and result["delta"] == pytest.approx(0)
    assert (result["paired"]["same"], result["paired"]["better"], result["paired"]["worse"]) == (2, 0, 0)
    assert "Evaluation failed" not in (run_dir / "eval.log").read_text()
    # A page reload (a fresh view with no signature) finds the result again on disk.
    assert "Delta (tuned - base)" in view(client, run_dir.name)


def test_stop_ends_the_evaluation_and_says_so(app, bundled_model_dir):
    _, client = app
    run_dir = evaluable_run("eval-stop", bundled_model_dir)
    offer_runs(client)
    client.predict(run_dir.name, api_name="/evaluate_run")
    wait_for(lambda: runner.status("eval", run_dir)["state"] == "running", 120, "the evaluator to start")
    assert "Stop requested" in str(value_of(client.predict(run_dir.name, api_name="/stop_evaluation")))
    wait_for(lambda: runner.status("eval", run_dir)["state"] != "running", 60, "the evaluation to stop")
    status = runner.status("eval", run_dir)
    assert status["state"] == "stopped" and not status.get("crashed"), status
    wait_for(lambda: not runner.launcher_alive("eval", run_dir), 30, "the evaluator process to exit")
    assert not (run_dir / "eval.json").exists()
    assert "was stopped" in view(client, run_dir.name)


def _caches():
    from pipeline.training.generate import _CACHES

    return list(_CACHES)


def test_reward_bench_samples_with_the_model_chat_uses(app):
    demo, client = app
    # One queue for every model generation in the app: the bench's sampling waits with Chat's replies.
    fns = demo.fns.values() if isinstance(demo.fns, dict) else demo.fns
    ids = {f.name: f.concurrency_id for f in fns if f.name in ("sample_group", "respond")}
    assert ids["sample_group"] == ids["respond"], ids

    # A group, not a batch job: out-of-range sizes are refused before any model loads or samples.
    from gradio_client.exceptions import AppError

    for g, tokens, refused in ((1000, 6, "1000 is greater than maximum value 64"), (0, 6, "less than minimum value 2"),
                               (3, 100_000, "100000 is greater than maximum value 512")):
        with pytest.raises(AppError, match=refused):
            client.predict(BUNDLED_MODEL_ID, "Say hello.", g, 1.0, tokens, api_name="/sample_group")

    before = {id(c): (c.loads, c.keys()) for c in _caches()}
    text, summary = client.predict(BUNDLED_MODEL_ID, "Say hello.", 3, 1.0, 6, api_name="/sample_group")
    assert str(summary).startswith("Sampled 3 completions") and str(text).count("\n---\n") == 2, (text, summary)
    grown = [c for c in _caches()
             if BUNDLED_MODEL_ID in c.keys() and BUNDLED_MODEL_ID not in before.get(id(c), (0, []))[1]]
    assert len(grown) == 1, "the sampled model must be loaded into the app's model cache"
    cache = grown[0]
    loads = cache.loads
    client.predict(BUNDLED_MODEL_ID, "Say hello again.", 2, 1.0, 6, api_name="/sample_group")
    # A prompt over the model's context is refused by its size before anything samples.
    text, summary = client.predict(BUNDLED_MODEL_ID, "word " * 9000, 3, 1.0, 6, api_name="/sample_group")
    assert str(summary).startswith("❌ The prompt is ") and "8192 tokens this model reads" in str(summary), summary
    # Chat with the same model: no second copy anywhere in the app.
    job = client.submit("Hi", [], [], BUNDLED_MODEL_ID, BUNDLED_MODEL_ID, False, "", 8, 0.0, 1.0, api_name="/respond")
    job.result()
    assert cache.loads == loads and cache.keys().count(BUNDLED_MODEL_ID) == 1
    assert sum(c.loads for c in _caches()) - sum(v[0] for v in before.values()) == 1


def test_resume_to_a_later_step_reaches_the_trainers_command_line(app, bundled_model_dir, monkeypatch):
    """The page's Resume with *Resume to step*: the step count arrives after the request Gradio puts in its place,
    and a finished run trains further (nothing really starts: the launch is recorded)."""
    _, client = app
    run_dir = evaluable_run("further", bundled_model_dir)
    runs.write_status(run_dir, "finished", step=2, max_steps=2)
    launched = []
    monkeypatch.setattr(runner, "_launch", lambda run_dir, cmd, nproc=1, **kw: launched.append(cmd))
    offer_runs(client)
    _, message = client.predict(run_dir.name, None, api_name="/resume_training")
    assert "already finished all its 2 steps" in str(value_of(message)) and launched == [], message
    _, message = client.predict(run_dir.name, 5, api_name="/resume_training")
    assert str(value_of(message)).endswith("from its last complete checkpoint, to step 5."), message
    assert launched[-1][-3:] == ["--resume", "--steps", "5"], launched
