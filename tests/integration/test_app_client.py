"""The app's events through gradio_client, against a launched app (public API surface)."""

import pytest

from .helpers import serve_app

from pipeline.run_folder import runs
from pipeline.setup.config import RunConfig
from ui.live_view import PART_OUTPUTS

# What the live view's /refresh returns, by name, in the API's order: each output once, as ui/train.py lists them,
# but a button, a state and a group, which carry no value through the API.
REFRESH_OUTPUTS = [name for name in dict.fromkeys(name for names in PART_OUTPUTS.values() for name in names)
                   if name not in ("stop_btn", "eval_stop_btn", "push_stop_btn", "plot_colors", "queue_box")]


@pytest.fixture(scope="module")
def client(studio_data):
    from gradio_client import Client

    demo, url = serve_app()
    yield Client(url, verbose=False)
    demo.close()


def test_reward_bench_reproduces_seed_001(client):
    table, summary = client.predict({"headers": ["use", "reward", "weight", "params (JSON)"], "data": []},
                                    "", "", "", "1,1,1,1,0,0,0,0", "group", api_name="/score_candidates")
    advantages = [row[1] for row in table["data"]]
    assert advantages == [0.9352] * 4 + [-0.9352] * 4
    assert "0.5345" in summary


def test_reward_bench_scores_typed_completions(client):
    rewards = {"headers": ["use", "reward", "weight", "params (JSON)"],
               "data": [[True, "length_target", 1.0, '{"target": 5}'], [True, "keyword_presence", 2.0,
                                                                          '{"pattern": "TL;DR"}']]}
    table, summary = client.predict(rewards, "p", "abcde\n---\nTL;DR: longer text", "", "", "group",
                                    api_name="/score_candidates")
    assert table["headers"] == ["#", "advantage", "total", "length_target", "keyword_presence"]
    first, second = table["data"]
    assert first[2:] == [0.0, 0.0, 0.0] and second[2:] == [-11.0, -13.0, 1.0]
    assert first[1] > 0 > second[1]


def test_reward_bench_explains_bad_input(client):
    _, summary = client.predict({"headers": ["use", "reward", "weight", "params (JSON)"],
                                 "data": [[True, "length_target", 1.0, "{oops"]]},
                                "", "a\n---\nb", "", "", "group", api_name="/score_candidates")
    assert "not valid JSON" in summary


def test_live_view_reads_a_run_from_disk(client):
    run_dir = runs.new_run_dir("client-view")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=2).to_dict())
    runs.append_jsonl(run_dir / "metrics.jsonl", {"step": 1, "reward": -4.0, "reward_std": 1.0, "kl": 0.0,
                                                   "rewards": {"length_target": {"mean": -4.0}}, "elapsed": 5})
    runs.append_jsonl(run_dir / "groups.jsonl", {"step": 1, "weights": {"length_target": 1.0}, "groups": [
        {"prompt": "p", "completions": [{"completion": "a", "rewards": {"length_target": -3.0}, "total": -3.0,
                                         "advantage": 0.7}, {"completion": "b", "rewards": {"length_target": -5.0},
                                                              "total": -5.0, "advantage": -0.7}]}]})
    runs.write_status(run_dir, "finished", started_at=1.0, ended_at=6.0)
    client.predict(None, api_name="/refresh_runs")  # the page load: offers the runs on disk
    out = dict(zip(REFRESH_OUTPUTS, client.predict(run_dir.name, 0, api_name="/refresh"), strict=True))
    progress, reward_plot, groups = out["progress"], out["reward_plot"], out["groups"]
    assert "data-state='finished'" in progress and "step <b class='gs-step'>1</b> / 2" in progress
    assert "+0.70" in groups and "-0.70" in groups
    plot = reward_plot.get("value", reward_plot)
    assert {row[2] for row in plot["data"]} == {"total (weighted)", "length_target"}


def test_runs_outside_the_list_are_refused(client):
    client.predict(None, api_name="/refresh_runs")
    for bad in ("../../etc", "/etc/passwd", "no-such-run"):
        with pytest.raises(Exception, match="not in the list of choices"):
            client.predict(bad, api_name="/stop_training")
    assert client.predict(None, api_name="/stop_training") == "Pick a run to stop."


def post_json(url: str, payload: dict) -> tuple[int, object]:
    """A direct HTTP POST, as any script could send it: (status, parsed JSON answer or text)."""
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode(errors="replace")


def test_queued_events_refuse_direct_posts_while_the_live_poll_and_the_client_work(client):
    """A queued event reached with a direct POST would skip the queue's max_size and every concurrency limit
    (the app opens its queue with api_open=False). The live poll is a queue-free endpoint, and gradio_client
    joins the queue: both keep working."""
    base = client.src.rstrip("/")
    table = {"headers": ["use", "reward", "weight", "params (JSON)"], "data": []}
    status, body = post_json(base + "/gradio_api/run/score_candidates", {"data": [table, "", "", "", "1,0", "group"]})
    assert status == 404 and "join the queue" in str(body), (status, body)
    status, body = post_json(base + "/gradio_api/run/live_stamps", {"data": [None, None]})
    assert status == 200 and body["data"][0]["progress"] == "none" and body["data"][0]["jobs"].startswith("none;"), (
        status, body)
    _, summary = client.predict(table, "", "", "", "1,0", "group", api_name="/score_candidates")
    assert "std" in summary


