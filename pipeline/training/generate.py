"""Text generation shared by evaluation, the Chat tab and the RAG tab: batched completions, one
streaming helper, and a small cache of loaded models (at most two at once)."""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pipeline.run_folder import run_files, runs


def generate_batch(model, tokenizer, prompts: list[list[dict]], max_new_tokens: int = 64,
                   temperature: float = 0.0, top_p: float = 1.0, batch_size: int = 8) -> list[str]:
    """Completions for chat prompts; temperature 0 means greedy (deterministic)."""
    import torch

    tokenizer.padding_side = "left"  # decoder-only models continue from the right edge
    out: list[str] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        enc = tokenizer.apply_chat_template(chunk, add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True, padding=True).to(model.device)
        refuse_over_context(model, enc, max_new_tokens)
        with torch.inference_mode():
            ids = model.generate(**enc, **_sampling(tokenizer, max_new_tokens, temperature, top_p))
        new = ids[:, enc["input_ids"].shape[1]:]
        out.extend(tokenizer.batch_decode(new, skip_special_tokens=True))
    return out


def sample_groups(model, tokenizer, prompts: list, group_size: int, max_new_tokens: int, temperature: float = 1.0,
                  top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0, repetition_penalty: float = 1.0,
                  seed: int | None = None, prompts_per_batch: int = 4) -> list[list[str]]:
    """G sampled completions for each prompt, as the trainer samples them: the chat template with the generation
    prompt, the run's sampling settings, each prompt pre-filled once for its G completions (pipeline/models/engine.py).
    `seed` makes the draw repeatable without touching the sampling of the rest of the process."""
    import torch
    from transformers import GenerationConfig

    from pipeline.models.engine import cpu_decoding, generate_shared_prefill

    def ids_of(prompt) -> list[int]:
        text = (tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
                if isinstance(prompt, list) else str(prompt))
        return tokenizer(text, add_special_tokens=not isinstance(prompt, list))["input_ids"]

    config = GenerationConfig(max_new_tokens=int(max_new_tokens), do_sample=True, temperature=float(temperature),
                              top_p=float(top_p), top_k=int(top_k), min_p=float(min_p) or None,  # top_k 0: off
                              repetition_penalty=float(repetition_penalty), pad_token_id=tokenizer.pad_token_id,
                              bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                              disable_compile=True)
    devices = [model.device] if model.device.type == "cuda" else []
    out: list[list[str]] = []
    with torch.random.fork_rng(devices=devices), torch.inference_mode(), cpu_decoding(model.device):
        if seed is not None:
            torch.manual_seed(int(seed))
        for start in range(0, len(prompts), prompts_per_batch):
            chunk = [ids_of(p) for p in prompts[start:start + prompts_per_batch]]
            new = generate_shared_prefill(model, [ids for ids in chunk for _ in range(group_size)],
                                          tokenizer.pad_token_id, config)
            texts = tokenizer.batch_decode(new, skip_special_tokens=True)
            out.extend(texts[i:i + group_size] for i in range(0, len(texts), group_size))
    return out


def _sampling(tokenizer, max_new_tokens: int, temperature: float, top_p: float,
              repetition_penalty: float = 1.0) -> dict:
    kwargs = dict(max_new_tokens=int(max_new_tokens), pad_token_id=tokenizer.pad_token_id)
    if repetition_penalty and repetition_penalty != 1.0:
        kwargs["repetition_penalty"] = float(repetition_penalty)
    if temperature and temperature > 0:
        kwargs.update(do_sample=True, temperature=float(temperature), top_p=float(top_p))
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    return kwargs


@dataclass
class StreamStats:
    first_token_s: float | None = None
    tokens: int = 0
    seconds: float = 0.0


class _StopGeneration(Exception):
    """Raised inside generate() (from the streamer) to end a reply early."""


