"""Taking a run's model out of the app: zips of the merged model and the adapter, the snippet that loads
them, the merged model as one GGUF file for llama.cpp and Ollama, and the push of the merged model to the
Hugging Face Hub. A checkpoint exports as the run does: its adapter, merged into the base model once (kept
under <data>/exports for the next export of it).

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
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from pipeline.models import gguf_export
from pipeline.run_folder import owners, run_files
from pipeline.run_folder.runs import exports_dir, is_disk_full, room_problem
from pipeline.run_folder.jobs import PUSH
from pipeline.run_folder.jobstate import job_worker
from pipeline.run_folder.paths import keep_private

TOKEN_ENV = next(option.env for option in PUSH.options if option.env)  # "HF_TOKEN": how the token travels


class ExportError(ValueError):
    """A run can't be exported or pushed; the message says why and what to do."""


def exportable(run_dir: Path | None, step: int | None = None) -> Path:
    """The run folder when it holds a merged model (or, with `step`, that complete checkpoint); ExportError
    otherwise."""
    if run_dir is None:
        raise ExportError("Pick a run's tuned model (\"… (tuned, …)\") or one of its checkpoints to export.")
    if step is not None:
        if not (run_files.checkpoint(run_dir, step) / run_files.CHECKPOINT_MARKER).exists():
            raise ExportError(f"Checkpoint {step} of '{Path(run_dir).name}' is missing or incomplete: pick another.")
    elif run_files.merged_model(run_dir) is None:
        raise ExportError(f"Run '{Path(run_dir).name}' has no final model yet: pick one of its checkpoints, or "
                          "wait until it finishes.")
    return Path(run_dir)


def export_name(run_dir: Path, step: int | None = None) -> str:
    """What the files of an export are named after: the run, and the checkpoint's step when it is one.

    >>> export_name(Path("runs/20261127-101500-tldr")), export_name(Path("runs/20261127-101500-tldr"), 8)
    ('20261127-101500-tldr', '20261127-101500-tldr-step8')
    """
    return run_dir.name if step is None else f"{run_dir.name}-step{step}"


def export_target(run_dir: Path | None, actor: owners.Actor | None, step: int | None = None) -> tuple[Path, Path]:
    """The run folder and <data>/exports, for a run with a merged model (or the checkpoint `step`) that
    `actor` may take out: under a login, only the run's owner (or an operator) may (owners.py). ExportError
    otherwise."""
    run_dir = exportable(run_dir, step)
    refusal = owners.refusal(run_dir, actor, "export it")
    if refusal:
        raise ExportError(refusal)
    out = exports_dir()
    out.mkdir(parents=True, exist_ok=True)
    return run_dir, out


def merged_folder(run_dir: Path, step: int | None, out: Path) -> Path:
    """The transformers folder of what is exported: the run's merged model, or the checkpoint's adapter merged
    into its base model, saved once under `out` (written beside and renamed, so a failed merge leaves nothing)."""
    if step is None:
        return run_files.merged_model(run_dir)
    folder = out / f"{export_name(run_dir, step)}-{run_files.MERGED}"
    if (folder / gguf_export.MODEL_CONFIG).exists():  # renamed into place whole: a folder there is complete
        return folder
    from pipeline.training.generate import ChatModelError, ModelChoice, load_choice

    try:
        model, tokenizer = load_choice(ModelChoice("checkpoint", run_dir.name, step))
    except ChatModelError as exc:
        raise ExportError(str(exc)) from None
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


@contextmanager
def writing(out: Path) -> Iterator[None]:
    """Around an export's writes: one that fails (an OSError, or a full disk as torch and safetensors word it,
    runs.is_disk_full) says so in words; other errors pass as they are."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, OSError) or is_disk_full(exc):
            raise ExportError(f"Could not write the export: {getattr(exc, 'strerror', None) or exc}. Free some space "
                              f"in {out} (or remove old exports there) and export again; nothing half-written was "
                              "left.") from None
        raise


ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "README.md")  # of a checkpoint, what PEFT loads
# Weights are stored in a zip as they are: deflate shrinks float weights by about a tenth and takes 40 times as long
# (22 s against 0.5 s for the bundled model's 0.5 GB).
STORED = (".safetensors", ".bin", ".pt", ".gguf")


def zip_files(files: dict[str, Path], zip_path: Path) -> str:
    """Zip `files` ({name in the zip: path}) into `zip_path`, through a temporary file beside it; weights
    stored, the rest deflated. Returns the zip's path."""
    import zipfile

    tmp = zip_path.with_name(f".{zip_path.name}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w") as archive:
            for name, path in sorted(files.items()):
                archive.write(path, name, zipfile.ZIP_STORED if name.endswith(STORED) else zipfile.ZIP_DEFLATED)
        os.replace(tmp, zip_path)
    finally:
        tmp.unlink(missing_ok=True)
    return str(zip_path)


def folder_files(folder: Path, only: tuple[str, ...] = ()) -> dict[str, Path]:
    """Every file under `folder` (or only those named), by its path inside it."""
    return {path.relative_to(folder).as_posix(): path for path in folder.rglob("*")
            if path.is_file() and (not only or path.name in only)}


def export_zips(run_dir: Path, on_part: Callable[[str], None] = lambda part: None,
                actor: owners.Actor | None = None, step: int | None = None) -> list[str]:
    """Zip the merged model and the adapter (of the run, or of its checkpoint `step`) under <data>/exports;
    returns the zip paths."""
    run_dir, out = export_target(run_dir, actor, step)
    name = export_name(run_dir, step)
    with writing(out):
        on_part(run_files.MERGED)
        merged = folder_files(merged_folder(run_dir, step, out))
        adapter = folder_files(run_dir / run_files.ADAPTER) if step is None else folder_files(
            run_files.checkpoint(run_dir, step), ADAPTER_FILES)
        need = sum(path.stat().st_size for path in [*merged.values(), *adapter.values()])
        if (found := room_problem(need, out, "The zips need")) is not None:  # stored weights: a zip is its files' size
            raise ExportError(found)
        files = [zip_files(merged, out / f"{name}-{run_files.MERGED}.zip")]
        on_part(run_files.ADAPTER)
        files.append(zip_files(adapter, out / f"{name}-{run_files.ADAPTER}.zip"))
    return files


def export_gguf(run_dir: Path, out_type: str = gguf_export.DEFAULT_OUT_TYPE,
                on_progress: Callable[[float], None] = lambda done: None, actor: owners.Actor | None = None,
                step: int | None = None) -> str:
    """Write the merged model (of the run, or of its checkpoint `step`) as one GGUF file under <data>/exports;
    returns its path."""
    if (found := gguf_export.type_problem(out_type)) is not None:  # before a checkpoint is merged or a file named
        raise ExportError(found)
    run_dir, out = export_target(run_dir, actor, step)
    name = export_name(run_dir, step)
    try:
        with writing(out):
            path = gguf_export.write(merged_folder(run_dir, step, out), out / f"{name}-{out_type}.gguf", out_type,
                                     name=name, on_progress=on_progress)
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
    """How to load the exported zips (named after `run_name`, export_name) with transformers (and the adapter
    with PEFT)."""
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
