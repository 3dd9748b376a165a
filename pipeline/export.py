"""Taking a finished run's model out of the app: zips of the merged model and the adapter, the snippet that
loads them, the merged model as one GGUF file for llama.cpp and Ollama, and the push of the merged model to
the Hugging Face Hub.

The push is a runner job (pipeline/run_folder/jobs.py: PUSH): `python -m pipeline.export --run-dir R --repo
ID` runs as a process of its own, writes push_status.json (docs/run-files.md) and can be stopped. The token
comes in the HF_TOKEN environment variable, never on the command line or in a run file. No gradio import.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Callable

from pipeline.models import gguf_export
from pipeline.run_folder import owners, run_files
from pipeline.run_folder.jobs import PUSH
from pipeline.run_folder.jobstate import job_worker
from pipeline.run_folder.paths import data_dir, keep_private

TOKEN_ENV = next(option.env for option in PUSH.options if option.env)  # "HF_TOKEN": how the token travels


class ExportError(ValueError):
    """A run can't be exported or pushed; the message says why and what to do."""


def exportable(run_dir: Path | None) -> Path:
    """The run folder when it holds a merged model; ExportError otherwise."""
    if run_dir is None or run_files.merged_model(run_dir) is None:
        raise ExportError("Pick a run's tuned model (\"… (tuned, …)\") to export.")
    return Path(run_dir)


def export_target(run_dir: Path | None, actor: owners.Actor | None) -> tuple[Path, Path]:
    """The run folder and <data>/exports, for a run with a merged model that `actor` may take out: under a
    login, only the run's owner (or an operator) may (owners.py). ExportError otherwise."""
    run_dir = exportable(run_dir)
    refusal = owners.refusal(run_dir, actor, "export it")
    if refusal:
        raise ExportError(refusal)
    out = data_dir() / "exports"
    out.mkdir(parents=True, exist_ok=True)
    return run_dir, out


def export_zips(run_dir: Path, on_part: Callable[[str], None] = lambda part: None,
                actor: owners.Actor | None = None) -> list[str]:
    """Zip the merged model and the adapter under <data>/exports; returns the zip paths."""
    run_dir, out = export_target(run_dir, actor)
    files = []
    for part in (run_files.MERGED, run_files.ADAPTER):
        on_part(part)
        base = out / f"{run_dir.name}-{part}"
        files.append(shutil.make_archive(str(base), "zip", root_dir=run_dir / part))
    return files


def export_gguf(run_dir: Path, out_type: str = gguf_export.DEFAULT_OUT_TYPE,
                on_progress: Callable[[float], None] = lambda done: None, actor: owners.Actor | None = None) -> str:
    """Write the merged model as one GGUF file under <data>/exports; returns its path."""
    run_dir, out = export_target(run_dir, actor)
    try:
        path = gguf_export.write(run_files.merged_model(run_dir), out / f"{run_dir.name}-{out_type}.gguf",
                                 out_type, name=run_dir.name, on_progress=on_progress)
    except gguf_export.GGUFError as exc:
        raise ExportError(str(exc)) from None
    return str(path)


def gguf_snippet(file_name: str) -> str:
    """How to run an exported GGUF file with llama.cpp and with Ollama.

    >>> print(gguf_snippet("20261127-101500-tldr-Q8_0.gguf").splitlines()[-2])
    ollama create grpo-20261127-101500-tldr -f Modelfile
    """
    model = re.sub(r"[^a-z0-9._-]+", "-", Path(file_name).name.lower()).strip("-.")
    model = "grpo-" + re.sub(r"-(q8_0|f16)\.gguf$", "", model)  # Ollama names start with a letter
    return (
        "# llama.cpp: chat in the terminal, or serve an OpenAI-compatible API on port 8080\n"
        f"llama-cli -m {shlex.quote(file_name)} -cnv\n"
        f"llama-server -m {shlex.quote(file_name)} --port 8080\n\n"
        "# Ollama: the chat template and stop token come from the file\n"
        f"echo {shlex.quote('FROM ./' + file_name)} > Modelfile\n"
        f"ollama create {model} -f Modelfile\n"
        f"ollama run {model}\n"
    )


def load_snippet(run_name: str) -> str:
    """How to load the exported zips with transformers (and the adapter with PEFT)."""
    return (
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f"path = \"{run_name}-merged\"  # the unzipped merged folder\n"
        "model = AutoModelForCausalLM.from_pretrained(path)\n"
        "tokenizer = AutoTokenizer.from_pretrained(path)\n"
        "messages = [{\"role\": \"user\", \"content\": \"Summarize: ...\"}]\n"
        "inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors=\"pt\", "
        "return_dict=True)\n"
        "out = model.generate(**inputs, max_new_tokens=64)\n"
        "print(tokenizer.decode(out[0][inputs[\"input_ids\"].shape[1]:], skip_special_tokens=True))\n\n"
        "# or the adapter on top of the base model:\n"
        "# from peft import PeftModel\n"
        f"# model = PeftModel.from_pretrained(base_model, \"{run_name}-adapter\")\n"
    )


def push_problem(run_dir: Path | None, repo_id: str | None, token: str | None) -> str | None:
    """What is wrong with a push request, in words; None when it can go."""
    if run_dir is None or run_files.merged_model(run_dir) is None:
        return "Pick a finished run to push."
    return PUSH.problem(repo_id=repo_id, token=token)


def push(run_dir: Path, repo_id: str, token: str) -> str:
    """Create the repository if needed and upload the merged model; returns its address."""
    from huggingface_hub import HfApi

    api = HfApi(token=token.strip())
    api.create_repo(repo_id.strip(), exist_ok=True)
    api.upload_folder(folder_path=str(Path(run_dir) / run_files.MERGED), repo_id=repo_id.strip())
    return f"https://huggingface.co/{repo_id.strip()}"


def without_secret(text: str, secret: str) -> str:
    """`text` with `secret` masked, for a status file or a log: an error may quote the request it refused.

    >>> without_secret("401 for token hf_abc", " hf_abc ")
    '401 for token ***'
    """
    secret = (secret or "").strip()
    return text.replace(secret, "***") if secret else text


def main(argv: list[str] | None = None) -> int:
    """The push job: running -> done (+ url) / failed (+ error) / stopped, in push_status.json."""
    keep_private()  # it holds the Hub token: no other process of this user may read its environment
    parser = argparse.ArgumentParser(description="Push a run's merged model to the Hugging Face Hub.")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--repo", required=True)
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_ENV, "")
    with job_worker(args.run_dir, PUSH, repo=args.repo,
                    failure=lambda exc: f"Push failed: {without_secret(str(exc), token)}") as job:
        job.finish("done", url=push(args.run_dir, args.repo, token))
    return job.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
