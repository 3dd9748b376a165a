"""The static generation path, on a tiny random Llama inside TRL's real GRPOTrainer (seconds, no bundled model):
which runs get it and why the others don't (the reason reaches the run header), the trainer sampling through
it and falling back when it fails, a decoding step that torch.compile traces as one graph with no breaks
and no recompiles across prompt lengths and LoRA updates, and merged-weight copies that keep their
addresses while holding exactly the current weights. The bundled-model equivalence tests are in
tests/integration/test_static_decode.py."""

import dataclasses
import json

import pytest
import torch

from pipeline.models import engine, static_decode
from pipeline.setup.config import RunConfig
from pipeline.models.static_decode import StaticDecoder
from tests.unit.test_trainer_engine import studio_trainer

PROMPTS = [[2, 3, 4, 5, 6], [7, 8], [9, 10, 11]]


def greedy(trainer, max_new=8):
    gc = trainer.generation_config
    gc.do_sample, gc.max_new_tokens = False, max_new
    return gc


def rows_of(prompts, g=2):
    return [p for p in prompts for _ in range(g)]


@pytest.mark.parametrize("settings, device, expected", [
    ({}, "cpu", ("eager", None)),  # the CPU default: what it samples stays as it was
    ({}, "cuda", ("static", None)),
    ({"generation_engine": "static"}, "cpu", ("static", None)),
    ({"generation_engine": "eager"}, "cuda", ("eager", None)),
    ({"gradient_checkpointing": True}, "cuda", ("static", None)),  # TRL turns it off while sampling
    ({"use_vllm": True}, "cuda", ("eager", "vLLM generates the completions")),
    ({"fast_engine": False}, "cuda", ("eager", "the fast engine is off")),
    ({"load_in_4bit": True}, "cuda", ("eager", "a 4-bit (QLoRA) base samples through TRL's own path")),
    ({"repetition_penalty": 1.2}, "cuda", ("eager", "sampling with repetition_penalty")),
])
def test_which_runs_decode_statically_and_why_not(tmp_path, settings, device, expected):
    from pipeline.train import generation_engine

    cfg = RunConfig(num_generations=4, batch_size=4, **settings)
    trainer = studio_trainer(tmp_path, **{k: v for k, v in settings.items() if k == "repetition_penalty"})
    decoder, header = generation_engine(cfg, trainer, device, longest_prompt=5)
    assert (header["generation"], header["generation_note"]) == expected
    assert isinstance(decoder, StaticDecoder) == (expected[0] == "static")
    if decoder:
        assert decoder.min_length == 5 + cfg.max_completion_length  # one buffer size for the whole run


