"""Sampling GRPO completions with a static key/value cache: buffers allocated once, one decoding step that
torch.compile can capture in a CUDA graph, sampling on the device. The same distribution as `generate`.

Why: for small models, `generate` spends most of each token launching hundreds of small kernels from Python
and waiting for the host (a stop check per token). Here the key/value buffers have a fixed shape, so the whole
forward of one token is one graph replay on a GPU, and the host looks at the tokens only every
`CHECK_EVERY` tokens (to stop early once every row has ended).

Same sampling: the logits go through transformers' own temperature / top-k / top-p / min-p processors, built
from the same resolved generation config `generate` would use, then softmax and `torch.multinomial` (or argmax
when greedy); finished rows get the pad token, as in `generate`. Anything else in the generation config
(repetition penalty, beams, stop strings, ...) makes `static_problem` say why, and the run samples eagerly.
torch and transformers are imported inside the functions.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from pipeline.models import engine

# The host checks whether every row has ended once per this many tokens (one sync, not one per token).
CHECK_EVERY = 16
# Cache lengths are rounded up to a multiple of this, so prompts of nearby lengths share one compiled step.
LENGTH_STEP = 64
# The logits processors the static path applies itself (transformers' classes, the order `generate` uses).
SAMPLING_PROCESSORS = ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper")
# What a user set to get each other processor, for the reason shown in the run header.
PROCESSOR_SETTINGS = {
    "RepetitionPenaltyLogitsProcessor": "repetition_penalty",
    "NoRepeatNGramLogitsProcessor": "no_repeat_ngram_size",
    "MinLengthLogitsProcessor": "min_length",
    "MinNewTokensLengthLogitsProcessor": "min_new_tokens",
    "SuppressTokensLogitsProcessor": "suppress_tokens",
    "SuppressTokensAtBeginLogitsProcessor": "begin_suppress_tokens",
    "NoBadWordsLogitsProcessor": "bad_words_ids",
    "TypicalLogitsWarper": "typical_p",
    "EpsilonLogitsWarper": "epsilon_cutoff",
    "EtaLogitsWarper": "eta_cutoff",
    "TopHLogitsWarper": "top_h",
}
ENGINES = ("auto", "static", "eager")


def round_up(n: int, step: int = LENGTH_STEP) -> int:
    """
    >>> [round_up(n) for n in (1, 64, 65, 200)]
    [64, 64, 128, 256]
    """
    return -(-n // step) * step


def choose_engine(setting: str, device: str, problem) -> tuple[str, str | None]:
    """("static" | "eager", the reason static isn't used or None). `problem` is a callable that returns why
    static can't run here (None = it can); it is asked only when static is wanted. auto = static on CUDA only,
    and eager elsewhere needs no reason: it is what was asked.

    >>> choose_engine("auto", "cpu", lambda: None)
    ('eager', None)
    >>> choose_engine("auto", "cuda", lambda: None)
    ('static', None)
    >>> choose_engine("auto", "cuda:0", lambda: "vLLM generates the completions")
    ('eager', 'vLLM generates the completions')
    >>> choose_engine("static", "cpu", lambda: None), choose_engine("eager", "cuda", lambda: None)
    (('static', None), ('eager', None))
    """
    if setting not in ENGINES:
        raise ValueError(f"generation_engine must be one of {', '.join(ENGINES)}, not {setting!r}")
    wanted = setting == "static" or (setting == "auto" and str(device).split(":")[0] == "cuda")
    if not wanted:
        return "eager", None
    reason = problem()
    return ("eager", reason) if reason else ("static", None)


def run_problem(*, fast_engine: bool, load_in_4bit: bool, use_vllm: bool, processes: int) -> str | None:
    """Why a run with these settings can't sample through the static path (None = it can, as far as the
    settings go; `static_problem` then asks the model). Gradient checkpointing is no obstacle: TRL turns it
    off while the model samples (`unwrap_model_for_generation`), so the key/value cache works then.

    >>> run_problem(fast_engine=True, load_in_4bit=False, use_vllm=False, processes=1)
    >>> run_problem(fast_engine=False, load_in_4bit=False, use_vllm=False, processes=1)
    'the fast engine is off'
    """
    if load_in_4bit:
        return "a 4-bit (QLoRA) base samples through TRL's own path"
    if not fast_engine:
        return "the fast engine is off"
    if processes > 1:
        return "more than one process"
    if use_vllm:
        return "vLLM generates the completions"
    return None


def model_problem(model) -> str | None:
    """Why this model can't decode with a static cache (None = it can)."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    lm = engine.causal_lm(model)
    if lm is None:
        return "not a causal LM"
    kind = getattr(lm.config, "model_type", "this")
    if getattr(lm.config, "is_encoder_decoder", False) or not getattr(lm, "_can_compile_fullgraph", False):
        return f"{kind} models have no static key/value cache support in transformers"
    attention = getattr(lm.config, "_attn_implementation", None)
    if attention not in (None, "sdpa", "eager"):
        return f"the {attention} attention implementation"
    layers = StaticCache(config=lm.config, max_cache_len=1).layers  # lazy: allocates nothing
    if any(type(layer) is not StaticLayer for layer in layers):
        return f"{kind} models have sliding-window or other attention layers the static path does not handle"
    return None


