"""The Train tab's form: model, prompts, rewards and settings, the checks before a run (preview, pre-flight,
learnability scan, the equivalent command) and Start. Handlers read the form into a RunConfig
(ui/form.py) and call pipeline/."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable
from typing import Any

import gradio as gr

from pipeline import runner
from pipeline.run_folder import run_files, run_queue, runs, stages
from pipeline.setup.config import ConfigError, RunConfig
from pipeline.setup.data import DatasetError, load_rows, read_table
from pipeline.models.loading import gpu_count
from pipeline.setup.presets import apply_preset
from pipeline.setup.sweep import grid
from pipeline.rewards import reward_registry
from ui import uploads, views
from ui.form import config_to_form, form_to_config, number_bounds
from ui.runs_panel import free_gpu_for_training, run_names
from ui.steer_panel import PANEL_ID as STEER_PANEL_ID
from ui.tab import acting


# The "All settings" accordion and the "Steer this run" panel are built open, so Gradio mounts their fields with
# the page, and folded once the page has loaded; until then studio.css keeps their content hidden. Built closed, a
# field typed into while the page was still loading was set back to its initial value (2 of 6 tries in a probe).
# Folded, the steer panel leaves the charts in view under the run header.
SETTINGS_ID = "all-settings"
CLOSE_SETTINGS_JS = """() => {
  for (const id of ['%s', '%s']) {
    const header = document.querySelector('#' + id + ' button.label-wrap');
    if (header && header.classList.contains('open')) header.click();
  }
  document.body.classList.add('gs-settings-ready');
}""" % (SETTINGS_ID, STEER_PANEL_ID)


def settings_accordion() -> gr.Accordion:
    """The "All settings" accordion: built open, folded on page load (CLOSE_SETTINGS_JS)."""
    return gr.Accordion("All settings", open=True, elem_id=SETTINGS_ID)


UPLOAD_TYPES = [".csv", ".tsv", ".jsonl", ".json"]


def table_cell(text: str) -> str:
    r"""Text for one cell of a Markdown table, shown as written: a tag such as <answer> is not taken as HTML and
    dropped, and a | (as in an absolute value) does not split the cell.

    >>> table_cell("1 if <answer>x</answer>; -|t - n|")
    '1 if &lt;answer&gt;x&lt;/answer&gt;; -\\|t - n\\|'
    """
    return html.escape(text, quote=False).replace("|", "\\|")


def reward_docs() -> str:
    lines = ["| reward | what it scores | parameters |", "|---|---|---|"]
    for d in reward_registry.describe():
        params = ", ".join(f"`{k}` ({table_cell(p['help'])})" for k, p in d["params"].items()) or "none"
        lines.append(f"| `{d['name']}` | {table_cell(d['description'])} | {params} |")
    lines.append("\nWeight 0 makes a reward a **monitor**: scored, charted and shown in the group inspector, but "
                 "left out of the advantage. A warning shows when a trained reward rises while a monitor falls.")
    return "\n".join(lines)


def hyper_component(spec: dataclasses.Field, default: Any) -> gr.components.Component:
    """One setting's component, from its RunConfig field: label, help, choices and a number's bounds come from
    the metadata."""
    meta = spec.metadata
    kwargs = dict(label=meta["label"], info=meta["help"], value=default)
    if "choices" in meta:
        return gr.Dropdown(choices=list(meta["choices"]), **kwargs)
    if isinstance(default, bool):
        return gr.Checkbox(**kwargs)
    if isinstance(default, (int, float)):
        return gr.Number(precision=0 if isinstance(default, int) else None, **number_bounds(spec), **kwargs)
    return gr.Textbox(**kwargs)


def store_upload(file_path: str | None) -> tuple[str, gr.Dropdown, gr.Dropdown, str]:
    """Copy an upload under the data directory and offer its columns."""
    nothing = ("", gr.Dropdown(choices=[]), gr.Dropdown(choices=[]))
    try:
        upload = uploads.store_upload(file_path, UPLOAD_TYPES)
    except uploads.UploadRefused as exc:
        return *nothing, f"❌ {exc}"
    if upload is None:
        return *nothing, ""
    try:
        _, columns = read_table(upload.path)
    except DatasetError as exc:
        upload.discard()
        return *nothing, f"❌ {upload.tell(str(exc))}"
    prompt = next((c for c in columns if c.lower() in ("prompt", "question", "text", "input")), columns[0])
    answer = next((c for c in columns if c.lower() in ("answer", "solution", "target", "label")), None)
    return (str(upload.path), gr.Dropdown(choices=columns, value=prompt),
            gr.Dropdown(choices=[""] + columns, value=answer or ""), f"✓ {upload.name}: {len(columns)} columns.")


def preview_dataset(progress=gr.Progress(), **form):
    try:
        cfg = form_to_config(form)
        progress(0.2, desc="Reading prompts")
        rows = load_rows(cfg.dataset)[:3]
        progress(0.5, desc="Loading the tokenizer (the bundled model is converted once, ~30 s)")
        from pipeline.models.loading import count_prompt_tokens, load_tokenizer, resolve_model

        tok = load_tokenizer(resolve_model(cfg.model))
        shown = []
        for i, row in enumerate(rows, 1):
            text = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
            answer = f"\n[reference answer: {row['answer']}]" if "answer" in row else ""
            shown.append(f"--- prompt {i} ({count_prompt_tokens(tok, row['prompt'])} tokens) ---\n{text}{answer}")
        return "\n\n".join(shown)
    except Exception as exc:  # noqa: BLE001 - show the reason, keep serving
        return f"Can't preview: {exc}"


def run_preflight(allow_custom: bool, progress=gr.Progress(), **form):
    from pipeline.training.preflight import preflight

    try:
        cfg = form_to_config(form)
    except ConfigError as exc:
        return f"❌ {exc}"
    progress(0.3, desc="Checking data, model, budget and rewards")
    checks = preflight(cfg, allow_custom_rewards=allow_custom)
    lines = [f"{'✅' if c.ok else '❌'} **{c.name}**: {c.message}" for c in checks]
    verdict = "Ready to start." if all(c.ok for c in checks) else "Fix the ❌ items before starting."
    return "\n\n".join(lines + [f"**{verdict}**"])


def make_scanner(cache) -> Callable[..., tuple[str, Any]]:
    """The "Learnability scan" handler: samples with the app's one ModelCache (shared with Chat, RAG and the
    reward bench), then pipeline/training/preflight.py does the rest. Returns the scan's view and the prompts it
    kept."""

    def learnability_scan(allow_custom: bool, prompts, progress=gr.Progress(), **form):
        from pipeline.training.preflight import learnability_scan as scan

        try:
            cfg = form_to_config(form)
            progress(0.05, desc="Loading the model (or reusing the one Chat has loaded)")
            model, tokenizer = cache.get(cfg.model)
            report = scan(cfg, int(prompts or 0), allow_custom_rewards=allow_custom, model=model,
                          tokenizer=tokenizer, progress=progress)
        except Exception as exc:  # noqa: BLE001 - show the reason, keep serving
            return f"<div class='gs-error'>❌ Can't scan: {html.escape(str(exc))}</div>", gr.skip()
        return views.scan_html(report), report.kept

    return learnability_scan


def show_command(allow_custom: bool, nproc, run_name: str = "", **form):
    try:
        cfg = form_to_config(form)
        label = runs.run_label(run_name, runner.default_label(cfg))
    except (ConfigError, ValueError) as exc:
        return f"# {exc}"
    placeholder = runs.runs_dir() / f"START-TIME-{label}"
    single = runner.command_preview(runner.command("train", placeholder, allow_custom_rewards=allow_custom,
                                                   python=".venv/bin/python"), gpus=gpu_count())
    multi = runner.command_preview(runner.command("train", placeholder, nproc=max(int(nproc or 1), 2),
                                                  allow_custom_rewards=allow_custom, python=".venv/bin/python"))
    summary = (f"# {cfg.max_steps} steps, G={cfg.num_generations}, {cfg.max_completion_length} completion tokens, "
               f"rewards: {', '.join(r.name for r in cfg.rewards) or 'none'}")
    staged = stages.model_in_run(cfg.model)
    if staged:  # headless, the trainer reads the model where it is; the queue takes it into the run as Start does
        summary += (f"\n# a next stage of {staged[0].name}: run headless, it reads that run's model in place (resuming "
                    f"or deleting {staged[0].name} changes it); to give the run its own copy, queue it instead:\n"
                    f"#   .venv/bin/python -m pipeline.queue add --after {staged[0].name} --config <this config.json>")
    return (f"{summary}\n# 1. save this as {placeholder / run_files.CONFIG}\n# 2. run it headless:\n{single}\n"
            f"# ...or on 2 processes / GPUs:\n{multi}\n\n# config.json\n{cfg.to_json()}")


def _request(nproc, run_name: str, form: dict) -> tuple[RunConfig, str, int]:
    """What Start and Add to queue read from the form: the config, the run's name, its process count. Raises
    ValueError (ConfigError among them) saying what is wrong."""
    cfg = form_to_config(form)
    label, processes = runner.training_request(cfg, run_name, nproc)
    return cfg, label, processes


STARTED = "▶ Started **{}**. The first step appears after the model loads and one group is sampled."


def start_training(allow_custom: bool, nproc, run_name: str = "", request: gr.Request = None, **form):
    try:
        cfg, label, processes = _request(nproc, run_name, form)
        # More than one process: the same entry point under torchrun, one rank per GPU. The run is the
        # logged-in user's (no one's without a login).
        run_dir = runner.start("train", cfg=cfg, label=label, nproc=processes, allow_custom_rewards=allow_custom,
                               actor=acting(request))
    except (ConfigError, runner.RunnerError, OSError, ValueError) as exc:
        busy = " Or press **Add to queue**: it starts by itself when that run ends." \
            if isinstance(exc, runner.RunnerError) and runner.busy_run() is not None else ""
        return gr.Dropdown(), f"❌ {exc}{busy}"
    free_gpu_for_training()
    return gr.Dropdown(choices=run_names(), value=run_dir.name), STARTED.format(run_dir.name)


def queue_training(allow_custom: bool, nproc, run_name: str = "", request: gr.Request = None, **form):
    """Add to queue: the form's run waits for the machine (checked now as Start checks it), and starts by itself;
    on a free machine the line's first run starts at once."""
    try:
        cfg, label, processes = _request(nproc, run_name, form)
        entry, started = runner.queue_training(cfg, label=label, nproc=processes, allow_custom_rewards=allow_custom,
                                               actor=acting(request))
    except (ConfigError, runner.RunnerError, OSError, ValueError) as exc:
        return gr.Dropdown(), f"❌ {exc}"
    if started is not None:
        free_gpu_for_training()
        return gr.Dropdown(choices=run_names(), value=started.name), STARTED.format(started.name)
    place = run_queue.read().position(entry.id)
    busy = runner.busy_run()
    after = f" after **{busy[0].name}**" if busy else ""
    return gr.Dropdown(), (f"Queued **{label}**, number {place} in line: it starts by itself{after}, and a page "
                           "showing that run moves to it. Remove from queue, below, takes it out.")


