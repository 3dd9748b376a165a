"""The RAG tab's movie table: its status line, and the handlers that add films to it (the bundled films, an
upload, the Wikipedia plots) or re-embed it, each with progress and a Cancel that belongs to the page that
pressed it."""

from __future__ import annotations

import html
import threading
from pathlib import Path

import gradio as gr

from pipeline.run_folder.paths import data_dir
from retrieval import movies as movie_data
from retrieval.store import BUNDLED_EMBEDDER, MovieStore, StoreError, UpsertReport
from ui import uploads

UPLOAD_TYPES = [".csv", ".tsv", ".jsonl"]
MAP_FIELDS = [("title", "Title"), ("release_year", "Release year"), ("plot", "Plot"), ("genre", "Genre"),
              ("director", "Director"), ("id", "Id")]


def status_html(info) -> str:
    if not info.rows:
        return ("<div class='gs-empty'>No movie table yet. The first search builds it from the 330 bundled films "
                "(about 20 s on a laptop CPU), or open <b>Movie table</b> below to build it now or add your own "
                "CSV.</div>")
    years = f"{info.year_min}–{info.year_max}" if info.year_min is not None else "-"
    return (f"<div class='gs-ok'>{info.rows} films · {years} · {len(info.genres)} genres · embedder "
            f"<code>{html.escape(str(info.embedder))}</code> ({info.dims}-d) · LanceDB at "
            f"<code>{html.escape(shown_location(info.uri, data_dir()))}</code></div>")


def shown_location(uri: str, data: Path) -> str:
    """Where the table lives, as the page shows it: relative to the app's data folder `data` (the server's own
    paths stay off a page that other users of a shared app see); a location elsewhere shows its last folder only.

    >>> shown_location("/srv/studio/lancedb", Path("/srv/studio")), shown_location("/mnt/x/films.lance", Path("/srv"))
    ('<data folder>/lancedb', '…/films.lance')
    """
    path = Path(uri)
    try:
        return f"<data folder>/{path.relative_to(data)}"
    except ValueError:
        return f"…/{path.name}"


def progress_fn(progress):
    def report(done: int, total: int, what: str) -> None:
        if total:
            progress((done, total), desc=what, unit="plots")
    return report


def bundled_genres() -> list[str]:
    return sorted({m.genre for m in movie_data.load_bundled()})


def genre_choices(info) -> list[str]:
    """The table's genres; before the first build, those of the bundled films it will be built from."""
    return info.genres if info.rows else bundled_genres()


def table_state(store: MovieStore, info=None):
    info = info or store.info()
    return (status_html(info), gr.CheckboxGroup(choices=genre_choices(info)),
            gr.Textbox(value=info.embedder or BUNDLED_EMBEDDER))


def _finished(report, what: str) -> str:
    """The message after an ingest: done, or cancelled with how to resume."""
    if report.cancelled:
        return f"⏹ {what}: {report.summary()}"
    return f"✓ {what}: {report.summary()}"


class IngestJobs:
    """The Cancel flag of each session's running ingest (writes are queued one at a time, so a session has
    at most one). Keyed by the Gradio session, so Cancel in one browser never stops another's upload."""

    def __init__(self):
        self._flags: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(request) -> str:
        return getattr(request, "session_hash", None) or "local"

    def start(self, request) -> threading.Event:
        flag = threading.Event()
        with self._lock:
            self._flags[self._key(request)] = flag
        return flag

    def finish(self, request, flag: threading.Event) -> None:
        with self._lock:
            if self._flags.get(self._key(request)) is flag:
                del self._flags[self._key(request)]

    def cancel(self, request) -> bool:
        with self._lock:
            flag = self._flags.get(self._key(request))
        if flag is None:
            return False
        flag.set()
        return True


