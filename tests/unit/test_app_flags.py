"""app.py flags: loopback by default, a loud warning when exposed without a login, login files."""

import pytest

import app


def test_defaults_are_private():
    args = app.parse_args([])
    assert (args.host, args.share, args.auth, args.max_upload_mb, args.allow_custom_rewards) == (
        "127.0.0.1", False, None, 50, False)


@pytest.mark.parametrize("host, share, has_auth, warns", [
    ("127.0.0.1", False, False, False), ("localhost", False, False, False), ("::1", False, False, False),
    ("0.0.0.0", False, False, True), ("192.168.1.20", False, False, True), ("127.0.0.1", True, False, True),
    ("0.0.0.0", False, True, False),
])
def test_exposure_warning(host, share, has_auth, warns):
    message = app.exposure_warning(host, share, has_auth)
    assert (message is not None) == warns
    if warns:
        assert "NO authentication" in message and "--auth" in message


def test_logins_from_flag_and_file(tmp_path):
    path = tmp_path / "logins"
    path.write_text("# comment\n\nalice:wonder:land\nbob:builder\n")
    assert app.read_auth("carol:pw", str(path)) == [("carol", "pw"), ("alice", "wonder:land"), ("bob", "builder")]
    assert app.read_auth(None, None) == []


@pytest.mark.parametrize("entry", ["nocolon", ":pw", "user:"])
def test_bad_login_entries_are_refused(entry):
    with pytest.raises(SystemExit, match="USER:PASS"):
        app.read_auth(entry, None)


def test_missing_login_file_is_explained(tmp_path):
    with pytest.raises(SystemExit, match="Can't read --auth-file"):
        app.read_auth(None, str(tmp_path / "nope"))


def test_local_folders_and_the_hub_token_are_the_operators_to_give(tmp_path):
    """--allow-local-dir is repeatable and must name folders; the Hub token is lent to a shared app only on
    --lend-hub-token (tests/unit/test_sources.py shows what each setting does)."""
    from pipeline.models import sources

    args = app.parse_args([])
    assert (args.allow_local_dir, args.lend_hub_token) == ([], False)
    args = app.parse_args(["--allow-local-dir", str(tmp_path), "--allow-local-dir", str(tmp_path / "b"),
                           "--lend-hub-token"])
    assert args.allow_local_dir == [str(tmp_path), str(tmp_path / "b")] and args.lend_hub_token
    try:
        with pytest.raises(SystemExit, match="no such folder"):
            app.configure_sources(args, shared=True)
        (tmp_path / "b").mkdir()
        app.configure_sources(args, shared=True)
        assert sources.allowed_dirs()[1:] == [tmp_path.resolve(), (tmp_path / "b").resolve()]
        assert sources.hub_token() is None  # lent
        for flags, shared in ((["--auth", "a:b"], True), (["--share"], True), (["--host", "0.0.0.0"], True),
                              ([], False)):
            parsed = app.parse_args(flags)
            assert (app.is_shared(parsed.host, parsed.share, bool(parsed.auth))) == shared, flags
            app.configure_sources(parsed, shared=shared)
            assert sources.hub_token() is (False if shared else None), flags
            assert sources.allowed_dirs()[1:] == []
    finally:
        sources.allow_local_dirs([])
        sources.withhold_hub_token(False)


def test_the_queue_looks_for_events_at_a_pace_that_leaves_the_core_to_training():
    """Gradio's queue checks for a new event every millisecond when it has none; the app's checks every 20 ms. The
    attributes set must be the ones Gradio's loops read, or the setting would do nothing after an upgrade."""
    import inspect

    import gradio as gr
    from gradio import queueing

    assert "self.sleep_when_free" in inspect.getsource(queueing.Queue.start_processing)
    assert "self.progress_update_sleep_when_free" in inspect.getsource(queueing.Queue.start_progress_updates)
    with gr.Blocks() as demo:
        gr.Button("x").click(lambda: None)
    queue = app.open_queue(demo)._queue
    assert queue.sleep_when_free == app.QUEUE_IDLE_CHECK_S == 0.02
    assert queue.progress_update_sleep_when_free == app.QUEUE_PROGRESS_CHECK_S == 0.1