@pytest.mark.parametrize("name", ["bad\x00name", "x" * 300, "../../etc", "/etc/passwd", "a\\b"])
def test_the_live_poll_answers_bad_run_names_with_a_reason(client, name):
    status, body = post_json(client.src.rstrip("/") + "/gradio_api/run/live_stamps", {"data": [name, name]})
    assert status == 200, (status, body)
    shown, action = body["data"][0]["progress"], body["data"][0]["jobs"].split(";")[0]
    assert shown == action and shown.startswith("refused: ") and "run name" in shown, shown


def test_live_view_before_the_first_step(client):
    """A run that has started but has no metrics or groups yet still shows its progress (regression)."""
    run_dir = runs.new_run_dir("client-early")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=5).to_dict())
    runs.write_status(run_dir, "stopped", started_at=1.0)
    client.predict(None, api_name="/refresh_runs")
    progress, *_ = client.predict(run_dir.name, 0, api_name="/refresh")
    assert "data-state='stopped'" in progress and "/ 5" in progress


def _finished_run(label: str):
    run_dir = runs.new_run_dir(label)
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=2).to_dict())
    runs.append_jsonl(run_dir / "metrics.jsonl", {"step": 1, "reward": -4.0, "reward_std": 1.0, "kl": 0.0,
                                                   "rewards": {"length_target": {"mean": -4.0}}, "elapsed": 5})
    runs.append_jsonl(run_dir / "groups.jsonl", {"step": 1, "weights": {"length_target": 1.0}, "groups": [
        {"prompt": "p", "completions": [{"completion": "a", "rewards": {"length_target": -3.0}, "total": -3.0,
                                         "advantage": 0.7}]}]})
    runs.write_status(run_dir, "finished", started_at=1.0, ended_at=6.0)
    return run_dir


def test_damaged_run_files_keep_the_app_serving_and_are_named(client):
    good = _finished_run("client-good")
    truncated = _finished_run("client-truncated")
    text = (truncated / "config.json").read_text()
    (truncated / "config.json").write_text(text[:60])
    garbage = _finished_run("client-garbage")
    (garbage / "status.json").write_bytes(b"\x00\x9f garbage {{{")
    binary = _finished_run("client-binary")
    with open(binary / "groups.jsonl", "ab") as fh:
        fh.write(b"\x00\xff\xfe binary line\n")

    _, table, *_ = client.predict(None, api_name="/refresh_runs")
    headers = table["headers"]
    rows = {row[0]: dict(zip(headers, row)) for row in table["data"]}
    assert rows[good.name]["state"] == "finished" and not rows[good.name]["problems"]
    assert rows[truncated.name]["state"] == "damaged"
    assert rows[truncated.name]["problems"].startswith("config.json is damaged: not valid JSON")
    assert rows[garbage.name]["state"] == "damaged"
    assert rows[garbage.name]["problems"] == "status.json is not text (binary data)."
    assert rows[binary.name]["state"] == "finished"
    assert rows[binary.name]["problems"] == "groups.jsonl: 1 unreadable line skipped (line 2)."

    # Each one's live view opens and says what is wrong; what can be read still shows.
    progress, *_ = client.predict(truncated.name, 0, api_name="/refresh")
    assert "Damaged run files:</b> config.json is damaged" in progress
    progress, *_ = client.predict(garbage.name, 0, api_name="/refresh")
    assert "data-state='damaged'" in progress and "status.json is not text" in progress
    out = dict(zip(REFRESH_OUTPUTS, client.predict(binary.name, 0, api_name="/refresh"), strict=True))
    assert "data-state='finished'" in out["progress"] and "groups.jsonl: 1 unreadable line" in out["progress"]
    assert "+0.70" in out["groups"]  # the readable group still shows
    progress, *_ = client.predict(good.name, 0, api_name="/refresh")
    assert "data-state='finished'" in progress and "Damaged" not in progress


def test_a_run_deleted_while_its_page_is_open(client):
    import shutil

    run_dir = _finished_run("client-deleted")
    client.predict(None, api_name="/refresh_runs")  # the page offers it
    progress, *_ = client.predict(run_dir.name, 0, api_name="/refresh")
    assert "data-state='finished'" in progress
    shutil.rmtree(run_dir)  # deleted from another tab, or by hand
    progress, *_ = client.predict(run_dir.name, 0, api_name="/refresh")
    assert "data-state='gone'" in progress and "is no longer on disk" in progress
    # The poll keeps answering without an error; nothing changed, so no part is redrawn, and a redraw of no
    # parts sends nothing.
    answers = [post_json(client.src.rstrip("/") + "/gradio_api/run/live_stamps", {"data": [run_dir.name, None]})
               for _ in range(2)]
    stamps = [body["data"][0] for status, body in answers if status == 200]
    assert len(stamps) == 2 and stamps[0] == stamps[1] and "gone" in stamps[0]["progress"], answers
    progress, *_ = client.predict(run_dir.name, 0, "latest", None, "Text", "", api_name="/refresh")
    assert progress == {"props": {"__type__": "update"}, "__type__": "update"}
    _, table, *_ = client.predict(None, api_name="/refresh_runs")
    assert run_dir.name not in [row[0] for row in table["data"]]


