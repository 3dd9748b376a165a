"""Safe by default, tried for real against the launched app: file routes refuse traversal, uploads are
bounded, logins are enforced (and a run is its starter's), hostile RAG filters never widen results, exports
still download."""

import html
import json
import re
import shutil
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest
from gradio_client.exceptions import AppError, AuthenticationError

from pipeline.run_folder import runs

from .helpers import serve_app

pytestmark = pytest.mark.slow


def fetch(url: str, data: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture(scope="module")
def app_url(studio_data, movie_table):
    demo, url = serve_app("--max-upload-mb", "1")
    yield url.rstrip("/")
    demo.close()


@pytest.fixture(scope="module")
def secret(studio_data):
    """A file inside a run directory: the kind of thing that must never be served."""
    run = runs.runs_dir() / "private-run"
    run.mkdir(parents=True, exist_ok=True)
    path = run / "config.json"
    path.write_text('{"secret": "s3cr3t-token"}')
    return path


def traversal_paths(secret_path) -> list[str]:
    rel = "../" * 12 + "etc/passwd"
    return [
        "/etc/passwd",
        str(secret_path),
        rel,
        quote(rel, safe=""),
        quote(quote(rel, safe=""), safe=""),                 # double-encoded
        "..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
        "%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "..\\..\\..\\..\\etc\\passwd",
        quote(str(secret_path), safe=""),
        "data/runs/private-run/config.json",
        "file:///etc/passwd",
    ]


@pytest.mark.parametrize("route", ["/gradio_api/file=", "/file=", "/gradio_api/file/", "/static/", "/assets/"])
def test_file_routes_refuse_traversal_and_private_files(app_url, secret, route):
    for path in traversal_paths(secret):
        status, body = fetch(app_url + route + path)
        assert b"root:x:0:0" not in body and b"s3cr3t-token" not in body, (route, path, status)
        assert status in (400, 403, 404, 405, 422), (route, path, status)


def test_blocked_paths_hold_inside_an_allowed_folder(studio_data, secret, monkeypatch):
    """`blocked_paths` on its own. With the real settings a run's files are refused twice over (not in
    `allowed_paths`, and blocked), so the test above passes without either layer alone. Here the launch also
    allows the whole data directory, as a widened export folder would: a file beside the blocked folders is
    then served, and the runs, uploads, models and LanceDB folders inside it must still be refused."""
    import gradio as gr

    real_launch = gr.Blocks.launch

    def launch_allowing_the_data_folder(self, *args, **kwargs):
        kwargs["allowed_paths"] = [*(kwargs.get("allowed_paths") or []), str(runs.data_dir())]
        return real_launch(self, *args, **kwargs)

    monkeypatch.setattr(gr.Blocks, "launch", launch_allowing_the_data_folder)
    beside = runs.data_dir() / "served-note.txt"
    beside.write_text("allowed-and-served")
    private = [secret]
    for folder in ("uploads", "models", "lancedb"):
        path = runs.data_dir() / folder / "blocked-probe" / "private.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"secret": "s3cr3t-token"}')
        private.append(path)
    demo, url = serve_app()
    try:
        for route in ("/gradio_api/file=", "/gradio_api/file/"):
            status, body = fetch(url.rstrip("/") + route + str(beside))
            assert (status, body) == (200, b"allowed-and-served"), (route, status)  # the widening took
            for path in private:
                status, body = fetch(url.rstrip("/") + route + str(path))
                assert b"s3cr3t-token" not in body, (route, str(path), status)
                assert status == 403, (route, str(path), status)
    finally:
        demo.close()
        beside.unlink()
        for path in private[1:]:
            path.unlink()
            path.parent.rmdir()


def test_uploads_over_the_limit_are_refused(app_url):
    def upload(size: int) -> tuple[int, bytes]:
        boundary = "studio-boundary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"films.csv\"\r\n"
                "Content-Type: text/csv\r\n\r\n").encode() + b"a" * size + f"\r\n--{boundary}--\r\n".encode()
        return fetch(app_url + "/gradio_api/upload", data=body,
                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})

    status, body = upload(2 * 1024 * 1024)
    assert status == 413, (status, body[:200])
    status, body = upload(10_000)
    assert status == 200 and body.startswith(b'["') and b"films.csv" in body


