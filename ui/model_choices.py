"""Which model each model dropdown of the Chat and RAG tabs offers and shows: the newest finished run until the
user picks one, Model B on the base model of Model A's run, and lists re-read as runs finish."""

from __future__ import annotations


import gradio as gr

from pipeline.run_folder import run_files, runs, stages
from pipeline.setup.config import BUNDLED_MODEL_ID
from pipeline.training.generate import ChatModelError, ModelChoice, chat_choices, run_for_choice


def trained_on(run_name: str) -> str | None:
    """The prompts a run trained on, by their source ("tldr", "movies", "file", ...); None when unreadable."""
    dataset = (runs.read_json(runs.runs_dir() / run_name / run_files.CONFIG) or {}).get("dataset")
    return dataset.get("source") if isinstance(dataset, dict) else None


def default_choice(choices: list[tuple[str, str]] | None = None, source: str | None = None) -> str:
    """The run that finished last (its merged model) if there is one, else the bundled base model. With `source`,
    only a run trained on those prompts counts: the RAG tab asks for one tuned on Movie questions, since a run
    tuned to write TL;DRs answers film questions no better than the model it started from."""
    offered = [ModelChoice.parse(v) for _, v in (chat_choices() if choices is None else choices)]
    finished = [c for c in offered if c.kind == "run" and (source is None or trained_on(c.name) == source)]
    if not finished:
        return BUNDLED_MODEL_ID
    # By end time, not by name: a run named on the command line ("demo") sorts above the app's dated names.
    return max(finished, key=lambda c: runs.read_status(runs.runs_dir() / c.name).get("ended_at") or 0).value


def refreshed_choice(current: str | None, offered: str | None, choices: list[tuple[str, str]],
                     source: str | None = None) -> str:
    """The model a dropdown shows after its list is re-read: a model the user picked stays; the default
    offered last time (never changed) or a model that is gone becomes today's default, such as the
    run that just finished (with `source`, as default_choice picks it)."""
    values = [v for _, v in choices]
    return current if current in values and current != offered else default_choice(choices, source=source)


def dropdown_update(choices: list[tuple[str, str]], shown: str | None, value: str | None) -> gr.Dropdown:
    """A re-read list; the value is sent only when it changes, so a pick made while the list was being re-read
    is not put back to the value the re-read started from."""
    return gr.Dropdown(choices=choices, value=value) if value != shown else gr.Dropdown(choices=choices)


def base_of(choice: str | None) -> str:
    """The model a run or checkpoint choice started from (its config's model); the bundled base model for a
    base model, or a run whose settings can't be read."""
    try:
        run_dir = run_for_choice(choice) if choice else None
    except ChatModelError:
        run_dir = None
    model = (runs.read_json(run_dir / run_files.CONFIG) or {}).get("model") if run_dir is not None else None
    return model if isinstance(model, str) and model.strip() else BUNDLED_MODEL_ID


def model_b(a: str | None, b: str | None, offered_b: str | None,
            choices: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], str]:
    """Model B's choices and value: until the user picks model B, it is the model that model A's run started from,
    so side by side compares a run with its own base (a Qwen run with Qwen, not with the bundled model). A base
    the catalog doesn't list (a local folder, a hub id) is added to B's choices.

    >>> base = BUNDLED_MODEL_ID
    >>> model_b(base, base, base, [("SmolLM2 (base)", base)])
    ([('SmolLM2 (base)', 'bundled/SmolLM2-135M-Instruct')], 'bundled/SmolLM2-135M-Instruct')
    >>> model_b(base, "run:mine", base, [("mine", "run:mine"), ("SmolLM2 (base)", base)])[1]  # picked by the user
    'run:mine'
    """
    base = base_of(a)
    if base not in [v for _, v in choices]:
        choices = [*choices, (f"{stages.model_label(base)} (base of model A)", base)]
    if b is None or b == offered_b or b not in [v for _, v in choices]:
        b = base
    return choices, b


def example_label(text: str, width: int = 70) -> str:
    """A prompt's first line, cut to `width` characters.

    >>> example_label("What is 7 + 3 x 4?"), example_label("A long post " * 10, 20)
    ('What is 7 + 3 x 4?', 'A long post A long…')
    """
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[:width - 1].rstrip() + "…"


def reread_models(a: str | None, b: str | None, offered: str | None, offered_b: str | None):
    """Chat's page load and ↻: the models on disk re-read; Model A follows the newest finished run and Model B that
    run's base model, each until the user picks a model themselves. Returns both dropdowns and what each was
    offered."""
    choices = chat_choices()
    new_a = refreshed_choice(a, offered, choices)
    choices_b, new_b = model_b(new_a, b, offered_b, choices)
    return dropdown_update(choices, a, new_a), dropdown_update(choices_b, b, new_b), default_choice(choices), new_b


def follow_runs(a: str | None, b: str | None, offered: str | None, offered_b: str | None, history: list | None):
    """A run finished or saved a checkpoint while Chat shows: as a page load, but once a conversation has started
    its models stay (a reply from another model would join it unannounced), and only the lists are re-read."""
    if not history:
        return reread_models(a, b, offered, offered_b)
    choices = chat_choices()
    return gr.Dropdown(choices=choices), gr.Dropdown(choices=model_b(a, b, b, choices)[0]), gr.skip(), gr.skip()
