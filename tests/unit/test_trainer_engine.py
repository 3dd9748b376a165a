"""The studio's GRPOTrainer subclass hands the fast engine what the run asked for, and falls back to TRL's own
code wherever the engine would be wrong: the config's sampling temperature reaches the engine's log-probs;
more than one process (DDP), gradient checkpointing, a model that scales its logits and a 4-bit (QLoRA) base
all take TRL's path, and a QLoRA run's merged model is its adapter on the base reloaded from disk. A tiny
random Llama inside TRL's real GRPOTrainer: seconds, no bundled model."""

import pytest
import torch

from pipeline.models import engine
from pipeline.setup.config import RunConfig

VOCAB = 16


def tiny_parts(lm_head_scale: float = 20.0):
    """Model, tokenizer, data, reward and LoRA for a GRPOTrainer. The LM head is scaled up so the logits are
    far from flat: at init they are near 0, where every temperature gives about the same log-probs."""
    from datasets import Dataset
    from peft import LoraConfig
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<pad>", "<eos>", *"abcdefghij"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="a"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0,
                                         eos_token_id=1, bos_token_id=1))
    with torch.no_grad():
        model.lm_head.weight.mul_(lm_head_scale)
    return dict(model=model, processing_class=tokenizer,
                train_dataset=Dataset.from_list([{"prompt": "a b c"}] * 8),
                reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                peft_config=LoraConfig(r=4, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear"))


def saved_tiny_model(tmp_path, monkeypatch):
    """tiny_parts() with its model and tokenizer saved as a folder build_trainer can load (in fp32, without the
    held-out probes): (parts, folder)."""
    import pipeline.train as train

    parts = tiny_parts()
    model_dir = tmp_path / "model"
    parts["model"].save_pretrained(model_dir)
    parts["processing_class"].save_pretrained(model_dir)
    monkeypatch.setattr(train, "model_load_kwargs", lambda cfg, precision, device: {"dtype": torch.float32})
    monkeypatch.setattr(train, "make_probe_callbacks", lambda *a, **k: [])
    return parts, model_dir


def studio_trainer(tmp_path, **config):
    """The studio's trainer subclass with the GRPO arguments the studio builds from a RunConfig."""
    from pipeline.training.grpo_trainer import grpo_args, make_trainer_class

    cfg = RunConfig(**{"num_generations": 4, "batch_size": 4, **config})
    trainer = make_trainer_class()(args=grpo_args(cfg, tmp_path, "cpu", "fp32"), **tiny_parts())
    trainer.studio_fast = True
    with torch.no_grad():  # a trained-looking adapter (B is zero at init)
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return trainer


def batch():
    """Two prompts of different lengths (left-padded), each G=3 times, completions right-padded."""
    gen = torch.Generator().manual_seed(3)
    prompts = [[2, 3, 4, 5, 6], [7, 8]]
    width, completion = 5, 6
    rows, masks = [], []
    for p in prompts:
        for k in range(3):
            comp = torch.randint(2, VOCAB, (completion,), generator=gen).tolist()
            rows.append([0] * (width - len(p)) + p + comp)
            masks.append([0] * (width - len(p)) + [1] * len(p) + [1] * (completion - k) + [0] * k)
    return torch.tensor(rows), torch.tensor(masks), completion


def logps_by_hand(model, input_ids, mask, keep, temperature):
    """log softmax(logits / T) of each completion token, from the model's plain forward."""
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=mask).logits[:, -keep - 1:-1].float()
    return torch.log_softmax(logits / temperature, -1).gather(-1, input_ids[:, -keep:, None]).squeeze(-1)


class EngineSpy:
    """Counts the engine calls and records the temperature each log-prob call got."""

    def __init__(self, monkeypatch):
        self.temperatures, self.samples = [], 0
        real_logps, real_generate = engine.shared_prompt_logps, engine.generate_shared_prefill

        def logps(model, input_ids, attention_mask, logits_to_keep, temperature, compute_entropy):
            self.temperatures.append(temperature)
            return real_logps(model, input_ids, attention_mask, logits_to_keep, temperature, compute_entropy)

        def generate(*args, **kwargs):
            self.samples += 1
            return real_generate(*args, **kwargs)

        monkeypatch.setattr(engine, "shared_prompt_logps", logps)
        monkeypatch.setattr(engine, "generate_shared_prefill", generate)


def test_the_configs_temperature_reaches_the_engines_log_probs(tmp_path, monkeypatch):
    """GRPO scores each completion under the distribution it was sampled from: logits / the run's temperature.
    The engine, reached through the trainer's own hook, must get the config's 0.7 (not 1.0) and agree with
    TRL's path and with the log-probs computed by hand."""
    spy = EngineSpy(monkeypatch)
    trainer = studio_trainer(tmp_path, temperature=0.7)
    model = trainer.model
    input_ids, mask, keep = batch()
    valid = mask[:, -keep:].bool()
    with torch.no_grad():
        fast, fast_entropy, _ = trainer._get_per_token_logps_and_entropies(model, input_ids, mask, keep,
                                                                            compute_entropy=True)
        trainer.studio_fast = False
        trl, trl_entropy, _ = trainer._get_per_token_logps_and_entropies(model, input_ids, mask, keep,
                                                                          compute_entropy=True)
    assert spy.temperatures == [0.7]  # one engine call (the fast one), at the run's temperature
    at_07 = logps_by_hand(model, input_ids, mask, keep, 0.7)
    at_1 = logps_by_hand(model, input_ids, mask, keep, 1.0)
    assert (at_07 - at_1)[valid].abs().max() > 0.1  # the temperature matters here, so the test can tell
    assert torch.allclose(fast[valid], at_07[valid], atol=1e-4), (fast - at_07)[valid].abs().max()
    assert torch.allclose(fast[valid], trl[valid], atol=1e-4), (fast - trl)[valid].abs().max()
    assert torch.allclose(fast_entropy[valid], trl_entropy[valid], atol=1e-4)


def test_on_a_gpu_the_log_prob_passes_are_trls_own(tmp_path, monkeypatch):
    """The shared-prompt pass saves arithmetic, what a CPU step costs; on a GPU launches cost, and TRL's pass (one
    forward of every row, its fused LM head) is the one to run. The rule is asked about the tensors' device; told
    "cuda", the hook leaves the shared pass alone (here on the CPU, TRL's pass then runs through the model's own
    LM head) and gives TRL's numbers."""
    spy = EngineSpy(monkeypatch)
    trainer = studio_trainer(tmp_path, temperature=0.7)
    input_ids, mask, keep = batch()
    valid = mask[:, -keep:].bool()
    with torch.no_grad():
        shared, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, mask, keep)
        assert spy.temperatures == [0.7]  # the CPU: the shared pass
        asked, real_rule = [], engine.logps_pass
        monkeypatch.setattr(engine, "logps_pass", lambda device_type: (asked.append(device_type), real_rule("cuda"))[1])
        as_on_gpu, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, mask, keep)
    assert asked == ["cpu"] and spy.temperatures == [0.7]  # as on a GPU: not the shared pass
    assert torch.allclose(as_on_gpu[valid], shared[valid], atol=1e-4)