def test_login_is_enforced_when_asked(studio_data, tmp_path):
    from gradio_client import Client

    logins = tmp_path / "logins.txt"
    logins.write_text("# team logins\nalice:wonderland\nbob:builder\n")
    demo, url = serve_app("--auth-file", str(logins))
    try:
        status, _ = fetch(url.rstrip("/") + "/config")
        assert status == 401
        with pytest.raises(AuthenticationError) as refused:
            Client(url, verbose=False)
        assert str(refused.value) == f"Could not load {url} as credentials were not provided. Please login."
        # A wrong password, and a known user with another user's password: Gradio answers 400 "Incorrect
        # credentials." (the client words that as a plain ValueError; 401 would be its AuthenticationError).
        for user, password in (("alice", "wrong"), ("alice", "builder")):
            status, body = fetch(url.rstrip("/") + "/login", data=f"username={user}&password={password}".encode(),
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
            assert (status, json.loads(body)) == (400, {"detail": "Incorrect credentials."}), (user, status, body)
            with pytest.raises(ValueError) as refused:
                Client(url, auth=(user, password), verbose=False)
            assert (type(refused.value), str(refused.value)) == (ValueError, f"Could not login to {url}.")
        client = bob = Client(url, auth=("bob", "builder"), verbose=False)
        _, summary = client.predict({"headers": ["use", "reward", "weight", "params (JSON)"], "data": []},
                                    "", "", "", "1,0", "group", api_name="/score_candidates")
        assert "std" in summary
        # A run belongs to the user who started it: bob can't delete alice's run, alice can. The login name
        # reaches the handler from Gradio's request, not from anything the client sends.
        from pipeline.run_folder import owners
        from pipeline.setup.config import RunConfig

        run_dir = runs.new_run_dir("alices")
        owners.record_owner(run_dir, "alice")
        runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
        client.predict(None, api_name="/refresh_runs")  # what a page load does: the Runs panel offers the run
        message, *_ = client.predict(run_dir.name, True, True, api_name="/delete_run")
        assert message.startswith(f"❌ Run '{run_dir.name}' belongs to alice: only alice or an operator may "
                                  "delete it."), message
        assert run_dir.is_dir()
        alice = Client(url, auth=("alice", "wonderland"), verbose=False)
        alice.predict(None, api_name="/refresh_runs")
        kept = runs.exports_dir() / f"{run_dir.name}-adapter.zip"
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_bytes(b"\0" * 100)
        assert alice.predict(run_dir.name, True, False, api_name="/delete_run")[0].startswith(
            f"🗑 Deleted **{run_dir.name}**: ")
        assert not run_dir.exists()
        # The zip she kept is now nobody's to prove: under a login, only an operator may remove it.
        for user in (bob, alice):
            text = user.predict(api_name="/remove_orphan_exports")
            assert text.startswith("❌ Files kept from deleted runs may have been anyone's: only an operator"), text
        assert kept.exists()
    finally:
        demo.close()


def result_rows(table_html: str) -> list[tuple[str, int, str]]:
    """(title, year, genre) of each result row in the RAG results table."""
    return [(t, int(y), g) for t, y, g in
            re.findall(r"<td>\[\d+\]</td><td><b>(.*?)</b></td><td>(\d{4})</td><td>(.*?)</td>", table_html)]


HOSTILE = ["Thriller' OR 1=1 --", "Thriller\" OR \"1\"=\"1", "`genre`", "') OR ('a'='a", "Thriller; DROP TABLE movies"]


def test_hostile_rag_filters_through_the_app_never_widen(app_url):
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    # A fair query first, on the bundled films' table.
    table_html, status, *_ = client.predict("a detective uncovers a conspiracy", 1950, 1959, ["Thriller"], 20,
                                            "vector", api_name="/do_search")
    rows = result_rows(table_html)
    assert len(rows) >= 5 and all(1950 <= y <= 1959 and g == "Thriller" for _, y, g in rows)
    films = int(re.search(r"(\d+) films", status).group(1))
    assert films >= 330  # at least the bundled films (other tests in the session may add their own)

    # Over the API, Gradio's CheckboxGroup refuses a genre outside its choices before the handler runs.
    for genre in HOSTILE:
        with pytest.raises(AppError, match=r"is not in the list of choices"):
            client.predict("a detective", 0, 0, [genre], 50, "vector", api_name="/do_search")
    # Text in a number field is refused by the Number component before the handler runs.
    for low, high in (("1990 OR 1=1", 1995), (1990, "2000; DROP TABLE movies")):
        with pytest.raises(AppError):
            client.predict("a detective", low, high, [], 50, "vector", api_name="/do_search")

    # Quotes and SQL in the query text are only text: filters still hold, in both search modes.
    for mode in ("vector", "hybrid"):
        table_html, status, *_ = client.predict("it's a \"twist\" ' OR 1=1 -- `x`", 1950, 1959, ["Thriller"], 50,
                                                mode, api_name="/do_search")
        rows = result_rows(table_html)
        assert len(rows) >= 5 and all(1950 <= y <= 1959 and g == "Thriller" for _, y, g in rows), (mode, rows)
    assert int(re.search(r"(\d+) films", status).group(1)) == films  # nothing dropped or added


def test_hostile_rag_filters_reach_the_tabs_own_check(app_url):
    """Behind Gradio's component checks: the tab's handler itself, as any other caller (a future API route,
    a component whose choices were widened) would reach it, on the table the app serves."""
    from pipeline.training.generate import ModelCache
    from retrieval.store import MovieStore
    from ui import rag as rag_ui

    do_search, _ = rag_ui.make_handlers(MovieStore(), ModelCache())
    known = MovieStore().info().genres

    def refusal(*args) -> str:
        table_html, *rest = do_search(*args)
        assert "<table" not in table_html and not result_rows(table_html), table_html
        match = re.fullmatch(r"<div class='gs-error'>⚠️ (.*)</div>", table_html, re.S)
        assert match, table_html
        return html.unescape(match.group(1))

    for genres in [[g] for g in HOSTILE] + [["Thriller", HOSTILE[0]], [HOSTILE[3], "Drama"]]:
        hostile = next(g for g in genres if g not in known)
        assert refusal("a detective", 0, 0, genres, 50, "vector") == (
            f"Unknown genre {hostile!r}. Pick from: {', '.join(known)}.")
    assert refusal("a detective", "1990 OR 1=1", 1995, [], 50, "vector") == (
        "From year must be a year like 1990, not '1990 OR 1=1'.")
    assert refusal("a detective", 1990, "2000; DROP TABLE movies", [], 50, "hybrid") == (
        "To year must be a year like 1990, not '2000; DROP TABLE movies'.")
    assert refusal("a detective", 1990, 1980, [], 5, "vector") == "From year 1990 is after To year 1980: swap them."
    assert refusal("a detective", 0, 0, [], 51, "vector") == "Top-k must be between 1 and 50."
    # The same handler with fair values does search, inside its filter.
    table_html, *_ = do_search("a detective", 1950, 1959, ["Thriller"], 50, "vector")
    rows = result_rows(table_html)
    assert len(rows) >= 5 and all(1950 <= y <= 1959 and g == "Thriller" for _, y, g in rows)


def test_export_zip_is_downloadable(app_url, studio_data):
    """The only files a handler returns: a finished run's zips, copied into Gradio's cache and served."""
    from gradio_client import Client

    run = runs.runs_dir() / "exported-run"
    (run / "merged").mkdir(parents=True, exist_ok=True)
    (run / "adapter").mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps({"model": "bundled/SmolLM2-135M-Instruct"}))
    (run / "merged" / "config.json").write_text("{}")
    (run / "adapter" / "adapter_config.json").write_text("{}")
    client = Client(app_url, verbose=False)
    base = "bundled/SmolLM2-135M-Instruct"
    try:
        client.predict(base, base, api_name="/load_choices")  # the model list, as a page load refreshes it
        files, message, _ = client.predict("run:exported-run", api_name="/export_run")
        assert "Exported" in message and len(files) == 2
        assert all(f.endswith(".zip") for f in files)
    finally:
        # Its "merged model" is an empty config: left behind, it would be the newest run, which Chat picks
        # as model A in the browser tests that share this app.
        shutil.rmtree(run, ignore_errors=True)