@dataclass
class Sampling:
    """What `generate` would do with a generation config, resolved for this model."""

    processors: object  # transformers' LogitsProcessorList
    do_sample: bool
    max_new_tokens: int
    eos: list[int]
    pad: int


def resolve_sampling(model, generation_config, prompt_width: int = 1,
                     device=None) -> tuple[Sampling | None, str | None]:
    """The sampling `generate` would do with this config on this model (its own resolution: the model's
    generation config fills what the passed one leaves unset), or the reason the static path can't do it."""
    lm = engine.causal_lm(model)
    if lm is None:
        return None, "not a causal LM"
    resolved, _ = lm._prepare_generation_config(generation_config)
    if (resolved.num_beams or 1) > 1 or (resolved.num_return_sequences or 1) > 1:
        return None, "beam search or several sequences per prompt"
    if resolved.stop_strings or resolved.max_time:
        return None, "stop strings or a time limit in the generation settings"
    if resolved.max_new_tokens is None:
        return None, "no max_new_tokens in the generation settings"
    if resolved.guidance_scale not in (None, 1) or resolved.sequence_bias is not None \
            or resolved.watermarking_config is not None or resolved.renormalize_logits:
        return None, "guidance, sequence bias, watermarking or renormalized logits in the generation settings"
    processors = lm._get_logits_processor(resolved, input_ids_seq_length=prompt_width, device=device or lm.device)
    others = [type(p).__name__ for p in processors if type(p).__name__ not in SAMPLING_PROCESSORS]
    if others:
        names = ", ".join(PROCESSOR_SETTINGS.get(n, n) for n in others)
        return None, f"sampling with {names}"
    eos = resolved.eos_token_id
    eos = [] if eos is None else [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
    pad = resolved.pad_token_id
    if pad is None:
        pad = eos[0] if eos else 0  # as generate does when the model has no pad token
    pad = int(pad[0] if isinstance(pad, (list, tuple)) else pad)
    return Sampling(processors, bool(resolved.do_sample), int(resolved.max_new_tokens), eos, pad), None


def static_problem(model, generation_config) -> str | None:
    """Why this model with this generation config can't sample through the static path (None = it can). The
    checks use transformers' cache and generation internals; where those differ (another transformers
    version), the reason says so and the run samples eagerly instead of failing."""
    try:
        return model_problem(model) or resolve_sampling(model, generation_config)[1]
    except Exception as exc:  # noqa: BLE001 - any failure here means: not static, and why
        return f"static decoding is unavailable here ({type(exc).__name__}: {str(exc)[:200]})"


def sampling_key(sampling: Sampling) -> tuple:
    """What a step that samples in its graph is built for: its processors' settings, greedy or not, the end and
    pad tokens. Another value of any of them (a temperature steered mid-run) builds another step."""
    settings = tuple((type(p).__name__, tuple(sorted((k, v) for k, v in vars(p).items()
                                                     if isinstance(v, (int, float, bool, str)))))
                     for p in sampling.processors)
    return settings, sampling.do_sample, tuple(sampling.eos), sampling.pad


def compile_on_gpu(step, device):
    """The decoding step as it runs: captured by torch.compile in CUDA graphs on a GPU (each token one graph
    replay); unchanged elsewhere (on the CPU the compile costs more than the launches it saves)."""
    import torch

    if str(device).split(":")[0] != "cuda":
        return step
    return torch.compile(step, mode="reduce-overhead", dynamic=False)


def unguarded():
    """The compiler's stance for the tokens after a call's first: the compiled step's guards are not evaluated.

    torch.compile checks, before each call of a compiled function, that what it was compiled for still holds
    (every weight, buffer and input it reads: several hundred checks for a small model, about 2 ms a call of the
    host's time, measured on a GPU machine and on a CPU). Within one `generate` call nothing they check can change
    between tokens: the same model, buffers and shapes, the weights changed only between calls. So the first
    token runs the checks (and recompiles if something did change) and the others skip them. When several
    compiled versions exist, the checks that tell them apart still run."""
    import torch

    try:  # a torch without these (older than 2.6) checks every token, as before
        return torch.compiler.set_stance(torch._dynamo.eval_frame._stance.stance, skip_guard_eval_unsafe=True)
    except (AttributeError, TypeError):
        return contextlib.nullcontext()


def race_sample(probs, uniform):
    """One token per row drawn from `probs` (rows x vocabulary) by an exponential race: the token with the smallest
    E_i / p_i, E_i = -log(U_i) independent Exp(1) draws, is token i with probability p_i, the distribution
    torch.multinomial draws from. Unlike multinomial it is a few elementwise operations and an argmax, so it can
    run inside a captured graph, with the uniform draws made there. A probability of 0 (a filtered token) never
    wins.

    >>> import torch
    >>> race_sample(torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]]), torch.tensor([[0.9, 0.2, 0.5], [0.1, 0.5, 0.99]]))
    tensor([1, 2])
    """
    import torch

    return (probs / -torch.log(uniform)).argmax(dim=-1)


class StaticDecoder:
    """Samples completions for a batch of prompts with buffers that outlive the call.

    Kept by the trainer for the whole run: the key/value cache (rows x cache length), the attention mask
    buffer and the compiled step are built on the first call and rebuilt only when the row count changes or a
    longer prompt needs a longer cache. The adapter is merged into weight copies that keep their addresses
    (`weight_copies`), so a captured graph reads the current weights after every optimizer step.
    """

    def __init__(self, compiler=compile_on_gpu, min_length: int = 0, sample_in_graph: bool = False) -> None:
        self.compiler = compiler  # (step, device) -> step as it runs
        self.min_length = min_length  # the longest prompt plus the completion budget, when known
        # Sampling (the logits processors, the draw, the end-of-row bookkeeping, the token's log-prob) inside the
        # compiled step, so a token is one graph replay and a few copies rather than a replay and some twenty
        # operations launched one by one. The same distribution; the draws come from the graph's own generator.
        self.sample_in_graph = sample_in_graph
        self.weight_copies: dict = {}  # engine.merged_adapter's persistent copies
        # From a call's second token on, the compiled step runs without re-checking its guards (see `generate`).
        self.skip_guards = True
        self._key = None
        self._cache = None
        self._mask = None
        self._step = None
        self.builds = 0  # how many times the buffers and the step were (re)built

    def _prepare(self, lm, rows: int, length: int, dtype, device, sampling: Sampling | None = None) -> None:
        """The cache, mask and step for `rows` rows and at least `length` positions (and, sampling in the graph,
        these sampling settings: a step is built for one temperature, top-k, top-p, min-p and set of end tokens)."""
        import torch
        from transformers import StaticCache

        capacity = round_up(max(length, self.min_length))
        drawn = sampling_key(sampling) if self.sample_in_graph else None
        if self._key is not None:
            built_for, rows_before, have = self._key[0], self._key[1], self._key[2]
            if self._key == (built_for, rows, have, dtype, device, drawn) and built_for is lm and have >= length:
                return  # the usual case: the same buffers and compiled step as the last call
            if rows_before == rows:
                capacity = max(capacity, have)  # never shrink: a shorter batch would recompile for nothing
        self._cache = self._step = self._mask = None  # let the old buffers go before the new ones are made
        cfg = lm.config.get_text_config(decoder=True)
        heads = cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        cache = StaticCache(config=lm.config, max_cache_len=capacity)
        cache.early_initialization(rows, kv_heads, head_dim, dtype, device)
        mask = torch.ones(rows, capacity, dtype=torch.long, device=device)
        torch._dynamo.mark_static_address(mask)  # refilled in place per call: a captured graph reads it there

        def step(embeds, positions, mask, cache):
            # One new token per row: the cache knows where it goes (its own counter), the mask hides left
            # padding, causality hides the positions not written yet. The token's embedding comes in from
            # outside: hooks on the embedding layer (gradient checkpointing adds one each time it is turned
            # back on) would otherwise be part of the graph's guards and force a recompile every step.
            out = lm(inputs_embeds=embeds, attention_mask=mask, position_ids=positions[:, None],
                     past_key_values=cache, use_cache=True, logits_to_keep=1)
            return out.logits[:, -1].to(dtype=torch.float32, copy=True)

        if self.sample_in_graph:
            processors, do_sample, pad = sampling.processors, sampling.do_sample, sampling.pad
            eos = torch.tensor(sampling.eos, device=device, dtype=torch.long) if sampling.eos else None

            def sample_step(embeds, positions, mask, cache, unfinished):
                # The step above, then what generate does with its logits, all in one graph. The processors
                # applied here (temperature, top-k, top-p, min-p) never read the ids, so none are passed.
                scores = processors(None, step(embeds, positions, mask, cache))
                if do_sample:
                    probs = torch.softmax(scores, dim=-1)
                    chosen = race_sample(probs, torch.rand_like(probs))
                else:
                    chosen = torch.argmax(scores, dim=-1)
                if eos is not None:
                    chosen = torch.where(unfinished, chosen, torch.full_like(chosen, pad))
                    unfinished = unfinished & ~torch.isin(chosen, eos)
                logprob = torch.log_softmax(scores, dim=-1).gather(-1, chosen[:, None]).squeeze(-1)
                return chosen, unfinished, logprob

        self._cache, self._mask = cache, mask
        self._step = self.compiler(sample_step if self.sample_in_graph else step, device)
        self._key = (lm, rows, capacity, dtype, device, drawn)
        self.builds += 1

    def generate(self, model, prompt_ids: list[list[int]], generation_config, with_logprobs: bool = False):
        """New tokens for left-padded prompts, shaped (rows, tokens), the pad token after a row's end (as
        `generate` pads). Stops early once every row has ended, checked every CHECK_EVERY tokens.
        `with_logprobs` also returns the log-probability of each chosen token under the distribution it was
        drawn from (after temperature and filtering), same shape."""
        import torch
        from transformers import DynamicCache

        lm = engine.causal_lm(model)
        backbone = getattr(lm, lm.base_model_prefix)
        device = lm.device
        width = max(len(p) for p in prompt_ids)
        sampling, problem = resolve_sampling(lm, generation_config, width, device)
        if problem:
            raise ValueError(f"The static generation path can't sample this: {problem}.")
        pad, rows, new = sampling.pad, len(prompt_ids), sampling.max_new_tokens
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompt_ids], device=device)
        prompt_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=device)

        # 1. Each distinct prompt, all but its last token, runs once (positions by generate's rule: the
        #    cumulative mask); its keys and values are then copied into the static rows that hold it.
        prefill = owner = None
        dtype = next(p.dtype for p in lm.parameters() if p.is_floating_point())
        if width > 1:
            pre_ids, pre_mask = ids[:, :-1], prompt_mask[:, :-1]
            unique, owner = torch.unique(torch.cat([pre_ids, pre_mask], dim=1), dim=0, return_inverse=True)
            first = torch.stack([(owner == u).nonzero()[0, 0] for u in range(unique.size(0))])
            positions = (pre_mask[first].cumsum(-1) - 1).masked_fill(pre_mask[first] == 0, 0)
            prefill = DynamicCache(config=lm.config)
            backbone(input_ids=pre_ids[first], attention_mask=pre_mask[first], position_ids=positions,
                     past_key_values=prefill, use_cache=True)
            dtype = prefill.layers[0].keys.dtype  # what the attention layers write (autocast included)
        self._prepare(lm, rows, width + new, dtype, device, sampling)
        cache = self._cache
        if prefill is not None:
            if len(prefill.layers) != len(cache.layers):
                raise ValueError("The prefill cache and the static cache disagree on the layer count.")
            for static, layer in zip(cache.layers, prefill.layers):
                static.keys[:, :, :width - 1].copy_(layer.keys[owner])
                static.values[:, :, :width - 1].copy_(layer.values[owner])
            del prefill
        for static in cache.layers:
            static.cumulative_length.fill_(width - 1)
        self._mask.fill_(1)
        self._mask[:, :width].copy_(prompt_mask)

        # 2. Token by token, from the last prompt token on: one step (a graph replay on a GPU), then sampling
        #    on the device. No host sync but the stop check every CHECK_EVERY tokens.
        tokens = ids[:, -1]  # only its embedding goes into the step: the same shape and strides every token
        positions = prompt_mask.sum(-1) - 1
        eos = torch.tensor(sampling.eos, device=device, dtype=torch.long)
        unfinished = torch.ones(rows, dtype=torch.bool, device=device)
        out = torch.full((rows, new), pad, dtype=torch.long, device=device)
        logprobs = torch.zeros((rows, new), dtype=torch.float32, device=device) if with_logprobs else None
        mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
        embed = lm.get_input_embeddings()
        done = 0
        with contextlib.ExitStack() as later_tokens:
            for t in range(new):
                if sampling.eos and t and t % CHECK_EVERY == 0 and not bool(unfinished.any()):
                    break
                if t == 1 and self.skip_guards:
                    later_tokens.enter_context(unguarded())  # the first token checked the guards
                if mark_step is not None:
                    mark_step()  # the previous step's outputs are consumed: the graph may overwrite them
                embeds = embed(tokens[:, None])
                if self.sample_in_graph:
                    chosen, still, chosen_lp = self._step(embeds, positions, self._mask, cache, unfinished)
                    # the graph's outputs are copied out at once: the next replay reuses them
                    unfinished.copy_(still)
                else:
                    scores = sampling.processors(ids, self._step(embeds, positions, self._mask, cache))
                    if sampling.do_sample:
                        chosen = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
                    else:
                        chosen = torch.argmax(scores, dim=-1)
                    if sampling.eos:
                        chosen = torch.where(unfinished, chosen, torch.full_like(chosen, pad))
                        unfinished &= ~torch.isin(chosen, eos)
                    chosen_lp = torch.log_softmax(scores, dim=-1).gather(-1, chosen[:, None]).squeeze(-1) \
                        if with_logprobs else None
                out[:, t] = chosen
                if with_logprobs:
                    logprobs[:, t] = chosen_lp
                tokens, positions = out[:, t], positions + 1  # the next token, read from `out` (this call's)
                done = t + 1
        return (out[:, :done], logprobs[:, :done]) if with_logprobs else out[:, :done]