def stream_chat(model, tokenizer, messages: list[dict], max_new_tokens: int = 128, temperature: float = 0.7,
                top_p: float = 0.95, stop: threading.Event | None = None,
                stats: StreamStats | None = None, repetition_penalty: float = 1.0) -> Iterator[str]:
    """Yield the reply so far after each new piece of text. Setting `stop` ends generation early; several replies
    may share one `stop` (side by side), so one reply ending never sets it: only the caller does."""
    import torch
    from transformers import TextIteratorStreamer

    stop = stop or threading.Event()
    gone = threading.Event()  # this reply's caller went away: ends this generation only
    stats = stats if stats is not None else StreamStats()

    class Streamer(TextIteratorStreamer):
        # Stopping from the streamer instead of a StoppingCriteria: generate() calls put() once per token
        # anyway, and a custom criterion measurably slowed small-model decoding on CPU.
        def put(self, value):
            if stop.is_set() or gone.is_set():
                raise _StopGeneration
            stats.tokens += 1
            super().put(value)

    enc = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True).to(model.device)
    refuse_over_context(model, enc, max_new_tokens)
    streamer = Streamer(tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=300)
    kwargs = dict(**enc, streamer=streamer, **_sampling(tokenizer, max_new_tokens, temperature, top_p,
                                                                      repetition_penalty))
    errors: list[BaseException] = []

    def work():
        try:
            with torch.inference_mode():
                model.generate(**kwargs)
        except _StopGeneration:
            streamer.end()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)
            streamer.end()

    start = time.perf_counter()
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    text = ""
    try:
        for piece in streamer:
            if piece:
                if stats.first_token_s is None:
                    stats.first_token_s = time.perf_counter() - start
                text += piece
                yield text
    finally:
        gone.set()  # the reply is done, or its caller went away (Stop button, closed page): end generation too
        thread.join(timeout=30)
        stats.seconds = time.perf_counter() - start
    if errors:
        raise errors[0]


# ---- chat model choices ------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelChoice:
    """A model one can chat with: a base model (catalog id, hub id or folder), a finished run's merged
    model, or one checkpoint of a run. Dropdowns carry it as a string (`value`); `parse` reads it back,
    and nothing else looks inside that string."""

    kind: str  # "base" | "run" | "checkpoint"
    name: str  # the model id for a base model, else the run's name
    step: int | None = None

    @property
    def value(self) -> str:
        """The dropdown value.

        >>> ModelChoice("checkpoint", "demo", 4).value
        'ckpt:demo:4'
        >>> ModelChoice.parse("run:demo") == ModelChoice("run", "demo")
        True
        >>> ModelChoice.parse("bundled/SmolLM2-135M-Instruct").kind
        'base'
        """
        if self.kind == "run":
            return f"run:{self.name}"
        if self.kind == "checkpoint":
            return f"ckpt:{self.name}:{self.step}"
        return self.name

    @classmethod
    def parse(cls, value: "str | ModelChoice") -> "ModelChoice":
        if isinstance(value, ModelChoice):
            return value
        value = str(value or "")
        if value.startswith("run:"):
            return cls("run", value[len("run:"):])
        if value.startswith("ckpt:"):
            name, _, step = value[len("ckpt:"):].rpartition(":")
            if not name or not step.isdigit():
                raise ChatModelError(f"'{value}' is not a checkpoint choice (ckpt:RUN:STEP).")
            return cls("checkpoint", name, int(step))
        return cls("base", value)

    def run_dir(self) -> Path | None:
        """The run folder behind a run or checkpoint choice (only existing runs); None for a base model."""
        if self.kind == "base":
            return None
        problem = runs.run_name_problem(self.name)
        if problem:
            raise ChatModelError(problem)
        path = runs.resolve_run(self.name)
        if path is None:
            raise ChatModelError(f"There is no run named '{self.name}'.")
        return path


def base_choice(choice: "str | ModelChoice") -> str | None:
    """The base model a run or checkpoint choice was trained from, as a choice value; None for a base model
    (it has no base of its own)."""
    from pipeline.setup.config import RunConfig

    run_dir = ModelChoice.parse(choice).run_dir()
    if run_dir is None:
        return None
    return ModelChoice("base", RunConfig.load(run_dir / run_files.CONFIG).model).value


def merged_label(run_dir: Path) -> str:
    """What a run's merged model is, in its chat label: "tuned, final" when the run trained every step, and the
    step it reached when it was stopped early (a Stop saves and merges what it has)."""
    status = runs.read_status(run_dir)
    step, total = status.get("step"), status.get("max_steps")
    if status.get("state") == "stopped" and isinstance(step, int) and isinstance(total, int) and step < total:
        return f"tuned, stopped at step {step} of {total}"
    return "tuned, final"