@pytest.mark.parametrize("api_name", ["/store_upload", "/receive_upload"])
def test_unexpected_file_types_are_refused_and_not_stored(app_url, tmp_path, api_name):
    """Through the running app, Gradio's File component refuses the type before the tab's handler runs. The
    tabs' own check behind it is tested by calling the handlers directly (tests/unit/test_upload_types.py)."""
    from gradio_client import Client, handle_file

    from ui import rag as rag_ui
    from ui import train_form as train_ui

    accepted = {"/store_upload": train_ui.UPLOAD_TYPES, "/receive_upload": rag_ui.UPLOAD_TYPES}[api_name]
    uploads = runs.data_dir() / "uploads"
    before = set(uploads.iterdir()) if uploads.exists() else set()
    payload = tmp_path / "films.exe"
    payload.write_bytes(b"MZ\x90\x00not a table")
    client = Client(app_url, verbose=False)
    with pytest.raises(AppError, match=re.escape(
            f"Invalid file type. Please upload a file that is one of these formats: {accepted}")):
        client.predict(handle_file(str(payload)), api_name=api_name)
    after = set(uploads.iterdir()) if uploads.exists() else set()
    assert after == before


def test_accepted_upload_is_stored_under_the_data_directory(app_url, tmp_path):
    from gradio_client import Client, handle_file

    films = tmp_path / "my films.csv"
    films.write_text("Title,Release Year,Plot\nPaper Moons,2001,A forger fakes the moon. Nobody notices.\n")
    out = Client(app_url, verbose=False).predict(handle_file(str(films)), api_name="/receive_upload")
    # gr.State stays on the server: the client gets the message and the column pickers, never a path.
    assert not any(isinstance(o, str) and str(runs.data_dir()) in o for o in out)
    assert any(isinstance(o, str) and "3 columns" in o for o in out)
    uploads = runs.data_dir() / "uploads"
    assert any(p.suffix == ".csv" and p.read_text().startswith("Title,") for p in uploads.iterdir())