def make_table_handlers(store: MovieStore):
    jobs = IngestJobs()

    def ingest(movies, embedder, progress, request) -> UpsertReport:
        flag = jobs.start(request)
        try:
            return store.upsert(movies, embedder=embedder, progress=progress_fn(progress), cancel=flag)
        finally:
            jobs.finish(request, flag)

    def build_bundled(embedder, request: gr.Request = None, progress=gr.Progress()):
        try:
            report = ingest(movie_data.load_bundled(), embedder, progress, request)
        except (StoreError, movie_data.MovieDataError) as exc:
            return (f"⚠️ {exc}", *table_state(store))
        return (_finished(report, "Bundled films"), *table_state(store))

    def receive_upload(file_path):
        """Copy the upload under the data directory (kept server-side) and offer its columns."""
        empty = [gr.Dropdown(choices=[], value=None) for _ in MAP_FIELDS]
        try:
            upload = uploads.store_upload(file_path, UPLOAD_TYPES)
        except uploads.UploadRefused as exc:
            return None, f"⚠️ {exc}", *empty
        if upload is None:
            return None, "", *empty
        try:
            frame = movie_data.read_table(upload.path, max_rows=200)
        except movie_data.MovieDataError as exc:
            upload.discard()
            return None, f"⚠️ {upload.tell(str(exc))}", *empty
        columns = [str(c) for c in frame.columns]
        guess = movie_data.guess_mapping(columns)
        drops = [gr.Dropdown(choices=[""] + columns, value=guess.get(field) or "") for field, _ in MAP_FIELDS]
        return ({"path": str(upload.path), "name": upload.name},
                f"{upload.name}: {len(columns)} columns. Check the mapping, then add the films.", *drops)

    # One parameter per MAP_FIELDS entry, in its order: Gradio injects request and progress only into
    # parameters before any *args (with `*mapping_values` the upload showed no progress at all).
    def add_upload(stored, embedder, title_col, year_col, plot_col, genre_col, director_col, id_col,
                   request: gr.Request = None, progress=gr.Progress()):
        if not stored:
            return ("Upload a CSV first.", *table_state(store))
        columns = (title_col, year_col, plot_col, genre_col, director_col, id_col)
        mapping = {field: (value or None) for (field, _), value in zip(MAP_FIELDS, columns, strict=True)}
        try:
            movies, problems = movie_data.read_movies_file(stored["path"], mapping, skip_bad=True,
                                                           display_name=stored["name"])
            report = ingest(movies, embedder, progress, request)
        except (StoreError, movie_data.MovieDataError) as exc:
            return (f"⚠️ {exc}", *table_state(store))
        note = ""
        if problems:
            note = f"\n\n{len(problems)} row{'s' if len(problems) > 1 else ''} skipped, e.g. {problems[0]}"
        return (_finished(report, "Upload") + note, *table_state(store))

    def add_wiki(max_rows, embedder, request: gr.Request = None, progress=gr.Progress()):
        try:
            progress(0, desc="Downloading the Wikipedia movie-plots CSV")
            movies, problems = movie_data.read_wiki_plots(int(max_rows or 2000))
            report = ingest(movies, embedder, progress, request)
        except Exception as exc:  # noqa: BLE001 - offline, hub errors, parse errors: all shown, app keeps serving
            return (f"⚠️ {exc}", *table_state(store))
        return (_finished(report, "Wikipedia plots") + f" ({len(problems)} rows skipped)", *table_state(store))

    def rebuild(embedder, progress=gr.Progress()):
        try:
            if store.table() is None:
                report = store.upsert(movie_data.load_bundled(), embedder=embedder, progress=progress_fn(progress))
            else:
                report = store.rebuild(embedder, progress=progress_fn(progress))
        except StoreError as exc:
            return (f"⚠️ {exc}", *table_state(store))
        return (f"✓ Re-embedded every film with {embedder or BUNDLED_EMBEDDER}: {report.summary()}",
                *table_state(store))

    def cancel_ingest(request: gr.Request = None):
        if jobs.cancel(request):
            return ("Cancelling: the batch being embedded is finished and written first (a few seconds), so the "
                    "table only holds whole batches. Add the same films again later to resume.")
        return "Nothing is being added from this page."

    return build_bundled, receive_upload, add_upload, add_wiki, rebuild, cancel_ingest
