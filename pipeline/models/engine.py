"""Speed-ups for GRPO steps on one process, plugged into TRL's GRPOTrainer through subclass hooks.

Same algorithm, less work:
- Shared prompts. A GRPO batch holds each prompt G times. TRL runs the whole prompt + completion
  for every row (and, off Triton devices, projects every prompt position through the LM head).
  Here each distinct prompt runs once, its key/value cache is repeated for its G rows, and only
  the completion runs per row; only completion positions go through the LM head. Log-probs and
  entropies equal TRL's up to float rounding, gradients included (tests/integration/test_engine.py).
  That saves arithmetic, which is what a CPU step costs; on a GPU, where launches cost, TRL's own pass runs
  (`logps_pass`).
- Merged generation. Sampling from a PEFT model runs the LoRA branch beside every linear layer;
  folding the adapter into the weights for the duration of `generate` removes that cost. The
  base weights are restored exactly right after (below fp32 the merge goes into copies: see
  `merged_adapter`). The G copies of a prompt are also pre-filled once, not G times.

Both need a single process (under DDP the module must be called through its wrapper so gradients
are synchronised) and a plain causal LM; anything else falls back to TRL's own code path.
torch is imported by the caller; this module touches tensors only inside functions.
"""

from __future__ import annotations

import contextlib
import os

# Rows of (completion positions) scored through the LM head at once: bounds the (rows, vocab) block.
LM_HEAD_CHUNK = 1024


def single_process() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) == 1


def causal_lm(model):
    """The transformers causal LM inside a PEFT/accelerate wrapper, or None when there is none."""
    inner = model.module if hasattr(model, "module") and not hasattr(model, "get_base_model") else model
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    return inner if hasattr(inner, "get_output_embeddings") else None


def logps_pass(device_type: str) -> str:
    """Whose log-prob pass a step runs on a device: "shared" (this module's: each distinct prompt once, then its G
    completions, the least arithmetic, which is what a CPU step costs) or "trl" (TRL's: every row in one forward
    and its fused Triton LM head, which keeps no vocabulary-sized block for the backward pass; on a GPU a step is
    bound by kernel launches, and two forwards per distinct prompt would only add launches).

    >>> logps_pass("cpu"), logps_pass("cuda")
    ('shared', 'trl')
    """
    return "shared" if device_type == "cpu" else "trl"


def attention_kernels(device_type: str) -> str | None:
    """On a GPU, attention runs without cuDNN's kernels (PyTorch then picks its flash or memory-efficient ones);
    returns a line for the log, or None elsewhere. cuDNN builds an execution plan for every new sequence length
    it meets, and a GRPO step meets new lengths in each of its passes (prompts and completions differ from step to
    step). In a step profiled on a GPU, cuDNN's attention calls were half of a log-prob pass's host time, and the
    pass's kernels a fifteenth of its wall time. The other kernels need no plan and compute the same attention."""
    if device_type != "cuda":
        return None
    import torch

    torch.backends.cuda.enable_cudnn_sdp(False)
    return "Attention: PyTorch's flash or memory-efficient kernels (cuDNN's are off: a plan for each new length)"


def fast_path_problem(model, extra_inputs: dict, compute_aux_loss: bool) -> str | None:
    """Why the shared-prompt path can't run for this call (None = it can)."""
    if not single_process():
        return "more than one process"
    if any(v is not None for v in extra_inputs.values()):
        return "multimodal inputs"
    if compute_aux_loss:
        return "MoE auxiliary loss"
    lm = causal_lm(model)
    if lm is None:
        return "not a causal LM"
    cfg = lm.config.get_text_config()
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None) not in (None, 1.0) \
            or getattr(cfg, "output_multiplier", None) or getattr(cfg, "lm_head_multiplier", None) \
            or getattr(cfg, "logits_scaling", None):
        return "the model scales its logits"
    checkpointing = getattr(lm, "is_activation_checkpointing", None)  # transformers 5 name
    if checkpointing is None:
        checkpointing = getattr(lm, "is_gradient_checkpointing", False)
    if checkpointing and lm.training:
        return "gradient checkpointing is on (it disables the key/value cache)"
    return None


def _token_scores(logits, targets, temperature: float, want_entropy: bool):
    """Log-prob of each target token under softmax(logits / temperature), and the entropy of that
    distribution (None unless asked), for logits shaped (tokens, vocab)."""
    import torch

    log_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logps = log_all.gather(-1, targets[:, None]).squeeze(-1)
    return logps, (-(log_all.exp() * log_all).sum(-1) if want_entropy else None)


