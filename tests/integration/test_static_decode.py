"""The static-cache decoder samples what the eager path samples, on the bundled model with a trained-looking
LoRA merged as the trainer merges it: greedy tokens identical to `generate` for left-padded prompts of
different lengths (a row ending early included), the log-probs it samples under equal to a fresh forward's,
and after a LoRA update the next call decodes with the new weights from the same buffers.
On the CPU the step runs uncompiled (the tests of the compiled step's graph are in tests/unit)."""

import pytest
import torch

pytestmark = pytest.mark.slow

PROMPTS = ["Summarize: the council voted for bike lanes on Harper Street after a long debate.",
           "Tides are caused by", "Hi"]


@pytest.fixture(scope="module")
def lora_model(bundled_model_dir):
    from .test_engine import bundled_with_lora

    model, tokenizer = bundled_with_lora(bundled_model_dir)
    model.eval()
    return model, tokenizer


def rows_of(tok, g=2):
    prompts = [tok(p)["input_ids"] for p in PROMPTS]
    assert len({len(p) for p in prompts}) == len(prompts)  # different lengths: left padding
    return [p for p in prompts for _ in range(g)]


def plain_generate(model, rows, pad, gc):
    """`generate` on the left-padded batch, as TRL calls it: the new tokens."""
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in rows])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])
    return model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)[:, width:]


def cut(tokens, eos):
    from pipeline.models.engine import cut_at_eos

    return [cut_at_eos(row, eos) for row in tokens.tolist()]


def test_greedy_tokens_equal_generate_with_left_padding_and_a_row_ending_early(lora_model):
    from transformers import GenerationConfig

    from pipeline.models import engine
    from pipeline.models.static_decode import StaticDecoder

    model, tok = lora_model
    rows = rows_of(tok)
    gc = GenerationConfig(max_new_tokens=16, do_sample=False, pad_token_id=tok.pad_token_id,
                          eos_token_id=tok.eos_token_id)
    decoder = StaticDecoder()
    with torch.no_grad(), engine.merged_adapter(model, decoder.weight_copies):
        eager = plain_generate(model, rows, tok.pad_token_id, gc)
        # A token the first prompt's rows produce early counts as an end of sequence too: those rows end
        # after 4 tokens, the others go on, and the ended rows must be padded as generate pads them.
        stop = eager[0, 3].item()
        assert stop not in eager[2:, :4].flatten().tolist()  # ...and the other prompts don't end there
        gc_stop = GenerationConfig(**{**gc.to_diff_dict(), "eos_token_id": [tok.eos_token_id, stop]})
        eager_stop = plain_generate(model, rows, tok.pad_token_id, gc_stop)
        static = decoder.generate(model, rows, gc)
        static_stop = decoder.generate(model, rows, gc_stop)
    assert cut(static, [tok.eos_token_id]) == cut(eager, [tok.eos_token_id])
    assert static.tolist() == eager.tolist()  # padding after an end included
    assert cut(static_stop, [tok.eos_token_id, stop]) == cut(eager_stop, [tok.eos_token_id, stop])
    assert [len(r) for r in cut(static_stop, [stop])][:2] == [4, 4]
    assert (static_stop[:2, 4:] == tok.pad_token_id).all()
    assert decoder.builds == 1  # the second call reused the buffers


IN_GRAPH = pytest.mark.parametrize("in_graph", [False, True], ids=["sampling outside", "sampling in the graph"])


