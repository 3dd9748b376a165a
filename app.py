"""GRPO Studio: parse flags, build the Blocks from ui/, launch (127.0.0.1 by default)."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def tab_builders() -> list:
    """The tabs in page order, each a `build(ctx: TabContext) -> Tab` (ui/tab.py). A new tab is one entry."""
    from ui import chat, rag, reward_bench, train

    return [train.build, reward_bench.build, chat.build, rag.build]


def page_css() -> str:
    """The page's style: assets/studio.css, and what each empty chart says (written from the charts' titles)."""
    from ui.charts import empty_chart_css

    return (ROOT / "assets" / "studio.css").read_text() + "\n" + empty_chart_css()


QUEUE_SIZE = 64  # requests that may wait; more get a "busy" answer at once (--queue-size)


def server_options() -> dict:
    """The FastAPI options the app is launched with: the script every page runs before Gradio's own
    (ui/first_script.py: stops a status-tracker timer Gradio leaves running on every open page)."""
    from starlette.middleware import Middleware

    from ui.first_script import FirstScript

    return {"middleware": [Middleware(FirstScript)]}


def build_app(allow_custom_rewards: bool = False, lancedb_uri: str | None = None, tabs: list | None = None,
              queue_size: int = QUEUE_SIZE, operators: frozenset[str] = frozenset()):
    """The Blocks with every tab, its queue opened (open_queue): what `serve` launches and the tests build."""
    import gradio as gr

    from pipeline.training.generate import ModelCache
    from retrieval.store import MovieStore
    from ui.tab import TabContext

    ctx = TabContext(
        cache=ModelCache(capacity=2),  # shared by Chat, RAG and the reward bench: at most two models in memory
        store=MovieStore(lancedb_uri),  # the movie-plot table (default <data>/lancedb), shared by every session
        allow_custom_rewards=allow_custom_rewards,
        operators=frozenset(operators),
    )
    with gr.Blocks(title="GRPO Studio") as demo:
        gr.Markdown("# GRPO Studio\nFine-tune a small model with GRPO and watch why it moves: every group, "
                    "every reward, every advantage.")
        with gr.Tabs():
            built = [build(ctx) for build in (tab_builders() if tabs is None else tabs)]
        # A reload (or a restarted app) finds each tab's state again, read from disk; then the browser scripts
        # (the Train tab's: fold the settings once mounted, poll the run files for its live view).
        for tab in built:
            for load in tab.loads:
                demo.load(load.fn, list(load.inputs), list(load.outputs))
        for tab in built:
            for script in tab.scripts:
                demo.load(None, js=script)
    return open_queue(demo, queue_size)


# How often the queue looks for a new event while it has none, and for progress to send. Gradio's own pace (every
# 1 ms and 10 ms) keeps a tenth of a core busy on a small CPU, taken from the trainer beside it; at these an
# event waits at most 20 ms more to start, and a progress bar moves ten times a second.
QUEUE_IDLE_CHECK_S = 0.02
QUEUE_PROGRESS_CHECK_S = 0.1


def open_queue(demo, queue_size: int = QUEUE_SIZE):
    """The one place the app's queue is opened. api_open=False: a queued event can't be called with a direct
    POST to /gradio_api/run/<name>, which would skip the queue's max_size and every concurrency limit; the page
    and gradio_client join the queue, and the live poll (a gr.api endpoint with queue=False) still answers."""
    demo = demo.queue(default_concurrency_limit=4, max_size=queue_size, api_open=False)
    queue = demo._queue
    if hasattr(queue, "sleep_when_free"):  # a Gradio without these pauses keeps its own pace
        queue.sleep_when_free = QUEUE_IDLE_CHECK_S
    if hasattr(queue, "progress_update_sleep_when_free"):
        queue.progress_update_sleep_when_free = QUEUE_PROGRESS_CHECK_S
    return demo


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_auth(auth: str | None, auth_file: str | None) -> list[tuple[str, str]]:
    """USER:PASS pairs from --auth and/or a file with one USER:PASS per line ('#' comments allowed)."""
    lines = [auth] if auth else []
    if auth_file:
        try:
            lines += Path(auth_file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise SystemExit(f"Can't read --auth-file {auth_file}: {exc.strerror}.") from None
    pairs = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise SystemExit("Authentication entries must look like USER:PASS (both non-empty).")
        pairs.append((user, password))
    return pairs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="GRPO Studio web app")
    parser.add_argument("--host", default="127.0.0.1", help="Interface to listen on (default: loopback only).")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="Open a public Gradio share link (off by default).")
    parser.add_argument("--auth", metavar="USER:PASS", help="Require this login.")
    parser.add_argument("--auth-file", metavar="PATH", help="Logins, one USER:PASS per line.")
    parser.add_argument("--allow-custom-rewards", action="store_true",
                        help="Allow rewards written as Python in the UI. Any logged-in user can then run code as "
                             "the user this server runs as, in the trainer and scoring processes: it can read "
                             "that user's files and reach the network, but it gets no tokens or cloud credentials "
                             "from this server's environment.")
    parser.add_argument("--operators", metavar="USER,USER",
                        help="With --auth: logins that may stop, resume, delete, export, push and evaluate every "
                             "user's runs (others act only on the runs they started).")
    parser.add_argument("--allow-local-dir", action="append", default=[], metavar="PATH",
                        help="A server folder users may load models and datasets from, by full path (repeatable). "
                             "Without it only the data folder (runs and their merged models) is read.")
    parser.add_argument("--lend-hub-token", action="store_true",
                        help="Let downloads of ids users type use this server's Hugging Face token, and its cached "
                             "copies, when the app is shared (--auth, --share or another --host). Off: they "
                             "reach public Hub repos only.")
    parser.add_argument("--max-upload-mb", type=int, default=50, help="Largest accepted upload (default 50 MB).")
    parser.add_argument("--lancedb-uri", metavar="URI",
                        help="RAG database (default <data>/lancedb); e.g. s3://bucket/path on object storage.")
    parser.add_argument("--queue-size", type=int, default=QUEUE_SIZE,
                        help="Requests that may wait in the queue; more get a 'busy' answer at once.")
    return parser.parse_args(argv)


def exposure_warning(host: str, share: bool, has_auth: bool) -> str | None:
    if has_auth or (is_loopback(host) and not share):
        return None
    where = "a public share link" if share else f"{host}"
    return ("\n" + "!" * 78 + f"\nWARNING: GRPO Studio is reachable on {where} with NO authentication.\n"
            "Anyone who can reach it can start training runs and read your runs and models.\n"
            "Add --auth USER:PASS (or --auth-file), or listen on 127.0.0.1 only.\n" + "!" * 78 + "\n")


def is_shared(host: str, share: bool, has_auth: bool) -> bool:
    """Whether people other than the operator can reach the app (a login means there are such people)."""
    return has_auth or share or not is_loopback(host)


def configure_sources(args: argparse.Namespace, shared: bool) -> None:
    """What users may load (pipeline/models/sources.py): the operator's --allow-local-dir folders, and whether their
    downloads use this server's Hub token. Set for this process and the jobs it starts."""
    from pipeline.models.sources import SourceRefused, allow_local_dirs, withhold_hub_token

    try:
        allow_local_dirs(args.allow_local_dir)
    except SourceRefused as exc:
        raise SystemExit(str(exc)) from None
    withhold_hub_token(shared and not args.lend_hub_token)