SWEEP_HELP = ("The form's run once per value, each named after its value (\"lr 1e-4\"), waiting in the queue; with a "
              "second setting, once per pair of values. When they have run, tick them under Runs, Overlay runs, to "
              "see which value learned best.")


def queue_sweep(allow_custom: bool, nproc, run_name: str = "", setting: str = "learning_rate", values: str = "",
                setting2: str = "", values2: str = "", request: gr.Request = None, **form):
    """Queue a sweep: the form's run once per typed value of one number setting, or per pair of values of two (a
    grid), all checked before any waits."""
    try:
        cfg, _, processes = _request(nproc, run_name, form)
        axes = [(setting, values or "")] + ([(setting2, values2 or "")] if setting2 else [])
        planned = grid(cfg, axes, (run_name or "").strip(), allow_custom_rewards=allow_custom)
        entries, started = runner.queue_trainings([(runs.run_label(label, label), one) for label, one in planned],
                                                  nproc=processes, allow_custom_rewards=allow_custom,
                                                  actor=acting(request))
    except (ConfigError, runner.RunnerError, OSError, ValueError) as exc:
        return gr.Dropdown(), f"❌ {exc}"
    names = ", ".join(f"**{entry.label}**" for entry in entries)
    queued = f"Queued {len(entries)} runs: {names}. They run one after another; compare them under Runs."
    if started is not None:
        free_gpu_for_training()
        return gr.Dropdown(choices=run_names(), value=started.name), f"{queued} {STARTED.format(started.name)}"
    return gr.Dropdown(), queued


def fill_preset(name: str, allow_custom: bool = False, model_custom: str | None = None) -> dict[str, Any]:
    """A preset fills the whole form but an uploaded file's path: model, prompts, the rewards table (the
    length + diversity pair is a preset) and the settings. A run's model in the model box (*Train a next stage from
    it*) stays: the preset then sets what that stage teaches. {form key: value}."""
    cfg = apply_preset(RunConfig(), name)
    if stages.model_in_run(model_custom):
        cfg = dataclasses.replace(cfg, model=str(model_custom).strip())
    values = config_to_form(cfg, allow_custom=allow_custom)
    return {key: value for key, value in values.items() if key != "path"}
