"""The fast engine computes what TRL computes: same per-token log-probs, entropies and LoRA gradients
as TRL's fused-LM-head forward, and merged-adapter generation equals unmerged generation."""

import pytest
import torch

pytestmark = pytest.mark.slow


def bundled_with_lora(bundled_model_dir, prepare=None):
    """The bundled model with a trained-looking LoRA (B drawn, not zero: a zero B would hide a dropped branch)
    and its tokenizer; `prepare(base)` runs on the base model before the adapter goes on."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from pipeline.models.loading import load_tokenizer

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(bundled_model_dir, dtype=torch.float32)
    if prepare is not None:
        prepare(base)
    model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=16, lora_dropout=0.0,
                                            target_modules="all-linear"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    return model, load_tokenizer(bundled_model_dir)


@pytest.fixture(scope="module")
def lora_model(bundled_model_dir):
    from trl.trainer.utils import add_fused_lm_head

    return bundled_with_lora(bundled_model_dir,  # as GRPOTrainer does
                             lambda base: add_fused_lm_head(base, temperature=0.9, outputs=("log_probs", "entropy")))


def _batch(tokenizer, g=3, completion=7):
    """Two prompts of different lengths (left-padded), each G times, completions right-padded after EOS."""
    prompts = ["Summarize: the council voted for bike lanes on Harper Street.", "Hi"]
    ids = [tokenizer(p)["input_ids"] for p in prompts]
    width = max(map(len, ids))
    gen = torch.Generator().manual_seed(1)
    rows, masks = [], []
    for p in ids:
        for k in range(g):
            comp = torch.randint(100, 5000, (completion,), generator=gen).tolist()
            keep = completion - k  # row k ends k tokens early
            rows.append([tokenizer.pad_token_id] * (width - len(p)) + p + comp)
            masks.append([0] * (width - len(p)) + [1] * len(p) + [1] * keep + [0] * (completion - keep))
    return torch.tensor(rows), torch.tensor(masks), completion


def _trl_logps(model, input_ids, mask, keep):
    labels = input_ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    out = model(input_ids=input_ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def _lora_grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_shared_prompt_logps_entropy_and_grads_equal_trl(lora_model):
    from pipeline.models import engine

    model, tok = lora_model
    model.train()
    input_ids, mask, keep = _batch(tok)
    assert engine.fast_path_problem(model, {}, False) is None

    model.zero_grad()
    ref_lp, ref_ent = _trl_logps(model, input_ids, mask, keep)
    (ref_lp * mask[:, -keep:]).sum().backward()
    ref_grads = _lora_grads(model)

    model.zero_grad()
    lp, ent = engine.shared_prompt_logps(model, input_ids, mask, keep, temperature=0.9, compute_entropy=True)
    (lp * mask[:, -keep:]).sum().backward()
    grads = _lora_grads(model)

    valid = mask[:, -keep:].bool()
    assert lp.shape == ref_lp.shape == (6, keep)
    assert torch.allclose(lp[valid], ref_lp[valid], atol=2e-4), (lp - ref_lp).abs().max()
    assert torch.allclose(ent[valid], ref_ent[valid], atol=2e-4)
    assert (lp[~valid] == 0).all()
    assert set(grads) == set(ref_grads) and len(grads) > 0
    for name, g in ref_grads.items():  # float rounding differs with the matmul shapes: compare norms
        assert (grads[name] - g).norm() <= 1e-3 * g.norm() + 1e-6, name
    # the adapter matters here: its gradients are far from zero
    assert max(g.abs().max().item() for g in grads.values()) > 1e-3


def test_merged_generation_equals_unmerged(lora_model):
    from pipeline.models import engine

    model, tok = lora_model
    model.eval()
    enc = tok(["The tides are caused by"], return_tensors="pt")
    with torch.no_grad():
        plain = model.generate(**enc, max_new_tokens=12, do_sample=False)
        before = {n: p.detach().clone() for n, p in model.named_parameters() if "base_layer" in n}
        with engine.merged_adapter(model):
            merged = model.generate(**enc, max_new_tokens=12, do_sample=False)
    assert merged.tolist() == plain.tolist()
    after = dict(model.named_parameters())
    for name, p in before.items():  # unmerged again: base weights back as they were
        assert torch.allclose(after[name], p, atol=1e-6), name


def test_shared_prefill_generation_equals_plain_generate(lora_model):
    from transformers import GenerationConfig

    from pipeline.models import engine

    model, tok = lora_model
    model.eval()
    prompts = [tok("Summarize: the council voted for bike lanes on Harper Street.")["input_ids"],
               tok("Tides are caused by")["input_ids"]]
    rows = [p for p in prompts for _ in range(3)]  # each prompt G=3 times, different lengths -> left padding
    gc = GenerationConfig(max_new_tokens=10, do_sample=False, pad_token_id=tok.pad_token_id)
    width = max(map(len, rows))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in rows])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])
    with torch.no_grad():
        plain = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)[:, width:]
        shared = engine.generate_shared_prefill(model, rows, tok.pad_token_id, gc)
    assert shared.tolist() == plain.tolist()


def test_bf16_bundled_base_weights_survive_merged_sampling(bundled_model_dir):
    """The merge-drift check on the real weights: merge, sample, unmerge and an Adam-sized LoRA step, 5 times, in bf16;
    the frozen base must come back bit for bit (PEFT's in-place round trip changed ~15% of it in 100)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from pipeline.models import engine

    base = AutoModelForCausalLM.from_pretrained(bundled_model_dir, dtype=torch.bfloat16)
    model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=32, lora_dropout=0.0,
                                            target_modules="all-linear"))
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "base_layer" in n}
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 5000, (2, 8), generator=gen)
    with torch.no_grad():
        for _ in range(5):
            with engine.merged_adapter(model):
                model(input_ids=ids)
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.add_(3e-4 * torch.sign(torch.randn(p.shape, generator=gen)).to(p.dtype))
    after = dict(model.named_parameters())
    changed = sum(int((after[n] != w).sum()) for n, w in before.items())
    total = sum(w.numel() for w in before.values())
    assert changed == 0, f"{changed / total:.2%} of the bundled model's bf16 base entries changed in 5 cycles"