def test_on_the_cpu_trls_pass_uses_the_plain_lm_head_with_the_same_values_and_gradients(tmp_path, monkeypatch):
    """Where the engine does not apply (here: two processes), the CPU scores through the model's own LM head
    instead of TRL's chunked one (several times slower there). Log-probs, entropies and the LoRA gradients they
    give must be TRL's own, with the batch split into micro-batches as TRL splits it."""
    from trl import GRPOTrainer

    trainer = studio_trainer(tmp_path, temperature=0.7)
    model = trainer.model
    input_ids, mask, keep = batch()
    valid = mask[:, -keep:].bool()
    monkeypatch.setenv("WORLD_SIZE", "2")
    lora = [p for name, p in model.named_parameters() if "lora_" in name]

    def scored(score):
        model.zero_grad()
        logps, entropy, _ = score(model, input_ids, mask, keep, batch_size=4, compute_entropy=True)
        ((logps * valid).sum() + (entropy * valid).sum()).backward()
        return logps.detach(), entropy.detach(), [p.grad.clone() for p in lora]

    calls, real = [], engine.plain_head_logps
    monkeypatch.setattr(engine, "plain_head_logps", lambda *a, **k: (calls.append(a[-1]), real(*a, **k))[1])
    ours = scored(trainer._get_per_token_logps_and_entropies)
    trls = scored(lambda *a, **k: GRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k))
    assert calls == [4]  # the plain head ran, in TRL's micro-batches
    assert torch.allclose(ours[0][valid], trls[0][valid], atol=1e-5), (ours[0] - trls[0])[valid].abs().max()
    assert torch.allclose(ours[1][valid], trls[1][valid], atol=1e-5), (ours[1] - trls[1])[valid].abs().max()
    assert (ours[0][~valid] == 0).all() and (ours[1][~valid] == 0).all()
    assert max(g.abs().max().item() for g in ours[2]) > 1e-3  # the gradients are not all zero
    for mine, theirs in zip(ours[2], trls[2]):
        assert torch.allclose(mine, theirs, atol=1e-5, rtol=1e-4), (mine - theirs).abs().max()


