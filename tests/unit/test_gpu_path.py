"""The GPU path, checked on a CPU: settings that would crash or corrupt on a GPU are refused before
launch, vespo + vLLM gets a mode TRL accepts, a GPU box whose torch can't use the GPU says so in the run
header, Resume and Evaluate free the app's GPU models, and Show command pins one process to one GPU."""

import pytest

from pipeline.setup.config import RunConfig
from pipeline.models.loading import runtime_problems


def test_qlora_with_vllm_is_refused_with_the_reason():
    problems = RunConfig(load_in_4bit=True, use_vllm=True).problems()
    assert any("#4973" in p and "4-bit" in p for p in problems), problems
    assert not any("#4973" in p for p in RunConfig(load_in_4bit=True).problems())
    assert not any("#4973" in p for p in RunConfig(use_vllm=True).problems())


def test_qlora_with_fp16_is_refused_in_the_config_and_when_auto_picks_fp16():
    assert any("fp16 is refused" in p for p in RunConfig(load_in_4bit=True, precision="fp16").problems())
    assert not RunConfig(load_in_4bit=True, precision="bf16").problems()
    # auto on a card older than Ampere resolves to fp16: refused once the machine is known
    found = runtime_problems(RunConfig(load_in_4bit=True), "cuda", lambda m: True, precision="fp16")
    assert found and "auto picked fp16" in found[0]
    assert not runtime_problems(RunConfig(load_in_4bit=True), "cuda", lambda m: True, precision="bf16")


def test_qlora_help_says_the_lora_weights_are_bf16():
    from ui.form import form_fields

    shown = {f.name: f.metadata["help"] for f in form_fields()}  # what the Train form puts under each field
    assert "bf16" in shown["load_in_4bit"]
    assert "except with QLoRA: bf16" in shown["precision"]


def test_vllm_tensor_parallel_larger_than_the_gpus_is_refused():
    cfg = RunConfig(use_vllm=True, vllm_tensor_parallel_size=4)
    found = runtime_problems(cfg, "cuda", lambda m: True, gpus=2)
    assert found and "this machine has 2 GPUs" in found[0]
    assert not runtime_problems(cfg, "cuda", lambda m: True, gpus=4)
    assert runtime_problems(cfg, "cuda", lambda m: True, processes=2)  # the trainer: must divide the processes


def test_vespo_with_vllm_gets_a_mode_vespo_accepts(tmp_path):
    from pipeline.training.grpo_trainer import grpo_args, trainer_refusals

    args = grpo_args(RunConfig(use_vllm=True, loss_type="vespo"), tmp_path, "cpu", "fp32")
    assert args.vllm_importance_sampling_mode in ("token_truncate", "token_mask")
    assert trainer_refusals(args) == []
    assert grpo_args(RunConfig(use_vllm=True), tmp_path, "cpu", "fp32").vllm_importance_sampling_mode == "sequence_mask"