def test_two_browser_sessions_press_start_together(client, bundled_model_dir, monkeypatch):
    """Two sessions (two tabs, two people) press Start at the same moment: one run starts, the other
    session is told which run is training, and only one run folder appears. The app runs in this process:
    creating a run folder is slowed down (a busy disk), so both Starts would be inside the check-then-create
    window together if nothing kept them apart (the Start event's queue and the runner's start lock)."""
    import threading
    import time

    from gradio_client import Client

    from pipeline import runner

    from .helpers import QUICK, start_inputs, value_of

    real_new_run_dir = runs.new_run_dir
    monkeypatch.setattr(runs, "new_run_dir", lambda label="run": time.sleep(0.5) or real_new_run_dir(label))
    inputs = start_inputs(RunConfig(**{**QUICK, "max_steps": 50, "probe_every": 0}))
    sessions = [Client(client.src, verbose=False) for _ in range(2)]
    before = {p for p in runs.runs_dir().iterdir() if p.is_dir()}
    barrier = threading.Barrier(2)
    replies: list = [None, None]

    def press(i: int):
        barrier.wait()
        replies[i] = sessions[i].predict(*inputs, api_name="/start_training")

    threads = [threading.Thread(target=press, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    started = [value_of(picked) for picked, message in replies if "Started" in message]
    try:
        refused = [message for _, message in replies if "Started" not in message]
        assert len(started) == 1 and len(refused) == 1, replies
        assert refused[0] == (f"❌ Run '{started[0]}' is still training. Stop it or wait for it to finish: "
                              "one training runs at a time on this machine. Or press **Add to queue**: it starts "
                              "by itself when that run ends.")
        assert {p for p in runs.runs_dir().iterdir() if p.is_dir()} - before == {runs.runs_dir() / started[0]}
    finally:
        for name in started:
            runner.stop("train", runs.runs_dir() / name, grace_s=120)


def _changed_everywhere() -> RunConfig:
    """A config where every setting the form shows differs from its default (another choice, the other
    boolean, a different number), with a file source and its own rewards: a value sent to the wrong field,
    or not sent, shows."""
    import dataclasses

    from pipeline.setup.config import DatasetSpec, RewardSpec
    from ui.form import form_fields

    defaults, changes = RunConfig(), {}
    for spec in form_fields():
        value = getattr(defaults, spec.name)
        if "choices" in spec.metadata:
            changes[spec.name] = next(c for c in spec.metadata["choices"] if c != value)
        elif isinstance(value, bool):
            changes[spec.name] = not value
        elif "maximum" in spec.metadata:  # the number box refuses more: step down, still distinct (top_p 1.0 -> 0.8x)
            changes[spec.name] = type(value)(value - (len(changes) + 2) / 100)
        elif isinstance(value, (int, float)):
            changes[spec.name] = type(value)(value + len(changes) + 2)  # distinct: a swap of two fields shows
        else:
            changes[spec.name] = "q_proj,v_proj"
    return dataclasses.replace(
        defaults, **changes, rewards=[RewardSpec("length_target", 0.5, {"target": 30, "unit": "words"})],
        dataset=DatasetSpec(source="file", path="", prompt_column="question", answer_column="answer",
                            system_prompt="Answer in one line."))


def test_every_form_value_reaches_the_config_by_name(client):
    """The Start button's inputs, by name, as "Show command" prints the config they make: each value lands in
    its own field (fails when a component is left out of the form's keyed wiring, or wired to another name)."""
    import json

    from .helpers import start_inputs

    from ui.form import form_fields

    # Each setting's name is bound to the component labelled for it (a swap of two fields in the browser).
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/start_training"]
    labels = {p["parameter_name"]: p["label"] for p in api["parameters"]}
    expected = {spec.name: spec.metadata["label"] for spec in form_fields()}
    assert {name: labels.get(name) for name in expected} == expected
    assert (labels["prompt_column"], labels["hub_split"]) == ("Prompt column", "Split")

    cfg = _changed_everywhere()
    text = client.predict(*start_inputs(cfg), api_name="/show_command")
    assert "# config.json\n" in text, text
    shown = RunConfig.from_json(text.split("# config.json\n", 1)[1])
    [reward] = shown.rewards  # the table's other rows are unticked
    assert (reward.name, reward.weight, reward.params["target"], reward.params["unit"]) == (
        "length_target", 0.5, 30, "words")
    # The uploaded file's path is a State the API cannot set; everything else came from the inputs.
    assert shown.to_dict() == {**cfg.to_dict(), "rewards": shown.to_dict()["rewards"]}, json.dumps(
        {k: (v, cfg.to_dict()[k]) for k, v in shown.to_dict().items() if v != cfg.to_dict()[k]})