@IN_GRAPH
def test_sampled_tokens_log_probs_equal_a_fresh_forward(lora_model, in_graph):
    """The decoder samples from softmax(logits / T) of the model at each position: the log-prob it drew each
    token under equals the log-prob a fresh full forward gives that token (as GRPO scores it), for every
    row and every token up to the row's end."""
    from transformers import GenerationConfig

    from pipeline.models import engine
    from pipeline.models.static_decode import StaticDecoder

    model, tok = lora_model
    rows = rows_of(tok, g=3)
    width = max(map(len, rows))
    temperature = 0.7
    gc = GenerationConfig(max_new_tokens=20, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                          pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    decoder = StaticDecoder(sample_in_graph=in_graph)
    torch.manual_seed(5)
    with torch.no_grad(), engine.merged_adapter(model, decoder.weight_copies):
        tokens, sampled_lp = decoder.generate(model, rows, gc, with_logprobs=True)
    new = tokens.size(1)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in rows])
    full = torch.cat([ids, tokens], dim=1)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * (len(p) + new) for p in rows])
    with torch.no_grad():  # the model with the adapter as a branch, not merged: what training scores with
        logits = model(input_ids=full, attention_mask=mask).logits[:, width - 1:-1].float()
    fresh = torch.log_softmax(logits / temperature, -1).gather(-1, tokens[:, :, None]).squeeze(-1)
    valid = torch.tensor([[t <= len(r) - 1 for t in range(new)] for r in cut(tokens, [tok.eos_token_id])])
    assert valid.sum() >= len(rows) * 3
    assert torch.allclose(sampled_lp[valid], fresh[valid], atol=1e-4), (sampled_lp - fresh)[valid].abs().max()
    assert len({tuple(r) for r in tokens.tolist()}) > 1  # it did sample: rows of one prompt differ


@IN_GRAPH
def test_top_k_sampling_stays_within_the_top_k(lora_model, in_graph):
    from transformers import GenerationConfig

    from pipeline.models import engine
    from pipeline.models.static_decode import StaticDecoder

    model, tok = lora_model
    rows = rows_of(tok)
    width = max(map(len, rows))
    gc = GenerationConfig(max_new_tokens=12, do_sample=True, temperature=1.5, top_k=3,
                          pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(1)
    with torch.no_grad(), engine.merged_adapter(model):
        tokens, lp = StaticDecoder(sample_in_graph=in_graph).generate(model, rows, gc, with_logprobs=True)
        ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in rows])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])
        full_mask = torch.cat([mask, torch.ones_like(tokens)], dim=1)
        logits = model(input_ids=torch.cat([ids, tokens], 1), attention_mask=full_mask).logits[:, width - 1:-1]
    top3 = logits.topk(3, dim=-1).indices
    ended = torch.tensor([[t >= len(r) for t in range(tokens.size(1))] for r in cut(tokens, [tok.eos_token_id])])
    assert ((top3 == tokens[:, :, None]).any(-1) | ended).all()
    assert (lp[~ended] > torch.log(torch.tensor(1e-6))).all()  # renormalised over 3 tokens, never tiny


def test_a_lora_update_between_calls_is_used_by_the_next_call(lora_model):
    """An optimizer step changes the LoRA weights in place between two samplings. The decoder keeps its
    buffers and merged-weight copies (the addresses a captured graph reads), and the next call must decode
    with the new weights: equal to generate after the update, different from before it."""
    from transformers import GenerationConfig

    from pipeline.models import engine
    from pipeline.models.static_decode import StaticDecoder

    model, tok = lora_model
    rows = rows_of(tok)
    gc = GenerationConfig(max_new_tokens=16, do_sample=False, pad_token_id=tok.pad_token_id,
                          eos_token_id=tok.eos_token_id)
    decoder = StaticDecoder()
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    saved = [p.detach().clone() for p in lora_b]
    try:
        with torch.no_grad(), engine.merged_adapter(model, decoder.weight_copies):
            before = decoder.generate(model, rows, gc)
        addresses = {k: t.data_ptr() for k, (_, t) in decoder.weight_copies.items()}
        cache_address = decoder._cache.layers[0].keys.data_ptr()
        with torch.no_grad():  # "an optimizer step": in place, as torch.optim updates
            gen = torch.Generator().manual_seed(2)
            for p in lora_b:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        with torch.no_grad(), engine.merged_adapter(model, decoder.weight_copies):
            after = decoder.generate(model, rows, gc)
            eager_after = plain_generate(model, rows, tok.pad_token_id, gc)
    finally:
        with torch.no_grad():
            for p, s in zip(lora_b, saved):
                p.copy_(s)
    assert after.tolist() == eager_after.tolist()
    assert after.tolist() != before.tolist()
    assert decoder.builds == 1 and decoder._cache.layers[0].keys.data_ptr() == cache_address
    assert {k: t.data_ptr() for k, (_, t) in decoder.weight_copies.items()} == addresses