def test_more_than_one_process_decodes_eagerly(tmp_path, monkeypatch):
    from pipeline.train import generation_engine

    trainer = studio_trainer(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")
    _, header = generation_engine(RunConfig(generation_engine="static"), trainer, "cuda")
    assert header == {"generation": "eager", "generation_note": "more than one process"}


def test_a_model_with_sliding_window_layers_decodes_eagerly():
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("gemma2", vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=4)
    model = AutoModelForCausalLM.from_config(config)
    assert "sliding-window" in static_decode.model_problem(model)


def test_a_transformers_without_the_internals_it_uses_decodes_eagerly(tmp_path, monkeypatch):
    """The static path reads transformers' generation internals; where they are missing the run must still
    start, sampling eagerly, with the reason in the header."""
    from transformers import LlamaForCausalLM

    from pipeline.train import generation_engine

    trainer = studio_trainer(tmp_path)
    monkeypatch.setattr(LlamaForCausalLM, "_prepare_generation_config", None, raising=False)
    decoder, header = generation_engine(RunConfig(generation_engine="static"), trainer, "cuda")
    assert decoder is None and header["generation"] == "eager"
    assert header["generation_note"].startswith("static decoding is unavailable here (TypeError")


def test_the_run_header_says_how_completions_are_sampled():
    from ui.views import progress_html

    def header(**status):
        return progress_html("r", {"state": "running", "device": "cuda", "precision": "bf16", **status}, [], 10)

    assert "static decoding" in header(generation="static")
    assert "eager decoding: the fast engine is off" in header(
        generation="eager", generation_note="the fast engine is off")
    assert "decoding" not in header(generation="eager")  # asked for (the CPU default): nothing to explain
    # before the first step lands, a static run says that it compiles (the first step takes up to a minute longer)
    from pipeline.training.grpo_trainer import first_group_phase

    assert "compiles the decoding step" in header(generation="static", phase=first_group_phase("static", False))
    eager = header(generation="eager", phase=first_group_phase("eager", False))
    assert "compiles" not in eager and "sampling the first group" in eager


def test_the_trainer_samples_through_the_static_decoder(tmp_path, monkeypatch):
    """Greedy, through TRL's own hook: the static decoder gives the eager path's completions, cut at the end
    token the same way, and is what ran (its buffers built once for two calls)."""
    trainer = studio_trainer(tmp_path)
    greedy(trainer)
    prompts = rows_of(PROMPTS)
    with torch.no_grad():
        eager, _ = trainer._generate_single_turn(prompts, None, {}, 2)
        trainer.studio_static = StaticDecoder(min_length=16)
        calls = []
        real = trainer.studio_static.generate
        monkeypatch.setattr(trainer.studio_static, "generate", lambda *a, **k: calls.append(1) or real(*a, **k))
        static, _ = trainer._generate_single_turn(prompts, None, {}, 2)
        again, _ = trainer._generate_single_turn(prompts, None, {}, 2)
    assert static == eager == again and len(calls) == 2
    assert trainer.studio_static.builds == 1 and trainer.studio_static._key[2] == 64  # 16 rounded up


def checkpointed_trainer(tmp_path):
    """A studio trainer whose model trains with gradient checkpointing, as TRL sets it up (input gradients on)."""
    trainer = studio_trainer(tmp_path, gradient_checkpointing=True)
    model = trainer.model
    if not model.is_gradient_checkpointing:
        model.gradient_checkpointing_enable(trainer.args.gradient_checkpointing_kwargs)
    model.enable_input_require_grads()
    model.train()
    return trainer


def test_with_gradient_checkpointing_on_the_trainer_samples_statically_the_same_tokens(tmp_path):
    """Gradient checkpointing turns the key/value cache off in training mode. TRL turns checkpointing off while
    the model samples, so the static decoder runs then: greedy, it gives the tokens the same model gives
    without checkpointing, and checkpointing is back on afterwards for the backward pass."""
    trainer = checkpointed_trainer(tmp_path)
    greedy(trainer)
    prompts = rows_of(PROMPTS)
    with torch.no_grad():
        trainer.model.gradient_checkpointing_disable()
        plain, _ = trainer._generate_single_turn(prompts, None, {}, 2)  # no checkpointing at all
        trainer.model.gradient_checkpointing_enable(trainer.args.gradient_checkpointing_kwargs)
        eager, _ = trainer._generate_single_turn(prompts, None, {}, 2)
        trainer.studio_static = StaticDecoder(min_length=16)
        static, _ = trainer._generate_single_turn(prompts, None, {}, 2)
    assert static == eager == plain
    assert trainer.studio_static is not None and trainer.studio_static.builds == 1  # it ran, and did not fail
    assert trainer.model.is_gradient_checkpointing and trainer.model.training


def test_with_gradient_checkpointing_on_the_decoding_step_still_compiles_to_one_graph(tmp_path):
    """TRL's input-gradient hook stays on the embeddings while sampling; traced with fullgraph=True, the step
    still makes one graph with no breaks, and its tokens equal the eager path's."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    from trl.models import unwrap_model_for_generation

    trainer = checkpointed_trainer(tmp_path)
    gc = greedy(trainer)
    torch._dynamo.reset()
    counters.clear()
    decoder = StaticDecoder(compiler=lambda step, device: torch.compile(step, backend="eager", fullgraph=True,
                                                                         dynamic=False))
    for prompts in (PROMPTS, [[2, 3], [4, 5, 6, 7, 8, 9, 10], [11]]):
        rows = rows_of(prompts)
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs) \
                as model, torch.no_grad(), engine.merged_adapter(model, decoder.weight_copies):
            eager = engine.generate_shared_prefill(model, rows, 0, gc)
            static = decoder.generate(model, rows, gc)
        assert static.tolist() == eager.tolist()
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


def test_a_failing_static_decoder_falls_back_and_says_why(tmp_path):
    """A compile or capture error on some card must not end the run: it samples eagerly from then on and the
    run header says what failed."""
    trainer = studio_trainer(tmp_path)
    trainer.studio_run_dir = tmp_path
    greedy(trainer)
    prompts = rows_of(PROMPTS)

    class Broken(StaticDecoder):
        def generate(self, *args, **kwargs):
            raise RuntimeError("no CUDA graph today")

    with torch.no_grad():
        eager, _ = trainer._generate_single_turn(prompts, None, {}, 2)
        trainer.studio_static = Broken()
        fallen, _ = trainer._generate_single_turn(prompts, None, {}, 2)
    assert fallen == eager and trainer.studio_static is None
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["generation"] == "eager"
    assert status["generation_note"] == "static decoding failed (RuntimeError: no CUDA graph today)"


@pytest.mark.parametrize("sample_in_graph", [False, True], ids=["sampling outside", "sampling in the graph"])
def test_the_decoding_step_compiles_to_one_graph_across_prompt_lengths_and_lora_updates(tmp_path, sample_in_graph):
    """On a GPU the step runs under torch.compile in CUDA graphs. A graph break (a host sync such as .item(), an
    unsupported op) or a recompile per call (a changing shape or stride) would undo that. Traced here with
    fullgraph=True on the CPU: three calls with different prompt widths and a LoRA update between each give
    one graph, and the tokens equal the eager path's."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    trainer = studio_trainer(tmp_path)
    model = trainer.model
    gc = greedy(trainer)
    torch._dynamo.reset()
    counters.clear()
    decoder = StaticDecoder(compiler=lambda step, device: torch.compile(step, backend="eager", fullgraph=True,
                                                                         dynamic=False),
                            sample_in_graph=sample_in_graph)
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    gen = torch.Generator().manual_seed(0)
    for prompts in (PROMPTS, [[2, 3], [4, 5, 6, 7, 8, 9, 10], [11]], [[3, 4], [5, 6], [7, 8, 9]]):
        rows = rows_of(prompts)
        with torch.no_grad(), engine.merged_adapter(model, decoder.weight_copies):
            eager = engine.generate_shared_prefill(model, rows, 0, gc)
            static = decoder.generate(model, rows, gc)
        assert static.tolist() == eager.tolist()
        with torch.no_grad():
            for p in lora_b:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    assert decoder.builds == 1
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


def test_after_a_calls_first_token_the_compiled_step_runs_without_its_guards(tmp_path):
    """Checking a compiled step's guards costs about 2 ms a token on the host, more than the token's whole graph
    on a GPU. A call's first token checks them (and recompiles if the model, buffers or shapes changed); the
    others skip them and the stance is back as it was after the call. With two compiled versions of the step
    (another row count rebuilds the buffers), the tokens still equal the eager path's."""
    import torch._dynamo

    trainer = studio_trainer(tmp_path)
    model = trainer.model
    gc = greedy(trainer)
    torch._dynamo.reset()
    seen = []

    def compiler(step, device):
        compiled = torch.compile(step, backend="eager", dynamic=False)

        def step_as_called(*args):
            seen.append(torch._dynamo.eval_frame._stance.skip_guard_eval_unsafe)
            return compiled(*args)
        return step_as_called

    decoder = StaticDecoder(compiler=compiler)
    for rows in (rows_of(PROMPTS), rows_of(PROMPTS, g=3), rows_of(PROMPTS)):
        with torch.no_grad(), engine.merged_adapter(model, decoder.weight_copies):
            eager = engine.generate_shared_prefill(model, rows, 0, gc)
            static = decoder.generate(model, rows, gc)
        assert static.tolist() == eager.tolist()
        assert seen == [False] + [True] * (gc.max_new_tokens - 1)
        assert torch._dynamo.eval_frame._stance.skip_guard_eval_unsafe is False
        seen.clear()
    assert decoder.builds == 3


def test_persistent_weight_copies_keep_their_addresses_and_hold_the_current_merge(tmp_path):
    """merged_adapter with `copies`: the same tensors every call (a captured graph reads them there), refilled
    from the untouched base each time, so after LoRA updates they hold exactly what a merge into fresh copies
    holds (bf16, where a merge/unmerge round trip rounds), and the base comes back bit for bit."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2)).to(torch.bfloat16)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear"))
    adapted = engine._adapted_base_params(model)
    originals = [p.detach().clone() for p in adapted]
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    copies, addresses = {}, None
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(4):
            for p in lora_b:  # an optimizer step
                p.add_(torch.randn(p.shape, generator=gen).to(p.dtype) * 0.05)
            with engine.merged_adapter(model):
                fresh = [p.detach().clone() for p in adapted]
            with engine.merged_adapter(model, copies):
                kept = [p.detach().clone() for p in adapted]
                now = [p.data_ptr() for p in adapted]
            addresses = addresses or now
            assert now == addresses
            assert all(torch.equal(k, f) for k, f in zip(kept, fresh))
    assert all(torch.equal(p, o) for p, o in zip(adapted, originals))


def test_pre_flight_counts_the_static_buffers_for_the_whole_step():
    """Static decoding keeps its key/value buffers and merged weight copies through training, where the eager
    path frees them after sampling: the estimate's training phase carries them (gradient checkpointing on or
    off), a run that can't decode statically (the fast engine off) does not, and 'Generation engine: eager' is
    offered as a saving."""
    from pipeline.setup.gpu_memory import KNOWN_SHAPES, estimate, settings_from_config, suggestions

    shape = next(iter(KNOWN_SHAPES.values()))
    static = settings_from_config(RunConfig(), "bf16", 200)
    eager = settings_from_config(RunConfig(generation_engine="eager"), "bf16", 200)
    assert static.static_generation and not eager.static_generation
    assert settings_from_config(RunConfig(gradient_checkpointing=True), "bf16", 200).static_generation
    assert not settings_from_config(RunConfig(fast_engine=False), "bf16", 200).static_generation
    checkpointed = dataclasses.replace(static, gradient_checkpointing=True)  # as the suggestion to turn it on
    no_engine = dataclasses.replace(static, fast_engine=False)
    training = estimate(shape, static).phases["training"]
    buffers = training["static decoding: key/value buffers"]
    assert buffers == static.batch_size * 256 * shape.layers * 2 * shape.kv_dim * 2  # 200 + 32 rounded to 256
    assert training["static decoding: merged copy of the adapted weights"] > 0
    assert not any(k.startswith("static") for k in estimate(shape, eager).phases["training"])
    assert estimate(shape, checkpointed).phases["training"]["static decoding: key/value buffers"] == buffers
    assert not any(k.startswith("static") for k in estimate(shape, no_engine).phases["training"])
    assert "Generation engine: eager" in [s.label for s in suggestions(shape, static)]


def test_build_trainer_gives_a_static_run_its_decoder_and_header(tmp_path, monkeypatch):
    """build_trainer wires the choice in: a static run gets a decoder sized for the longest prompt plus the
    completions, and the fields the run header reads; the CPU default gets neither a decoder nor a note."""
    import threading

    import pipeline.train as train
    from tests.unit.test_trainer_engine import saved_tiny_model

    parts, model_dir = saved_tiny_model(tmp_path, monkeypatch)

    def built(**config):
        cfg = RunConfig(**{"num_generations": 4, "batch_size": 4, "max_completion_length": 20, **config})
        return train.build_trainer(cfg, tmp_path, str(model_dir), parts["processing_class"], "cpu", "fp32",
                                   [{"prompt": "a b c"}] * 8, [], parts["reward_funcs"], [1.0],
                                   threading.Event(), False, longest_prompt=7)

    static = built(generation_engine="static")
    assert isinstance(static.studio_static, StaticDecoder) and static.studio_static.min_length == 27
    assert static.studio_generation == {"generation": "static", "generation_note": None}
    default = built()
    assert default.studio_static is None
    assert default.studio_generation == {"generation": "eager", "generation_note": None}


def test_the_exponential_race_draws_each_token_with_its_probability():
    """race_sample, the draw a step that samples in its graph makes, against the categorical distribution it
    stands for: 40,000 draws from five probabilities (one of them 0) land within 4 standard errors of each."""
    probs = torch.tensor([0.5, 0.25, 0.15, 0.1, 0.0])
    gen = torch.Generator().manual_seed(3)
    n = 40_000
    draws = static_decode.race_sample(probs.expand(n, -1), torch.rand(n, 5, generator=gen))
    share = torch.bincount(draws, minlength=5).double() / n
    stderr = (probs.double() * (1 - probs.double()) / n).sqrt()
    assert share[4] == 0
    assert ((share - probs.double()).abs() <= 4 * stderr + 1e-12).all(), share


def test_sampling_in_the_graph_traces_as_one_graph_and_rebuilds_for_a_new_temperature(tmp_path):
    """With sampling inside the step (the draw from the graph's own generator), the step still traces with
    fullgraph=True and no recompile across calls; a temperature steered between calls builds a step for it,
    since the step holds its sampling settings."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    trainer = studio_trainer(tmp_path)
    model = trainer.model
    gc = trainer.generation_config
    gc.do_sample, gc.max_new_tokens, gc.temperature, gc.top_k, gc.top_p = True, 6, 0.9, 5, 0.95
    torch._dynamo.reset()
    counters.clear()
    decoder = StaticDecoder(compiler=lambda step, device: torch.compile(step, backend="eager", fullgraph=True,
                                                                         dynamic=False), sample_in_graph=True)
    rows = rows_of(PROMPTS)
    with torch.no_grad(), engine.merged_adapter(model, decoder.weight_copies):
        first, lp = decoder.generate(model, rows, gc, with_logprobs=True)
        second = decoder.generate(model, rows, gc)
        assert decoder.builds == 1 and counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
        gc.temperature = 1.3
        decoder.generate(model, rows, gc)
    assert decoder.builds == 2
    assert first.shape == second.shape == (len(rows), 6)
    eos = [int(e) for e in (gc.eos_token_id if isinstance(gc.eos_token_id, list) else [gc.eos_token_id])]
    ends = [engine.cut_at_eos(row, eos) for row in first.tolist()]
    live = torch.tensor([[t < len(r) for t in range(6)] for r in ends])
    assert live.any() and (lp[live] <= 0).all()
    assert (lp[live] > torch.log(torch.tensor(1e-6))).all(), lp  # top-5 of a renormalised softmax: never tiny