def test_more_than_one_process_takes_trls_path(tmp_path, monkeypatch):
    """Under torchrun the model must be called through its DDP wrapper, or the ranks' gradients are never
    averaged (each rank would train its own adapter, silently). So with WORLD_SIZE > 1 the trainer neither
    scores nor samples through the engine, and no adapter is merged for sampling."""
    spy = EngineSpy(monkeypatch)
    trainer = studio_trainer(tmp_path, temperature=0.7)
    model = trainer.model
    input_ids, mask, keep = batch()
    merges, real_merge = [], model.merge_adapter
    monkeypatch.setattr(model, "merge_adapter", lambda *a, **k: (merges.append(1), real_merge(*a, **k)), raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, input_ids, mask, keep)
        with engine.merged_adapter(model):
            pass
        trainer._generate_single_turn([[2, 3, 4]] * 2, None, {}, 2)
    assert spy.temperatures == [] and spy.samples == 0 and merges == []
    valid = mask[:, -keep:].bool()
    at_07 = logps_by_hand(model, input_ids, mask, keep, 0.7)
    assert torch.allclose(logps[valid], at_07[valid], atol=1e-4)  # TRL's path, same numbers
    assert engine.fast_path_problem(model, {}, False) == "more than one process"

    monkeypatch.setenv("WORLD_SIZE", "1")  # the same trainer on one process does use the engine
    with torch.no_grad():
        trainer._get_per_token_logps_and_entropies(model, input_ids, mask, keep)
        trainer._generate_single_turn([[2, 3, 4]] * 2, None, {}, 2)
    assert spy.temperatures == [0.7] and spy.samples == 1 and merges == [1]


def test_gradient_checkpointing_takes_trls_path(tmp_path):
    """Checkpointing turns the key/value cache off, which the shared-prompt path is built on."""
    trainer = studio_trainer(tmp_path)
    model = trainer.model
    model.train()
    assert engine.fast_path_problem(model, {}, False) is None
    engine.causal_lm(model).gradient_checkpointing_enable()
    assert engine.fast_path_problem(model, {}, False) == "gradient checkpointing is on (it disables the key/value cache)"
    model.eval()  # scoring without gradients (the reference and old log-probs) may still share prompts
    assert engine.fast_path_problem(model, {}, False) is None


def test_image_inputs_and_moe_aux_loss_take_trls_path(tmp_path):
    """The engine runs text through the backbone and returns no auxiliary loss: image inputs would be dropped and
    an MoE model's load-balancing loss silently left out of training."""
    trainer = studio_trainer(tmp_path)
    model = trainer.model
    assert engine.fast_path_problem(model, {"pixel_values": None, "image_grid_thw": None}, False) is None
    assert engine.fast_path_problem(model, {"pixel_values": torch.zeros(1, 3, 4, 4)}, False) == "multimodal inputs"
    assert engine.fast_path_problem(model, {}, True) == "MoE auxiliary loss"


@pytest.mark.parametrize("family, scaling", [("gemma2", {"final_logit_softcapping": 30.0}),
                                             ("cohere", {"logit_scale": 0.0625}), ("granite", {"logits_scaling": 4.0})])
