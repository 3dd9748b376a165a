"""How much GPU memory a GRPO + LoRA run needs, estimated from the model's config numbers and the run settings.

Pure Python (no torch): pre-flight uses it to say, before a model loads, whether a run fits the card and which
setting to change when it does not; bench/gpu_device_check.py prints it beside measured peaks.

A step has three phases that do not overlap in time, so the peak is the largest of them:
- generation: the frozen base, the LoRA state, the adapter merged into a copy of the weights (fast engine), the
  key/value cache of every completion row;
- scoring: the reference (adapter disabled) log-prob pass, without gradients;
- training: the forward pass that keeps its activations for the backward pass, the logits blocks of the
  log-prob computation, and (fp16 mixed precision) the fp16 copies of the weights that autocast keeps.
The LoRA weights, gradients and Adam moments stay for the whole run.

Checked against peaks measured on an H100 and an H200 (tests/unit/test_gpu_memory.py). The weights, LoRA state and
per-layer activation counts follow from what PyTorch keeps for the backward pass; the CUDA context, allocator slack,
runtime buffers and 4-bit (QLoRA) terms are assumptions until docs/gpu.md's size table is complete.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

GIB, MIB = 2 ** 30, 2 ** 20

# The linear layers of one decoder block of a Llama/Qwen2-style model, as PEFT names them.
LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# TRL's fused LM head (trl/kernels/chunked_logprob.py): tiles of up to 4096 positions x 32768 vocabulary entries.
TRL_HEAD_TOKENS, TRL_HEAD_VOCAB = 4096, 32768

# Uncertain until the size table is measured: a CUDA context with cuBLAS/cuDNN handles is 0.4-0.6 GiB on recent
# cards; the caching allocator reserves a few percent above what tensors hold (1.04-1.15x in the three H100 runs,
# small runs the most); cuBLAS workspaces and similar buffers come out of the allocator.
CUDA_CONTEXT = 512 * MIB
ALLOCATOR_SLACK_SHARE, ALLOCATOR_SLACK_FLOOR = 0.05, 64 * MIB
RUNTIME_BUFFERS = 64 * MIB
# NF4 with double quantisation: 4 bits a weight plus about 0.13 bits of block constants.
NF4_BYTES = 0.5 + 0.13 / 8


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer's config.json that memory depends on."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool = False  # Qwen2 has biases on the query, key and value projections
    head_dim: int = 0  # 0 = hidden / heads
    context: int = 0  # max_position_embeddings: the longest prompt + completion it was trained for (0: not stated)

    @classmethod
    def from_config(cls, config: dict) -> "ModelShape":
        """From a transformers config.json (a vision-language model's `text_config` when there is one).
        Raises ValueError when a number is missing."""
        config = config.get("text_config") or config
        try:
            heads = int(config["num_attention_heads"])
            return cls(hidden=int(config["hidden_size"]), layers=int(config["num_hidden_layers"]), heads=heads,
                       kv_heads=int(config.get("num_key_value_heads") or heads),
                       intermediate=int(config["intermediate_size"]), vocab=int(config["vocab_size"]),
                       tied=bool(config.get("tie_word_embeddings", False)),
                       qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
                       head_dim=int(config.get("head_dim") or 0),
                       context=int(config.get("max_position_embeddings") or 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"config.json lacks the numbers a memory estimate needs ({exc})") from None

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_size

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_size

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one block."""
        h, i = self.hidden, self.intermediate
        return {"q_proj": (h, self.q_dim), "k_proj": (h, self.kv_dim), "v_proj": (h, self.kv_dim),
                "o_proj": (self.q_dim, h), "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def linear_parameters(self, targets: tuple[str, ...] = LINEAR_NAMES) -> int:
        """Weights of the named linear layers over all blocks (no biases)."""
        return self.layers * sum(n_in * n_out for name, (n_in, n_out) in self.linear_shapes().items()
                                 if name in targets)

    def parameters(self) -> int:
        """All parameters, as the published model cards count them.

        >>> f"{KNOWN_SHAPES['HuggingFaceTB/SmolLM2-135M-Instruct'].parameters():,}"
        '134,515,008'
        >>> f"{KNOWN_SHAPES['Qwen/Qwen2.5-0.5B-Instruct'].parameters():,}"
        '494,032,768'
        >>> f"{KNOWN_SHAPES['Qwen/Qwen2.5-1.5B-Instruct'].parameters():,}"
        '1,543,714,304'
        >>> f"{KNOWN_SHAPES['Qwen/Qwen2.5-7B-Instruct'].parameters():,}"
        '7,615,616,512'
        """
        return self.linear_parameters() + self.other_parameters()

    def other_parameters(self) -> int:
        """Embeddings, the LM head when it is not tied to them, norms and biases: what 4-bit QLoRA leaves alone."""
        biases = self.layers * (self.q_dim + 2 * self.kv_dim) if self.qkv_bias else 0
        norms = self.layers * 2 * self.hidden + self.hidden
        return self.vocab * self.hidden * (1 if self.tied else 2) + biases + norms


def _shape(hidden, layers, heads, kv_heads, intermediate, vocab, tied, qkv_bias, context):
    return ModelShape(hidden, layers, heads, kv_heads, intermediate, vocab, tied, qkv_bias, context=context)


# Published configs (the models' config.json on the Hub), so catalog models are estimated offline too.
_SMOLLM2_135M = _shape(576, 30, 9, 3, 1536, 49152, True, False, 8192)
_QWEN25_05B = _shape(896, 24, 14, 2, 4864, 151936, True, True, 32768)
_QWEN25_15B = _shape(1536, 28, 12, 2, 8960, 151936, True, True, 32768)
_QWEN25_7B = _shape(3584, 28, 28, 4, 18944, 152064, False, True, 32768)
KNOWN_SHAPES: dict[str, ModelShape] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": _SMOLLM2_135M, "HuggingFaceTB/SmolLM2-135M": _SMOLLM2_135M,
    "Qwen/Qwen2.5-0.5B-Instruct": _QWEN25_05B, "Qwen/Qwen2.5-0.5B": _QWEN25_05B,
    "Qwen/Qwen2.5-1.5B-Instruct": _QWEN25_15B, "Qwen/Qwen2.5-1.5B": _QWEN25_15B,
    "Qwen/Qwen2.5-7B-Instruct": _QWEN25_7B, "Qwen/Qwen2.5-7B": _QWEN25_7B,
}


@dataclass(frozen=True)
class MemorySettings:
    """The run settings memory depends on (see `settings_from_config` for where each comes from)."""

    precision: str = "bf16"  # bf16 | fp16 (mixed: fp32 weights, fp16 autocast) | fp32
    lora_r: int = 8
    lora_targets: str = "all-linear"
    lora_dropout: float = 0.05
    load_in_4bit: bool = False
    num_generations: int = 4  # G
    batch_size: int = 16  # completions per device per step
    prompt_tokens: int = 512  # the longest prompt (a batch is padded to its longest)
    completion_tokens: int = 32
    gradient_checkpointing: bool = False
    fast_engine: bool = True
    beta: float = 0.04
    separate_reference: bool = False  # a full reference copy; with LoRA the reference is the adapter disabled
    num_iterations: int = 1
    vllm_bytes: int = 0  # what vLLM (colocate) reserves for itself, for the whole run
    static_generation: bool = False  # static decoding: its cache and merged copies stay allocated all run

    def targets(self) -> tuple[str, ...]:
        """The linear layers the LoRA adapts. PEFT's 'all-linear' is every linear layer but the LM head."""
        if self.lora_targets.strip() == "all-linear":
            return LINEAR_NAMES
        return tuple(t.strip() for t in self.lora_targets.split(",") if t.strip() in LINEAR_NAMES)


@dataclass
class MemoryEstimate:
    """The peak of a run's GPU memory: each phase's terms in bytes, the phase that peaks, and what the card needs."""

    phases: dict[str, dict[str, int]]
    peak_phase: str
    allocated: int  # the peak of torch.cuda.max_memory_allocated
    slack: int  # the caching allocator's reserve above that (max_memory_reserved - allocated)
    context: int  # the CUDA context, outside the allocator
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """What the card must have free for the trainer process."""
        return self.allocated + self.slack + self.context

    @property
    def reserved(self) -> int:
        """The expected torch.cuda.max_memory_reserved."""
        return self.allocated + self.slack

    def breakdown(self) -> dict[str, int]:
        """The peak phase's terms, then the process-wide ones."""
        return {**self.phases[self.peak_phase], "CUDA context and allocator slack": self.context + self.slack}

    def summary(self, top: int = 4) -> str:
        """The largest terms in words, e.g. 'weights 14.2 GiB, activations 9.1 GiB, ...'."""
        terms = sorted(self.breakdown().items(), key=lambda kv: -kv[1])[:top]
        return ", ".join(f"{name} {gib(value)}" for name, value in terms if value >= 0.05 * GIB)

    def table(self) -> str:
        lines = [f"estimated peak: {gib(self.total)} on the card ({gib(self.allocated)} allocated by tensors, "
                 f"while {self.peak_phase})"]
        for name, value in self.breakdown().items():
            lines.append(f"  {name:<40} {value / GIB:8.2f} GiB")
        for phase, terms in self.phases.items():
            if phase != self.peak_phase:
                lines.append(f"  (peak while {phase}: {sum(terms.values()) / GIB:.2f} GiB allocated)")
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


def gib(value: float) -> str:
    """
    >>> gib(6.12 * GIB), gib(0.6 * GIB)
    ('6.1 GiB', '0.60 GiB')
    """
    value = value / GIB
    return f"{value:.2f} GiB" if value < 1 else f"{value:.1f} GiB"


def estimate(shape: ModelShape, s: MemorySettings) -> MemoryEstimate:
    """The run's peak GPU memory, each term a small formula (bytes)."""
    h, i, L, V = shape.hidden, shape.intermediate, shape.layers, shape.vocab
    G, B, P, C = max(s.num_generations, 1), max(s.batch_size, 1), s.prompt_tokens, s.completion_tokens
    U = max(B // G, 1)  # distinct prompts a step
    targets = s.targets()
    quantized = s.load_in_4bit
    precision = "bf16" if quantized else s.precision  # QLoRA computes in bf16
    act = 4 if precision == "fp32" else 2  # bytes of an activation: autocast's dtype, or fp32 without it
    weight_bytes = {"bf16": 2, "fp16": 4, "fp32": 4}[precision]  # fp16 is mixed: the weights stay fp32
    lora_bytes = 2 if quantized else 4  # PEFT keeps LoRA in fp32; TRL casts it to bf16 under QLoRA
    # The fast engine's merged sampling (pipeline/training/grpo_trainer.py, pipeline/models/engine.py) needs a LoRA it
    # can fold into full-precision weights and no vLLM. On a GPU the log-prob passes are TRL's own in every case
    # (engine.logps_pass): one forward of every row and its fused LM head in tiles.
    fast_sampling = s.fast_engine and not quantized and not s.vllm_bytes
    notes = []

    # Resident for the whole run.
    if quantized:  # linear layers in NF4, the rest (embeddings, head, norms) in bf16
        weights = int(shape.linear_parameters() * NF4_BYTES) + shape.other_parameters() * 2
    else:
        weights = shape.parameters() * weight_bytes
    lora_params = L * s.lora_r * sum(n_in + n_out for name, (n_in, n_out) in shape.linear_shapes().items()
                                     if name in targets)
    # weights + gradients + Adam's two moments, all in the LoRA's dtype
    lora_state = lora_params * lora_bytes * 4
    reference = weights if s.separate_reference and s.beta > 0 else 0
    resident = {"weights": weights + reference, "LoRA + optimizer state": lora_state,
                "runtime buffers (cuBLAS workspaces)": RUNTIME_BUFFERS}
    if s.vllm_bytes:
        resident["vLLM's reserved share"] = s.vllm_bytes
    if reference:
        notes.append("the reference model is a full copy of the weights (counted in 'weights')")

    # Generation: one row per completion, each holding keys and values for its prompt and completion.
    kv_bytes = {"bf16": 2, "fp16": 3, "fp32": 4}[precision]  # fp16 mixed: fp32 keys after RoPE, fp16 values
    merged_copy = shape.linear_parameters(targets) * weight_bytes if fast_sampling else 0
    static = s.static_generation and fast_sampling  # as static_decode.run_problem
    if static:
        # Static decoding (pipeline/models/static_decode.py) keeps its key/value buffers, sized for the longest prompt
        # plus the completions and rounded up, and the merged copies (at fixed addresses) for the whole run.
        from pipeline.models.static_decode import round_up

        resident["static decoding: key/value buffers"] = B * round_up(P + C) * L * 2 * shape.kv_dim * kv_bytes
        resident["static decoding: merged copy of the adapted weights"] = merged_copy
    generation = dict(resident)
    if not s.vllm_bytes and not static:
        generation["generation KV cache"] = B * (P + C) * L * 2 * shape.kv_dim * kv_bytes
        # the adapter is merged into a copy of the adapted weights while sampling (engine.merged_adapter)
        generation["merged copy of the adapted weights"] = merged_copy
    if not s.vllm_bytes:
        prefill_tokens = U * P if fast_sampling else B * P  # the fast engine pre-fills each prompt once
        generation["generation working memory"] = (prefill_tokens * (3 * i + 4 * h) * act  # one block at a time
                                                   + B * V * 4 * 3)  # a decoding step's fp32 logits and softmax

    # Scoring: the reference (adapter off) and, with several iterations, the old policy's log-probs; no gradients.
    scoring = {}
    if s.beta > 0 or s.num_iterations > 1:
        scoring = dict(resident)
        # TRL: the whole batch in one forward, its fused LM head in tiles
        scoring["scoring pass (no gradients)"] = (B * (P + C) * (3 * i + 4 * h) * act
                                                  + min(B * C, TRL_HEAD_TOKENS) * TRL_HEAD_VOCAB * act)

    # Training: what one decoder block keeps for the backward pass, per token. Frozen linear layers keep nothing
    # (their input is only needed for a weight gradient); the LoRA branch keeps its input and dropout mask.
    lora_inputs = sum(n_in for name, (n_in, _) in shape.linear_shapes().items() if name in targets)
    per_token_block = (2 * 4 * h  # the two RMSNorms keep their input in fp32
                       + 4 * shape.q_dim * act  # attention keeps queries, keys and values (repeated to every
                       # query head when there is padding) and its output
                       + lora_inputs * (act + (1 if s.lora_dropout > 0 else 0))  # LoRA input + dropout mask
                       + 3 * i * act)  # SwiGLU keeps the gate, its activation and the up projection
    tokens = B * (P + C)  # TRL: every row runs prompt + completion
    if s.gradient_checkpointing:  # only each block's input is kept; one block is recomputed during backward
        activations = tokens * L * h * act + tokens * per_token_block
    else:
        activations = tokens * L * per_token_block
    activations += tokens * h * 4 * 2  # fp32 gradients of the residual stream during backward
    training = dict(resident)
    training["activations (forward/backward)"] = activations
    # TRL's fused head (trl/kernels/chunked_logprob.py): the scored hidden states, one tile of logits at a time (the
    # forward's buffer is gone before the backward allocates its own), and in backward their fp32 gradients
    n = B * C
    training["logits / log-softmax blocks"] = (n * h * act + min(n, TRL_HEAD_TOKENS) * TRL_HEAD_VOCAB * act
                                               + n * h * 4)
    if precision == "fp16" and not s.gradient_checkpointing:
        # autocast casts the frozen fp32 weights to fp16 at every call and the matmul keeps the copy for backward
        training["fp16 copies of the weights (autocast)"] = shape.linear_parameters() * 2

    phases = {"generating": generation, "training": training}
    if scoring:
        phases["scoring the reference"] = scoring
    peak_phase = max(phases, key=lambda p: sum(phases[p].values()))
    allocated = sum(phases[peak_phase].values())
    slack = max(int(allocated * ALLOCATOR_SLACK_SHARE), ALLOCATOR_SLACK_FLOOR)
    return MemoryEstimate(phases, peak_phase, allocated, slack, CUDA_CONTEXT, notes)


def settings_from_config(cfg, precision: str, prompt_tokens: int | None = None, card_total: int = 0) -> MemorySettings:
    """MemorySettings of a RunConfig trained in `precision` (as resolved for the machine: bf16, fp16 or fp32).
    `prompt_tokens` is the longest prompt when known, else the prompt budget."""
    return MemorySettings(
        precision=precision, lora_r=cfg.lora_r, lora_targets=cfg.lora_target_modules, lora_dropout=cfg.lora_dropout,
        load_in_4bit=cfg.load_in_4bit, num_generations=cfg.num_generations, batch_size=cfg.batch_size,
        prompt_tokens=prompt_tokens or cfg.max_prompt_tokens, completion_tokens=cfg.max_completion_length,
        gradient_checkpointing=cfg.gradient_checkpointing, fast_engine=cfg.fast_engine, beta=cfg.beta,
        num_iterations=cfg.num_iterations,
        vllm_bytes=int(cfg.vllm_gpu_memory_utilization * card_total) if cfg.use_vllm else 0,
        static_generation=static_generation(cfg))


def static_generation(cfg) -> bool:
    """Whether a run with these settings decodes statically on a GPU (as far as the settings tell; a model the
    static path can't handle samples eagerly, and then needs less than estimated)."""
    from pipeline.models.static_decode import run_problem

    return cfg.generation_engine != "eager" and run_problem(
        fast_engine=cfg.fast_engine, load_in_4bit=cfg.load_in_4bit, use_vllm=cfg.use_vllm, processes=1) is None


# ---- what to change when it does not fit ---------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    label: str  # in the Train form's words, e.g. "turn on Gradient checkpointing"
    settings: MemorySettings
    total: int  # the estimate with this change alone
    saving: int


def suggestions(shape: ModelShape, s: MemorySettings, bf16_ok: bool = True) -> list[Suggestion]:
    """Single setting changes that lower the estimate, the largest saving first. `bf16_ok`: the card does bf16
    natively (compute capability 8.0+), which QLoRA and bf16 need."""
    base = estimate(shape, s).total
    G, B, C = s.num_generations, s.batch_size, s.completion_tokens
    changes: list[tuple[str, dict]] = []
    if not s.gradient_checkpointing:
        changes.append(("turn on Gradient checkpointing", {"gradient_checkpointing": True}))
    if not s.load_in_4bit and bf16_ok and not s.vllm_bytes:
        changes.append(("QLoRA: 4-bit base" + ("" if s.precision == "bf16" else " (needs Precision bf16)"),
                        {"load_in_4bit": True, "precision": "bf16"}))
    if s.precision in ("fp16", "fp32") and bf16_ok and not s.load_in_4bit:
        changes.append(("Precision bf16", {"precision": "bf16"}))
    if G > 4:  # the same prompts a step, fewer completions each
        changes.append((f"Group size G=4 (batch {B * 4 // G})", {"num_generations": 4, "batch_size": B * 4 // G}))
    if B // 2 >= G and (B // 2) % G == 0:
        changes.append((f"Batch {B // 2} ({B // 2 // G} prompt(s) a step)", {"batch_size": B // 2}))
    if C >= 64:
        changes.append((f"shorter completions (Max completion tokens {C // 2})", {"completion_tokens": C // 2}))
    if s.static_generation and s.fast_engine and not s.load_in_4bit and not s.vllm_bytes:
        changes.append(("Generation engine: eager", {"static_generation": False}))
    if s.fast_engine and not s.load_in_4bit:  # its merged sampling copy
        changes.append(("turn off Fast engine", {"fast_engine": False}))
    out = []
    for label, change in changes:
        changed = dataclasses.replace(s, **change)
        total = estimate(shape, changed).total
        if base - total > 0.01 * base:
            out.append(Suggestion(label, changed, total, base - total))
    return sorted(out, key=lambda sug: -sug.saving)


def combined(shape: ModelShape, s: MemorySettings, picks: list[Suggestion], available: int) -> tuple[list[str], int]:
    """Apply the suggestions one after another, largest saving first, until the estimate fits `available`:
    the labels taken and the estimate then. (Their savings overlap, so the total is estimated afresh.)"""
    taken, current = [], s
    total = estimate(shape, current).total
    for sug in picks:
        if total <= available:
            break
        change = {f.name: getattr(sug.settings, f.name) for f in dataclasses.fields(s)
                  if getattr(sug.settings, f.name) != getattr(s, f.name)}
        if "batch_size" in change and "num_generations" not in change and current.num_generations != s.num_generations:
            continue  # G=4 already scaled the batch
        current = dataclasses.replace(current, **change)
        new_total = estimate(shape, current).total
        if new_total < total:
            taken.append(sug.label)
            total = new_total
    return taken, total


def fit_verdict(shape: ModelShape, s: MemorySettings, free: int, total_card: int,
                bf16_ok: bool = True) -> tuple[bool, str]:
    """Whether the run fits `free` bytes of a card of `total_card` bytes, in words, with what to change when not."""
    est = estimate(shape, s)
    card = f"{gib(free)} free of {gib(total_card)}" if free < 0.97 * total_card else f"{gib(total_card)}"
    if est.total <= free:
        share = est.total / max(free, 1)
        close = " Close to the limit: longer prompts than the longest seen so far could run out." if share > 0.9 else ""
        return True, f"About {gib(est.total)} of GPU memory at the peak ({est.summary(3)}), of {card}.{close}"
    picks = suggestions(shape, s, bf16_ok)
    text = (f"This run needs about {gib(est.total)} of GPU memory at the peak ({est.summary()}), more than this "
            f"GPU's {card}: it would run out of memory.")
    if not picks:
        return False, text + " Choose a smaller model."
    fits = [p for p in picks if p.total <= free]
    text += " To fit, change " + ("one of: " if fits else "these (savings of each alone): ") + "; ".join(
        f"{p.label} (saves ~{gib(p.saving)}{', fits' if p.total <= free else ''})" for p in picks) + "."
    if not fits:
        taken, after = combined(shape, s, picks, free)
        if after <= free:
            text += f" Together, {' + '.join(taken)}: about {gib(after)}."
        else:
            text += f" Even all of them leave about {gib(after)}: choose a smaller model."
    return False, text


# ---- reading a model's config.json and the card -------------------------------------------------


def model_shape(model_id: str) -> tuple[ModelShape | None, str]:
    """The shape of a model from its config.json, without loading weights: a local folder, the bundled model,
    the Hub cache, the shapes of catalog models known here, or (online) a download of config.json alone.
    (None, why) when none of them has it."""
    from pipeline.models.loading import BUNDLED_LABEL
    from pipeline.run_folder.paths import BUNDLED_MODEL_ID

    model_id = (model_id or "").strip()
    config_path = None
    path = Path(model_id).expanduser()
    if model_id in (BUNDLED_MODEL_ID, BUNDLED_LABEL):
        return _SMOLLM2_135M, "the bundled model"
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.exists():
            return None, f"the folder {model_id} has no config.json"
    elif model_id.startswith((".", "/", "~")):
        return None, f"no model folder at {model_id}"
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model_id, "config.json")
            config_path = Path(cached) if isinstance(cached, str) else None
        except Exception:  # noqa: BLE001 - not a valid repo id, no cache
            config_path = None
        if config_path is None and model_id in KNOWN_SHAPES:
            return KNOWN_SHAPES[model_id], "its published config"
        if config_path is None:
            try:
                from huggingface_hub import hf_hub_download

                from pipeline.models.hub import hub_reachable

                if not hub_reachable():
                    return None, "its config.json is not cached and the Hub can't be reached"
                config_path = Path(hf_hub_download(model_id, "config.json"))
            except Exception as exc:  # noqa: BLE001 - unknown repo, gated, network drop
                return None, f"could not fetch its config.json ({exc})"
    try:
        return ModelShape.from_config(json.loads(config_path.read_text(encoding="utf-8"))), str(config_path)
    except (OSError, ValueError) as exc:
        return None, f"could not read {config_path} ({exc})"


def card_memory() -> tuple[int, int, bool]:
    """(free, total, bf16) of the current CUDA device: free bytes plus what this process's torch holds in its cache
    (the app hands its chat models' memory back before a training starts), total bytes, and whether the card does
    bf16 natively (compute capability 8.0+, as pipeline.models.loading.choose_precision). Needs torch and a CUDA
    device."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return free + torch.cuda.memory_reserved(), total, tuple(torch.cuda.get_device_capability()) >= (8, 0)
