"""GRPO Studio: parse flags, build the Blocks from ui/, launch (127.0.0.1 by default)."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def build_app(allow_custom_rewards: bool = False):
    import gradio as gr

    from pipeline.generate import ModelCache
    from retrieval.store import MovieStore
    from ui import chat, rag, reward_bench, train

    cache = ModelCache(capacity=2)  # shared by Chat and RAG: at most two models in memory
    store = MovieStore()  # the movie-plot table under <data>/lancedb, shared by every session
    with gr.Blocks(title="GRPO Studio") as demo:
        gr.Markdown("# GRPO Studio\nFine-tune a small model with GRPO and watch why it moves: every group, "
                    "every reward, every advantage.")
        with gr.Tabs():
            refresh_runs, run_select, outputs = train.build(allow_custom_rewards)
            reward_bench.build(allow_custom_rewards)
            load_chat_choices, chat_models = chat.build(cache)
            load_rag, rag_inputs, rag_outputs = rag.build(cache, store)
        # A reload (or a restarted app) finds the active or latest run again, read from disk.
        demo.load(refresh_runs, run_select, outputs)
        demo.load(load_chat_choices, chat_models, chat_models)
        demo.load(load_rag, rag_inputs, rag_outputs)
    return demo


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GRPO Studio web app")
    parser.add_argument("--host", default="127.0.0.1", help="Interface to listen on (default: loopback only).")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="Open a public Gradio share link (off by default).")
    parser.add_argument("--allow-custom-rewards", action="store_true",
                        help="Allow rewards written as Python in the UI (arbitrary code; runs in the trainer).")
    parser.add_argument("--max-upload-mb", type=int, default=50)
    args = parser.parse_args(argv)

    if not is_loopback(args.host):
        print(f"WARNING: listening on {args.host} with no authentication: anyone who can reach this port "
              "can start training runs.", file=sys.stderr)
    demo = build_app(args.allow_custom_rewards)
    demo.queue(default_concurrency_limit=4, max_size=64)
    demo.launch(server_name=args.host, server_port=args.port, share=args.share,
                max_file_size=f"{args.max_upload_mb}mb", css=(ROOT / "assets" / "studio.css").read_text(),
                show_error=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