def test_a_model_that_scales_its_logits_takes_trls_path(family, scaling):
    """The engine computes lm_head(h) / T. A model that softcaps or scales its logits after the head (Gemma 2,
    Cohere, Granite) would be scored on other numbers than the ones it samples from: no error, wrong ratios."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(family, vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, **scaling)
    model = AutoModelForCausalLM.from_config(config)
    lm = engine.causal_lm(model)
    assert lm is model
    assert engine.fast_path_problem(model, {}, False) == "the model scales its logits"
    # and the scaling is real: the model's logits are not its head's
    ids = torch.tensor([[2, 3, 4]])
    with torch.no_grad():
        hidden = getattr(model, model.base_model_prefix)(input_ids=ids).last_hidden_state
        assert not torch.allclose(model(input_ids=ids).logits, model.get_output_embeddings()(hidden))


def test_a_quantized_base_is_never_merged_into(tmp_path):
    """Merging LoRA into 4-bit weights rounds the adapter away (and writes it into the packed tensors). A base
    whose adapted weights are not floating point (as bitsandbytes' 4-bit ones are) samples through the LoRA
    branch: merged_adapter leaves it alone."""
    trainer = studio_trainer(tmp_path)
    model = trainer.model
    adapted = engine._adapted_base_params(model)
    assert adapted
    for p in adapted:  # packed integers, as a 4-bit base holds them
        p.data = torch.randint(-8, 8, p.shape, dtype=torch.int8)
    before = [p.data.clone() for p in adapted]
    with engine.merged_adapter(model):
        assert all(torch.equal(p.data, b) for p, b in zip(adapted, before))
    assert all(torch.equal(p.data, b) for p, b in zip(adapted, before))
    assert not any(getattr(m, "merged", False) for m in model.modules())


def test_qlora_runs_turn_the_fast_engine_off(tmp_path, monkeypatch):
    """build_trainer: a 4-bit base trains through TRL's own path (fast_engine off whatever the setting).
    bitsandbytes needs a GPU, so the base is loaded unquantized here: the switch is what is tested."""
    import threading

    import pipeline.train as train

    parts, model_dir = saved_tiny_model(tmp_path, monkeypatch)

    def built(**config):
        cfg = RunConfig(**{"num_generations": 4, "batch_size": 4, **config})
        return train.build_trainer(cfg, tmp_path, str(model_dir), parts["processing_class"], "cpu", "fp32",
                                   [{"prompt": "a b c"}] * 8, [], parts["reward_funcs"], [1.0],
                                   threading.Event(), False)

    assert built(fast_engine=True).studio_fast is True
    assert built(fast_engine=True, load_in_4bit=True, precision="bf16").studio_fast is False
    assert built(fast_engine=False).studio_fast is False


def test_a_qlora_run_merges_its_adapter_onto_the_base_reloaded_from_disk(tmp_path):
    """save_and_merge with load_in_4bit: merged/ is the adapter on the base model reloaded in bf16 from its
    folder, never a merge into the 4-bit weights in memory (that would round the adapter away, and save packed
    4-bit tensors that Chat on a CPU can't load). The in-memory base stands in for the 4-bit one: the same
    weights, rounded to a coarse grid."""
    from types import SimpleNamespace

    from peft import PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    from pipeline.train import save_and_merge

    parts = tiny_parts()
    model_dir = tmp_path / "model"
    parts["model"].save_pretrained(model_dir)
    parts["processing_class"].save_pretrained(model_dir)
    in_memory = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)  # its compute dtype
    with torch.no_grad():
        for p in in_memory.parameters():
            p.copy_(torch.round(p * 4) / 4)  # what quantization does to the base, roughly
    peft = get_peft_model(in_memory, parts["peft_config"])
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    trainer = SimpleNamespace(model=peft, accelerator=SimpleNamespace(unwrap_model=lambda m: m),
                              state=SimpleNamespace(global_step=2))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = RunConfig(load_in_4bit=True, precision="bf16", merge_at_end=True)
    save_and_merge(trainer, parts["processing_class"], cfg, run_dir, str(model_dir), "bf16", "finished")

    merged = AutoModelForCausalLM.from_pretrained(run_dir / "merged")
    expected = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16),
                                         run_dir / "adapter").merge_and_unload()
    got, want = merged.state_dict(), expected.state_dict()
    assert merged.dtype == torch.bfloat16 and got.keys() == want.keys()
    differing = [k for k in want if not torch.equal(got[k].to(torch.bfloat16), want[k])]
    assert differing == [], f"{len(differing)} of {len(want)} merged tensors are not adapter + the base from disk"