def _completion_scores(hidden, lm_head, targets, valid, temperature: float, want_entropy: bool):
    """Log-prob of each target token (and the entropy of its distribution) at the valid positions only."""
    import torch

    logps = hidden.new_zeros(targets.shape)
    entropy = hidden.new_zeros(targets.shape) if want_entropy else None
    rows = valid.nonzero(as_tuple=False)
    picked_hidden = hidden[valid]
    picked_targets = targets[valid]
    lp_parts, ent_parts = [], []
    for start in range(0, picked_hidden.size(0), LM_HEAD_CHUNK):
        lp, ent = _token_scores(lm_head(picked_hidden[start:start + LM_HEAD_CHUNK]),
                                picked_targets[start:start + LM_HEAD_CHUNK], temperature, want_entropy)
        lp_parts.append(lp)
        ent_parts.append(ent)
    if rows.numel():
        logps = logps.index_put((rows[:, 0], rows[:, 1]), torch.cat(lp_parts).to(logps.dtype))
        if want_entropy:
            entropy = entropy.index_put((rows[:, 0], rows[:, 1]), torch.cat(ent_parts).to(entropy.dtype))
    return logps, entropy


def shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep: int, temperature: float,
                        compute_entropy: bool):
    """Per-token log-probs (and entropies) of the last `logits_to_keep` tokens, each distinct prompt run once.

    Returns tensors shaped (rows, logits_to_keep), zero where the attention mask is 0, as TRL's fused
    LM head does.
    """
    import torch

    lm = causal_lm(model)
    backbone = getattr(lm, lm.base_model_prefix)
    lm_head = lm.get_output_embeddings()
    n_rows, total = input_ids.shape
    # The prefix stops one token short of the completion: the last prompt token's output predicts the
    # first completion token, so it runs with the completion.
    split = total - logits_to_keep - 1
    prefix_ids, prefix_mask = input_ids[:, :split], attention_mask[:, :split]
    keys = torch.cat([prefix_ids, prefix_mask], dim=1)
    unique, owner = torch.unique(keys, dim=0, return_inverse=True)

    order, lp_parts, ent_parts = [], [], []
    for u in range(unique.size(0)):
        rows = (owner == u).nonzero(as_tuple=True)[0]
        first = rows[:1]
        cache = None
        if split > 0:
            prefix = backbone(input_ids=prefix_ids[first], attention_mask=prefix_mask[first], use_cache=True)
            cache = prefix.past_key_values
            cache.batch_repeat_interleave(rows.numel())
        rest = backbone(input_ids=input_ids[rows, split:], attention_mask=attention_mask[rows],
                        past_key_values=cache, use_cache=cache is not None)
        hidden = rest.last_hidden_state[:, :-1]  # the output at position t predicts token t + 1
        targets = input_ids[rows, split + 1:]
        valid = attention_mask[rows, split + 1:].bool()
        lp, ent = _completion_scores(hidden, lm_head, targets, valid, temperature, compute_entropy)
        order.append(rows)
        lp_parts.append(lp)
        ent_parts.append(ent)
    back = torch.argsort(torch.cat(order))  # rows come back in the caller's order
    logps = torch.cat(lp_parts)[back]
    entropy = torch.cat(ent_parts)[back] if compute_entropy else None
    return logps, entropy


def plain_head_logps(model, input_ids, attention_mask, logits_to_keep: int, temperature: float,
                     compute_entropy: bool, batch_size: int):
    """Per-token log-probs (and entropies) of the last `logits_to_keep` tokens, through the model as it is wrapped
    (DDP, PEFT) and its own LM head, `batch_size` rows a forward. TRL scores with a chunked LM head instead; where
    it has no Triton kernel (the CPU) that head runs as torch code several times slower than the plain one, for
    the same numbers. Returns tensors shaped (rows, logits_to_keep), zero where the attention mask is 0.
    """
    import torch

    lp_rows, ent_rows = [], []
    for start in range(0, input_ids.size(0), batch_size):
        ids, mask = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
        # The output at position t predicts token t + 1: one more position than the completion.
        logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1, use_cache=False).logits
        targets, valid = ids[:, -logits_to_keep:], mask[:, -logits_to_keep:].bool()
        for row in range(ids.size(0)):  # one row's log-softmax at a time keeps the peak to one (tokens, vocab) copy
            lp, ent = _token_scores(logits[row, :-1], targets[row], temperature, compute_entropy)
            lp_rows.append(lp.masked_fill(~valid[row], 0.0))
            if compute_entropy:
                ent_rows.append(ent.masked_fill(~valid[row], 0.0))
    return torch.stack(lp_rows), torch.stack(ent_rows) if compute_entropy else None


