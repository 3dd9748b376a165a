"""Under a login, a run is its starter's: other users watch it and chat with it, but its Stop, Resume,
Delete, Export, Push and Evaluate are refused with the owner's name; operators may act on every run; runs
without a recorded owner (older ones, or made without a login) are anyone's."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from pipeline import runner
from pipeline.run_folder import owners, run_files, runs
from pipeline.setup.config import RunConfig
from pipeline.run_folder.owners import Actor, may_act


@pytest.fixture
def own_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    return runs.runs_dir()


def login(name):
    """What Gradio hands a handler that declares `request: gr.Request` (its login name under --auth)."""
    return SimpleNamespace(username=name)


def alices_run(label="alices", state="stopped"):
    run_dir = runs.new_run_dir(label)
    owners.record_owner(run_dir, "alice")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    runs.write_status(run_dir, state)
    return run_dir


def test_the_rule():
    assert may_act("alice", Actor("alice")) and not may_act("alice", Actor("bob"))
    assert may_act("alice", Actor.of("carol", {"carol"}))  # an operator acts on every run
    assert may_act(None, Actor("bob"))  # no owner recorded: an older run, or one made without a login
    assert may_act("alice", Actor(None)) and may_act("alice", None)  # no login: one user (or a script)
    assert owners.parse_operators("alice, bob") == {"alice", "bob"}


def test_start_records_the_logged_in_user_once_and_no_one_without_a_login(own_runs, monkeypatch):
    monkeypatch.setattr(runner, "_launch", lambda run_dir, cmd, nproc=1, **kw: None)
    mine = runner.start("train", cfg=RunConfig(), label="mine", actor=Actor("alice"))
    assert owners.run_owner(mine) == "alice"
    assert runs.read_json(mine / run_files.OWNER)["user"] == "alice"
    anyone = runner.start("train", cfg=RunConfig(), label="anyone")
    assert owners.run_owner(anyone) is None and not (anyone / run_files.OWNER).exists()


def test_another_users_delete_is_refused_and_the_owners_goes(own_runs):
    from ui import runs_panel

    run_dir = alices_run()
    export = runs.data_dir() / "exports" / f"{run_dir.name}-merged.zip"
    export.parent.mkdir(parents=True, exist_ok=True)
    export.write_bytes(b"zip")
    message, *_ = runs_panel.delete_run(run_dir.name, True, True, [], login("bob"))
    assert message == (f"❌ Run '{run_dir.name}' belongs to alice: only alice or an operator may delete it. "
                       "You can still watch it and chat with it.")
    assert run_dir.is_dir() and export.exists()  # nor are its exports touched
    message, *ticks = runs_panel.delete_run(run_dir.name, True, True, [], login("alice"))
    assert message.startswith(f"🗑 Deleted **{run_dir.name}** and the file exported from it: ")
    assert not run_dir.exists() and not export.exists() and ticks == [False, False]


def test_an_operator_deletes_any_run_and_anyone_deletes_a_run_without_an_owner(own_runs):
    from ui import runs_panel

    run_dir = alices_run()
    assert runs_panel.delete_run(run_dir.name, True, False, ["carol"], login("carol"))[0].startswith("🗑")
    older = runs.new_run_dir("older")  # from before owners were recorded
    runs.write_json_atomic(older / "config.json", RunConfig().to_dict())
    assert runs_panel.delete_run(older.name, True, False, [], login("bob"))[0].startswith("🗑")


@pytest.fixture
def alices_training(own_runs):
    """Alice's run with a live stand-in trainer (a process in a session of its own)."""
    run_dir = alices_run("training", state="queued")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    runs.write_json_atomic(run_dir / run_files.LAUNCHER, {"pid": proc.pid, **runs.process_start(proc.pid)})
    yield run_dir, proc
    proc.kill()
    proc.wait()


def test_another_users_stop_is_refused_and_the_owners_stops_it(alices_training):
    from ui import runs_panel

    run_dir, proc = alices_training
    assert runs.read_status(run_dir)["state"] == "queued"
    message = runs_panel.stop_training(run_dir.name, [], login("bob"))
    assert message.startswith(f"❌ Run '{run_dir.name}' belongs to alice: only alice or an operator may stop it.")
    assert proc.poll() is None  # never signalled
    message = runs_panel.stop_training(run_dir.name, [], login("alice"))
    assert message.startswith(f"⏹ Stop requested for **{run_dir.name}**")
    assert proc.wait(timeout=10) != 0  # the SIGTERM reached it