def _tiny_trainer_parts():
    from datasets import Dataset
    from peft import LoraConfig
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "a", "b", "c"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="a"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    model = LlamaForCausalLM(LlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    return dict(model=model, processing_class=tokenizer, train_dataset=Dataset.from_list([{"prompt": "a b"}] * 8),
                reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                peft_config=LoraConfig(r=2, target_modules="all-linear"))


def test_trls_trainer_accepts_our_vespo_vllm_args_and_refuses_what_trainer_refusals_names(tmp_path, monkeypatch):
    """TRL's own GRPOTrainer, on a tiny model: with the studio's arguments it gets past its vespo rule (and on to
    building vLLM, stubbed here); with TRL's default mode it refuses in the words `trainer_refusals` gives."""
    import trl.trainer.grpo_trainer as grpo_trainer

    from pipeline.training.grpo_trainer import grpo_args, trainer_refusals

    class VLLMReached(Exception):
        pass

    def no_vllm(*args, **kwargs):
        raise VLLMReached

    monkeypatch.setattr(grpo_trainer, "VLLMGeneration", no_vllm)
    args = grpo_args(RunConfig(use_vllm=True, loss_type="vespo"), tmp_path, "cpu", "fp32")
    with pytest.raises(VLLMReached):
        grpo_trainer.GRPOTrainer(args=args, **_tiny_trainer_parts())
    args.vllm_importance_sampling_mode = "sequence_mask"  # TRL's default
    with pytest.raises(ValueError) as refused:
        grpo_trainer.GRPOTrainer(args=args, **_tiny_trainer_parts())
    assert trainer_refusals(args) == [str(refused.value)]


def test_preflight_catches_what_the_trainer_would_refuse(monkeypatch):
    """Pre-flight builds GRPOConfig and asks the trainer's rules even for GPU settings on a CPU machine."""
    import pipeline.training.grpo_trainer
    from pipeline.training.preflight import trainer_check

    check = trainer_check(RunConfig(use_vllm=True, loss_type="vespo"))
    assert "needs a CUDA GPU" in check.message and "TRL refuses" not in check.message
    monkeypatch.setattr(pipeline.training.grpo_trainer, "vllm_importance_sampling_mode", lambda loss_type: "sequence_mask")
    check = trainer_check(RunConfig(use_vllm=True, loss_type="vespo"))
    assert not check.ok and "TRL refuses these GRPO settings: VESPO loss requires" in check.message


def test_a_gpu_box_with_a_cpu_torch_says_so_in_the_run_header(tmp_path, monkeypatch):
    import torch

    import pipeline.models.loading
    from pipeline.run_folder import runs
    from pipeline.train import set_up_runtime
    from ui.views import progress_html

    if torch.cuda.is_available():
        pytest.skip("this machine's torch sees a GPU")
    monkeypatch.setattr(pipeline.models.loading, "nvidia_driver_present", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    threads = torch.get_num_threads()
    try:
        set_up_runtime(RunConfig(), tmp_path, main=True)
    finally:
        torch.set_num_threads(threads)
    status = runs.read_status(tmp_path)
    assert status["device"] == "cpu" and "CPU build" in status["device_warning"], status
    assert "CPU build" in progress_html("run", status, [], 16)
    monkeypatch.setattr(pipeline.models.loading, "nvidia_driver_present", lambda: False)
    set_up_runtime(RunConfig(), tmp_path, main=True)
    torch.set_num_threads(threads)
    assert runs.read_status(tmp_path)["device_warning"] is None


def test_a_gpu_run_attends_without_cudnn_kernels_and_a_cpu_run_leaves_attention_alone(tmp_path, monkeypatch):
    """cuDNN's attention builds a plan per new sequence length, which a GRPO step meets in every pass: a run on a
    GPU turns those kernels off when it sets up; a CPU run changes nothing."""
    import torch

    import pipeline.models.loading
    from pipeline.train import set_up_runtime as set_up

    enabled, threads = torch.backends.cuda.cudnn_sdp_enabled(), torch.get_num_threads()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        monkeypatch.setattr(pipeline.models.loading, "pick_device", lambda: "cpu")
        set_up(RunConfig(), tmp_path, main=False)
        assert torch.backends.cuda.cudnn_sdp_enabled()
        monkeypatch.setattr(pipeline.models.loading, "pick_device", lambda: "cuda")
        monkeypatch.setattr(pipeline.models.loading, "resolve_precision", lambda precision, device: "bf16")
        monkeypatch.setattr(pipeline.models.loading, "runtime_problems", lambda *args, **kwargs: [])
        set_up(RunConfig(), tmp_path, main=False)
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(enabled)
        torch.set_num_threads(threads)


@pytest.fixture
def gpu_handlers(monkeypatch, tmp_path):
    """The Runs panel's handlers on a pretend one-GPU box, with launches stubbed and the release calls recorded."""
    import pipeline.training.generate
    import retrieval.embedder
    import ui.runs_panel

    released = []
    monkeypatch.setattr(ui.runs_panel, "gpu_count", lambda: 1)
    monkeypatch.setattr(ui.runs_panel, "run_path", lambda name: tmp_path)
    monkeypatch.setattr(ui.runs_panel.runner, "start", lambda *a, **k: None)  # resume and evaluate launch nothing
    monkeypatch.setattr(pipeline.training.generate, "release_models", lambda: released.append("chat models"))
    monkeypatch.setattr(retrieval.embedder, "release_embedders", lambda: released.append("embedders"))
    return ui.runs_panel, released


def test_resume_frees_the_apps_gpu_models(gpu_handlers):
    handlers, released = gpu_handlers
    handlers.resume_training("run", False)
    assert released == ["chat models", "embedders"]


def test_evaluate_frees_the_apps_gpu_models(gpu_handlers):
    handlers, released = gpu_handlers
    handlers.evaluate_run("run")
    assert released == ["chat models", "embedders"]


def test_nothing_is_released_without_a_gpu(gpu_handlers, monkeypatch):
    handlers, released = gpu_handlers
    monkeypatch.setattr(handlers, "gpu_count", lambda: 0)
    handlers.resume_training("run", False)
    handlers.evaluate_run("run")
    assert released == []


def test_show_command_pins_one_process_to_one_gpu_on_a_multi_gpu_box(monkeypatch):
    import ui.train_form
    from ui.form import config_to_form

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(ui.train_form, "gpu_count", lambda: 2)
    text = ui.train_form.show_command(False, 1, **config_to_form(RunConfig()))
    one_process = next(line for line in text.splitlines() if "-m pipeline.train" in line and "torch.distributed" not in line)
    assert one_process.startswith("CUDA_VISIBLE_DEVICES=0 "), text
    torchrun = next(line for line in text.splitlines() if "torch.distributed.run" in line)
    assert "CUDA_VISIBLE_DEVICES" not in torchrun
    monkeypatch.setattr(ui.train_form, "gpu_count", lambda: 1)
    assert "CUDA_VISIBLE_DEVICES" not in ui.train_form.show_command(False, 1, **config_to_form(RunConfig()))


def test_top_k_reaches_the_trainer_as_set_and_zero_means_every_token(tmp_path):
    """0 must turn top-k off: passed on as None, transformers would sample from its default top 50."""
    from pipeline.training.grpo_trainer import grpo_args

    assert grpo_args(RunConfig(), tmp_path, "cpu", "fp32").top_k == 50  # the default, said out loud
    assert grpo_args(RunConfig(top_k=0), tmp_path, "cpu", "fp32").top_k == 0
    assert grpo_args(RunConfig(top_k=7), tmp_path, "cpu", "fp32").top_k == 7