def chat_choices() -> list[tuple[str, str]]:
    """(label, value) for every model one can chat with: finished runs, their checkpoints, the catalog."""
    from pipeline.models.loading import catalog_choices

    out: list[tuple[str, str]] = []
    for run_dir in runs.iter_run_dirs():
        if run_files.merged_model(run_dir) is not None:
            out.append((f"{run_dir.name} ({merged_label(run_dir)})", ModelChoice("run", run_dir.name).value))
        for ckpt in runs.checkpoints(run_dir):
            step = runs.checkpoint_step(ckpt)
            out.append((f"{run_dir.name} @ step {step}", ModelChoice("checkpoint", run_dir.name, step).value))
    return out + [(f"{label} (base)", value) for label, value in catalog_choices()]


class ChatModelError(RuntimeError):
    """A chat model that can't be used; the message says why."""


# The longest reply Chat, RAG and the reward bench ask for (their sliders' and fields' top).
MAX_REPLY_TOKENS = 512


def context_tokens(model) -> int:
    """How many tokens the model reads at once (its config's max_position_embeddings); 0 when it does not say."""
    return int(getattr(getattr(model, "config", None), "max_position_embeddings", 0) or 0)


def refuse_over_context(model, enc, max_new_tokens: int) -> None:
    """Raise ChatModelError, before any compute, when the tokenized prompt `enc` and its longest reply are over
    the model's context: a pasted book would hold the app's one generation queue for minutes, and the model reads
    nothing sensible past its context anyway."""
    too_long = context_overflow(int(enc["input_ids"].shape[-1]), max_new_tokens, context_tokens(model))
    if too_long:
        raise ChatModelError(too_long)


def context_overflow(prompt_tokens: int, max_new_tokens: int, context: int) -> str | None:
    """Why a prompt and its longest reply do not fit the model's context, or None (also when it is not known).

    >>> context_overflow(8000, 96, 8192) is None, context_overflow(9000, 96, 0) is None
    (True, True)
    >>> print(context_overflow(8000, 256, 8192))
    The prompt is 8000 tokens and the reply may add 256: more than the 8192 tokens this model reads at once. \
Send less text: a shorter message, fewer earlier turns (Clear), fewer films or fewer new tokens.
    """
    if not context or prompt_tokens + max_new_tokens <= context:
        return None
    return (f"The prompt is {prompt_tokens} tokens and the reply may add {max_new_tokens}: more than the {context} "
            "tokens this model reads at once. Send less text: a shorter message, fewer earlier turns (Clear), fewer "
            "films or fewer new tokens.")


def generation_error_message(exc: BaseException) -> str:
    """What the Chat and RAG tabs show when loading or generating fails (the app keeps serving)."""
    from pipeline.models.loading import is_out_of_memory, out_of_memory_message

    # Out of memory first: a model too big to load arrives as "Could not load '...': Cannot allocate memory".
    if is_out_of_memory(exc):
        return "⚠️ " + out_of_memory_message("loading the model or generating", "Lower max new tokens, pick a "
                                             "smaller model, or close the other chat; the app keeps running.")
    if isinstance(exc, ChatModelError):
        return f"⚠️ {exc}"
    return f"⚠️ Generation failed: {type(exc).__name__}: {exc}"


# A chat reply that is an error, not the model's words: marked in the message's metadata (which Gradio's
# Chatbot keeps on the round trip), so scoring and the next turn's context leave it out.
ERROR_METADATA = {"log": "generation error"}


def error_reply(exc: BaseException) -> dict:
    """The assistant message shown in place of a reply that failed."""
    return {"role": "assistant", "content": generation_error_message(exc), "metadata": dict(ERROR_METADATA)}


# Said in place of a reply that ended before any visible text (an end-of-text token first, or only whitespace):
# an empty bubble would look like the app had hung.
EMPTY_REPLY = ("No reply: the model ended without writing any text. A tuned model that drifted can do this; "
               "try a checkpoint from earlier in the run, the base model, or a higher temperature.")


