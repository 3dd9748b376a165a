"""Text generation helpers shared by evaluation, chat and RAG."""

from __future__ import annotations


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
        kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            ids = model.generate(**enc, **kwargs)
        new = ids[:, enc["input_ids"].shape[1]:]
        out.extend(tokenizer.batch_decode(new, skip_special_tokens=True))
    return out
