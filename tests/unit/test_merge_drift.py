"""The fast engine's merged sampling leaves the frozen base weights exactly as they were.

PEFT merges in place in the weights' dtype; in bf16 every merge/unmerge cycle rounds, and between
cycles the LoRA weights move (one optimizer step each), so the rounding never cancels out. A small
random Llama stands in for the bundled model here (seconds, no conversion); the same check on the
bundled weights is in tests/integration/test_engine.py.
"""

import torch


def tiny_lora_model(dtype):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    base = LlamaForCausalLM(config).to(dtype)
    return get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=32, lora_dropout=0.0,
                                           target_modules="all-linear"))


def base_weights(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "base_layer" in n}


def train_like_cycles(model, cycles: int, lr: float = 3e-4) -> None:
    """Merge, sample, unmerge, then an Adam-sized step on the LoRA weights (about lr per entry), as a run does."""
    from pipeline.models import engine

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (2, 6), generator=gen)
    for _ in range(cycles):
        with torch.no_grad():
            with engine.merged_adapter(model):
                model(input_ids=ids)
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.add_(lr * torch.sign(torch.randn(p.shape, generator=gen)).to(p.dtype))


def changed_share(before: dict, model) -> float:
    after = dict(model.named_parameters())
    changed = sum(int((after[n] != w).sum()) for n, w in before.items())
    return changed / sum(w.numel() for w in before.values())


def test_bf16_base_weights_are_unchanged_after_merge_unmerge_cycles():
    model = tiny_lora_model(torch.bfloat16)
    before = base_weights(model)
    train_like_cycles(model, cycles=20)
    share = changed_share(before, model)
    assert share == 0, f"{share:.1%} of the bf16 base entries changed after 20 merge/unmerge cycles"


def test_fp32_base_weights_are_unchanged_after_merge_unmerge_cycles():
    # fp32 rounds too: on the GPU check, 10 steps moved 10% of the entries by up to 2.6e-8.
    model = tiny_lora_model(torch.float32)
    before = base_weights(model)
    train_like_cycles(model, cycles=20)
    share = changed_share(before, model)
    assert share == 0, f"{share:.1%} of the fp32 base entries changed after 20 merge/unmerge cycles"


def test_merged_sampling_uses_the_merged_weights_and_leaves_the_adapter_unmerged():
    from pipeline.models import engine

    model = tiny_lora_model(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    ids = torch.randint(0, 256, (1, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        with model.disable_adapter():
            plain_base = model(input_ids=ids).logits
        with engine.merged_adapter(model):
            merged = model(input_ids=ids).logits
            layer = model.base_model.model.model.layers[0].self_attn.q_proj
            assert layer.merged  # the adapter is folded in while sampling
        assert not layer.merged
    assert not torch.equal(merged, plain_base)  # the merge was not a no-op