def test_resume_evaluate_export_and_push_are_the_owners(own_runs, monkeypatch):
    from pipeline import export
    from ui import chat, runs_panel

    run_dir = alices_run()
    (run_dir / "merged").mkdir()
    (run_dir / "merged" / "config.json").write_text("{}")
    monkeypatch.setattr(chat, "run_for_choice", lambda choice: run_dir)
    monkeypatch.setattr(runner, "_launch", lambda run_dir, cmd, nproc=1, **kw: None)  # nothing really starts
    bob = login("bob")
    refused = f"Run '{run_dir.name}' belongs to alice: only alice or an operator may"
    assert runs_panel.resume_training(run_dir.name, False, [], bob)[1] == (
        f"❌ {refused} resume it. You can still watch it and chat with it.")
    assert runs_panel.evaluate_run(run_dir.name, [], bob).startswith(f"❌ {refused} evaluate it.")
    files, message, _ = chat.export_run("choice", [], bob)
    assert files is None and message.startswith(f"{refused} export it.")
    files, message, _ = chat.export_gguf("choice", "Q8_0", [], bob)
    assert files is None and message.startswith(f"{refused} export it.")
    assert chat.push_to_hub("choice", "bob/model", "hf_token", [], bob).startswith(f"⚠️ {refused} push it to the Hub.")
    with pytest.raises(export.ExportError, match="belongs to alice"):
        export.export_zips(run_dir, actor=Actor("bob"))
    with pytest.raises(export.ExportError, match="belongs to alice"):
        export.export_gguf(run_dir, actor=Actor("bob"))
    assert not list(runs.data_dir().glob("exports/*.zip"))  # nothing was zipped for bob
    assert not list(runs.data_dir().glob("exports/*.gguf"))  # nor written
    assert runs_panel.resume_training(run_dir.name, False, [], login("alice"))[1].startswith("▶ Resuming")


def test_the_runs_table_says_whose_run_it_is_once_a_run_has_an_owner(own_runs):
    from ui import runs_panel

    runner_less = runs.new_run_dir("anyones")
    runs.write_json_atomic(runner_less / "config.json", RunConfig().to_dict())
    assert "owner" not in runs_panel.runs_table().columns  # no logins: no column to read
    run_dir = alices_run()
    table = runs_panel.runs_table()
    owner_of = dict(zip(table["run"], table["owner"]))
    assert owner_of[run_dir.name] == "alice" and not isinstance(owner_of[runner_less.name], str)


def test_a_queued_run_is_its_queuers_to_remove_and_starts_as_theirs(own_runs, monkeypatch):
    """Add to queue under a login: the entry, and the run it becomes, are the user's; another user's Remove is
    refused with the owner's name, an operator's goes through."""
    from pipeline.run_folder import run_queue
    from ui import queue_view, train_form

    monkeypatch.setattr(runner, "busy_run", lambda: (own_runs / "someone-elses", "is still training"))
    monkeypatch.setattr("pipeline.models.loading.hub_fetch_problem", lambda *a: None)
    form = {key: value for key, value in train_form.config_to_form(RunConfig()).items()}
    _, message = train_form.queue_training(False, 1, "alice queued", login("alice"), **form)
    assert "Queued" in message, message
    (entry,) = run_queue.read().waiting
    assert entry.owner == "alice"
    refused = queue_view.remove_from_queue(entry.id, [], login("bob"))
    assert refused.startswith("❌") and "queued by alice" in refused and run_queue.read().waiting == [entry]
    assert "queued by alice" in queue_view.queue_html(run_queue.read())
    assert "Removed" in queue_view.remove_from_queue(entry.id, ["carol"], login("carol"))
    assert run_queue.read().waiting == []

    # Started from the line, the run is the queuer's.
    run_queue.add(run_queue.Waiting("alice-next", RunConfig().to_dict(), owner="alice"))
    monkeypatch.setattr(runner, "busy_run", lambda: None)
    monkeypatch.setattr(runner, "_launch", lambda run_dir, cmd, nproc=1, **kw: None)
    started = runner.start_next()
    assert owners.run_owner(started) == "alice"