def serve(args: argparse.Namespace, prevent_thread_lock: bool = False):
    """Build and launch the app with the settings the flags ask for. Returns (demo, local_url)."""
    from pipeline.models.loading import start_bundled_conversion
    from pipeline.runner import prepare_spare
    from pipeline.run_folder.owners import parse_operators
    from pipeline.run_folder.runs import data_dir

    auth = read_auth(args.auth, args.auth_file)
    warning = exposure_warning(args.host, args.share, bool(auth))
    if warning:
        print(warning, file=sys.stderr, flush=True)
    configure_sources(args, shared=is_shared(args.host, args.share, bool(auth)))
    demo = build_app(args.allow_custom_rewards, args.lancedb_uri, queue_size=args.queue_size,
                     operators=parse_operators(args.operators))
    # Export zips are the only files a handler returns: Gradio copies them from <data>/exports into its cache.
    # Everything else under the data directory (runs, uploads, models, LanceDB, download caches) is never served.
    data = data_dir()
    blocked = [str(data / name) for name in ("runs", "uploads", "models", "lancedb", "cache")]
    _, url, _ = demo.launch(server_name=args.host, server_port=args.port, share=args.share, auth=auth or None,
                            max_file_size=f"{args.max_upload_mb}mb", css=page_css(),
                            show_error=False, allowed_paths=[str(data / "exports")],
                            blocked_paths=blocked, prevent_thread_lock=True, quiet=prevent_thread_lock,
                            app_kwargs=server_options())
    # Both in processes of their own, while the page loads, so that the first Start finds them ready: the bundled
    # model's conversion (once per data folder) and a spare worker with the training libraries imported.
    start_bundled_conversion()
    prepare_spare()
    start_queue_keeper(args.allow_custom_rewards)
    if not prevent_thread_lock:
        demo.block_thread()
    return demo, url


def start_queue_keeper(allow_custom_rewards: bool) -> None:
    """The thread that starts the queued trainings, one when the machine frees (pipeline/runner.py: watch_queue);
    a GPU's chat models make room for each, as they do for a Start."""
    import threading

    from pipeline.runner import watch_queue
    from ui.runs_panel import free_gpu_for_training

    threading.Thread(target=watch_queue, name="queue-keeper", daemon=True,
                     kwargs=dict(allow_custom_rewards=allow_custom_rewards,
                                 on_start=lambda run_dir: free_gpu_for_training())).start()


def main(argv: list[str] | None = None) -> int:
    from pipeline.run_folder.paths import keep_private

    keep_private()  # before any file is made: runs, uploads and models are for this user's eyes only
    serve(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