def generate_shared_prefill(model, prompt_ids: list[list[int]], pad_token_id: int, generation_config):
    """`model.generate` for left-padded prompts in which each distinct prompt is pre-filled once.

    The key/value cache of every distinct prompt (all but its last token) is computed once, gathered
    to the rows that share it, and handed to `generate`, which then only runs the last prompt token and
    the new ones. Position ids follow `generate`'s own rule (cumulative attention mask), so the result
    equals a plain `generate` call. Returns the new tokens, shaped (rows, new tokens).
    """
    import torch
    from transformers import DynamicCache

    width = max(len(p) for p in prompt_ids)
    ids = torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in prompt_ids], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=model.device)
    unique, owner = torch.unique(torch.cat([ids, mask], dim=1), dim=0, return_inverse=True)
    kwargs = {"input_ids": ids, "attention_mask": mask, "generation_config": generation_config}
    if width > 1 and unique.size(0) < ids.size(0):
        first = torch.stack([(owner == u).nonzero()[0, 0] for u in range(unique.size(0))])
        pre_ids, pre_mask = ids[first, :-1], mask[first, :-1]
        positions = (pre_mask.cumsum(-1) - 1).masked_fill(pre_mask == 0, 0)
        lm = causal_lm(model)
        cache = DynamicCache(config=lm.config)
        getattr(lm, lm.base_model_prefix)(input_ids=pre_ids, attention_mask=pre_mask, position_ids=positions,
                                          past_key_values=cache, use_cache=True)
        cache.batch_select_indices(owner)
        kwargs["past_key_values"] = cache
    return model.generate(**kwargs)[:, width:]


def cut_at_eos(tokens: list[int], eos_ids) -> list[int]:
    """Tokens up to and including the first end-of-sequence token, as TRL keeps them.

    >>> cut_at_eos([5, 6, 2, 0, 0], [2])
    [5, 6, 2]
    >>> cut_at_eos([5, 6], [2])
    [5, 6]
    """
    for i, t in enumerate(tokens):
        if t in eos_ids:
            return tokens[: i + 1]
    return tokens


def decoding_threads(cores: int) -> int:
    """CPU threads for token-by-token decoding, out of a process's `cores` threads: half, at least one.

    Each decoding step is hundreds of small operations, each split across the thread team and ended by a
    barrier. When anything else wants a core (the browser drawing the charts, the app serving the page),
    the thread that loses its core holds the whole team at every barrier until the scheduler gives it back:
    on 2 cores, greedy probes took 36-46 s with 2 threads and 6 s with 1 beside other work (about 4 s with 2
    on a quiet machine). Training's large matrix products keep every core (set_up_runtime).

    >>> [decoding_threads(n) for n in (1, 2, 4, 16)]
    [1, 1, 2, 8]
    """
    return max(1, cores // 2)


@contextlib.contextmanager
def cpu_decoding(device) -> object:
    """Fewer CPU threads for the duration of the block when decoding on the CPU (see decoding_threads); the
    process's setting comes back after. A no-op on a GPU."""
    import torch

    if str(device).split(":")[0] != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(min(before, decoding_threads(before)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _adapted_base_params(peft) -> list:
    """The parameters of the base layers that carry an adapter (the ones a merge writes into)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [p for m in peft.modules() if isinstance(m, BaseTunerLayer)
            for p in m.get_base_layer().parameters(recurse=False)]


@contextlib.contextmanager
def merged_adapter(model, copies: dict | None = None):
    """Fold a PEFT adapter into the base weights for the duration of the block (no-op otherwise).

    The base weights come back bit for bit, in every dtype. PEFT merges in place (`w += delta`, later
    `w -= delta`), and that round trip rounds: in bf16 100 cycles changed 15% of the bundled model's entries
    (tests/unit/test_merge_drift.py), and even in fp32 the GPU check saw 10% of the entries move by up to 2.6e-8 over
    10 steps (bench/results/gpu-device-check-2026-11-24.txt). Drift moves the KL reference (the adapter disabled) and
    ends up in merged/. So the merge goes into copies and the original tensors are put back; that costs one
    copy of the adapted weights while sampling (about 0.4 GB for the bundled model in fp32).
    A quantized (4-bit) base is never merged into: the LoRA branch runs.

    `copies` (a dict the caller keeps between calls) makes the copies persistent: the same tensors are refilled
    from the originals each time, so their addresses never change. A decoding step captured in a CUDA graph
    reads the weights at those addresses (pipeline/models/static_decode.py); fresh copies would leave it reading freed
    memory, or force a new capture every step.
    """
    peft = model.module if hasattr(model, "module") and not hasattr(model, "merge_adapter") else model
    if not (hasattr(peft, "merge_adapter") and single_process()):
        yield
        return

    params = _adapted_base_params(peft)
    if any(not p.is_floating_point() for p in params):
        yield
        return
    # Merge into copies and keep the originals aside (references, no copy).
    originals = [(p, p.data) for p in params]
    for p, data in originals:
        p.data = data.clone() if copies is None else _persistent_copy(copies, p, data)
    peft.merge_adapter()
    try:
        yield
    finally:
        peft.unmerge_adapter()  # PEFT's bookkeeping says unmerged; in the copies, the rounding is discarded
        for p, data in originals:
            p.data = data


def _persistent_copy(copies: dict, param, data):
    """`data` copied into the buffer kept for `param` in `copies` (made on first use, or when the shape, dtype
    or device changed)."""
    kept = copies.get(id(param))
    if kept is None or kept[0] is not param or kept[1].shape != data.shape or kept[1].dtype != data.dtype \
            or kept[1].device != data.device:
        kept = (param, data.clone())
        copies[id(param)] = kept
    else:
        kept[1].copy_(data)
    return kept[1]