def empty_reply() -> dict:
    """The assistant message shown in place of a reply with no text; marked like an error, so scoring and the next
    turn's context leave it out."""
    return {"role": "assistant", "content": f"*{EMPTY_REPLY}*", "metadata": dict(ERROR_METADATA)}


def is_error_reply(message: dict) -> bool:
    return (message.get("metadata") or {}).get("log") == ERROR_METADATA["log"]


def run_for_choice(choice: "str | ModelChoice") -> Path | None:
    """The run directory behind a run/checkpoint choice (validated: only existing runs)."""
    return ModelChoice.parse(choice).run_dir()


def load_choice(choice: "str | ModelChoice"):
    """(model, tokenizer) of a choice, loaded afresh (not through a cache): a checkpoint comes merged into its
    base model. ChatModelError says why a choice can't be loaded."""
    return _load_choice(choice)


def _load_choice(choice: "str | ModelChoice"):
    from pipeline.setup.config import RunConfig
    from pipeline.models.loading import ModelError, load_model

    choice = ModelChoice.parse(choice)
    run_dir = choice.run_dir()
    try:
        if run_dir is None:
            return load_model(choice.name)
        if choice.kind == "run":
            merged = run_files.merged_model(run_dir)
            if merged is None:
                state = runs.read_status(run_dir).get("state")
                raise ChatModelError(f"Run '{run_dir.name}' has no merged model yet (it is {state}). Pick one of "
                                     "its checkpoints, or wait until it finishes.")
            return load_model(str(merged))
        ckpt = run_files.checkpoint(run_dir, choice.step)
        if not (ckpt / run_files.CHECKPOINT_MARKER).exists():
            raise ChatModelError(f"Checkpoint {choice.step} of '{run_dir.name}' is missing or incomplete.")
        from peft import PeftModel

        base, tokenizer = load_model(RunConfig.load(run_dir / run_files.CONFIG).model)
        return PeftModel.from_pretrained(base, ckpt).merge_and_unload().eval(), tokenizer
    except ModelError as exc:
        raise ChatModelError(str(exc)) from None


_CACHES: "weakref.WeakSet[ModelCache]" = weakref.WeakSet()


def free_gpu_memory() -> None:
    """Collect dropped models and hand torch's cached CUDA blocks back, so another process can use them."""
    import gc
    import sys

    gc.collect()
    torch = sys.modules.get("torch")  # nothing to free in a process that never imported torch
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def release_models() -> int:
    """Every ModelCache in this process drops its models (see ModelCache.release)."""
    return sum(cache.release() for cache in list(_CACHES))


class ModelCache:
    """Loaded (model, tokenizer) pairs, least recently used first out; bounded so memory stays flat.

    One instance serves the whole app (Chat and RAG tabs), created by the app, not at import time.
    """

    def __init__(self, capacity: int = 2):
        self.capacity = capacity
        self._items: OrderedDict[str, tuple] = OrderedDict()
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self.loads = 0
        _CACHES.add(self)

    def release(self) -> int:
        """Drop every loaded model and give their GPU memory back (a training is about to need it).
        Returns how many were dropped; the next request loads again."""
        with self._lock:
            dropped = len(self._items)
            self._items.clear()
        free_gpu_memory()
        return dropped

    def get(self, choice: str):
        with self._lock:
            if choice in self._items:
                self._items.move_to_end(choice)
                return self._items[choice]
        # One load at a time: from_pretrained's meta-device initialisation is process-global and two
        # concurrent loads corrupt each other ("Cannot copy out of meta tensor"); it also avoids
        # loading the same model twice when two sessions ask for it together.
        with self._load_lock:
            # transformers resolves attributes lazily; two threads doing it at once can see a half-built
            # module ("cannot import name ..."), so resolve everything generation needs here, once.
            from transformers import (  # noqa: F401
                AutoModelForCausalLM, AutoTokenizer, StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer,
            )

            with self._lock:
                if choice in self._items:
                    self._items.move_to_end(choice)
                    return self._items[choice]
            item = _load_choice(choice)
            with self._lock:
                self.loads += 1
                self._items[choice] = item
                evicted = 0
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
                    evicted += 1
            if evicted:
                free_gpu_memory()  # an evicted model's CUDA memory goes back, not only to torch's cache
        return item

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._items)
