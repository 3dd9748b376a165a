"""GGUF export on real models: a Llama and a Qwen2 model written as GGUF and read back by transformers' GGUF
loader (which reads what llama.cpp writes) give the same logits; the bundled model's file carries the tokenizer,
shape and tensors that llama.cpp's own converter wrote into the GGUF the bundled model ships as; a finished run's
GGUF generates what its merged model does."""

import importlib.util
from pathlib import Path

import pytest

from pipeline.models import gguf_export
from pipeline.run_folder.paths import BUNDLED_GGUF, BUNDLED_PACKAGE

pytestmark = pytest.mark.slow

PROMPT = "Summarize: the cat sat on the mat because it was warm, and 12 dogs watched it."


def tiny_tokenizer(target: Path):
    """A byte-level BPE tokenizer of a few hundred tokens, trained here, with ChatML's two special tokens: small,
    so a file of it reads back in a second. Not the SmolLM one, so llama.cpp's "gpt-2" split rule is written."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([PROMPT] * 4, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|im_start|>", eos_token="<|im_end|>",
                            pad_token="<|im_end|>").save_pretrained(target)
    return len(tokenizer.get_vocab())


def tiny(target: Path, arch: str) -> Path:
    """A two-layer model of `arch` with random weights (biased queries and keys for Qwen2; an output layer of
    its own for Llama) and a small tokenizer, with 4 ids more than the tokenizer has (padding, as Qwen models have)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    vocab = tiny_tokenizer(target) + 4
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=vocab, max_position_embeddings=512)
    config = Qwen2Config(**shape, tie_word_embeddings=True) if arch == "qwen2" else LlamaConfig(
        **shape, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                if proj.bias is not None:
                    proj.bias.normal_()
    model.save_pretrained(target)
    return target


def logits(model, tokenizer):
    import torch

    with torch.no_grad():
        return model(**tokenizer(PROMPT, return_tensors="pt")).logits[0]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_written_file_reads_back_with_the_same_logits(tmp_path, arch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = tiny(tmp_path / arch, arch)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    want = logits(AutoModelForCausalLM.from_pretrained(model_dir), tokenizer)
    for out_type, tolerance in (("F16", 0.005), ("Q8_0", 0.05)):
        path = gguf_export.write(model_dir, tmp_path / f"{arch}-{out_type}.gguf", out_type)
        got = logits(AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name), tokenizer)
        assert (got - want).abs().max().item() < tolerance * want.abs().max().item(), (arch, out_type)
    tokens, kinds = fields(path)[0]["tokenizer.ggml.tokens"], fields(path)[0]["tokenizer.ggml.token_type"]
    assert fields(path)[0]["tokenizer.ggml.pre"] == "gpt-2" and len(tokens) == want.shape[-1]
    assert tokens[-1] == f"[PAD{want.shape[-1] - 1}]".encode() and kinds[-4:] == [[5]] * 4  # unused ids


def fields(path: Path) -> dict:
    """A GGUF file's metadata as Python values (arrays as lists), and its tensors' names and shapes."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    out = {}
    for key, field in reader.fields.items():
        if field.types and field.types[0] == gguf.GGUFValueType.ARRAY:
            out[key] = [bytes(field.parts[i]) if field.types[-1] == gguf.GGUFValueType.STRING
                        else field.parts[i].tolist() for i in field.data]
        else:
            out[key] = field.contents()
    return out, {t.name: tuple(int(d) for d in t.shape) for t in reader.tensors}


def test_the_bundled_model_is_written_as_llama_cpp_wrote_it(bundled_model_dir, tmp_path):
    shipped = Path(importlib.util.find_spec(BUNDLED_PACKAGE).submodule_search_locations[0]) / BUNDLED_GGUF
    theirs, their_tensors = fields(shipped)
    path = gguf_export.write(bundled_model_dir, tmp_path / "bundled.gguf", "Q8_0")
    ours, our_tensors = fields(path)
    # Everything llama.cpp reads to run the model is the same: the tokenizer (tokens, their kinds, merges,
    # special ids, the split rule, the chat template) and the shape. What differs describes the file: its name,
    # its type, the publisher's details.
    differ = {key for key in theirs.keys() & ours.keys() if theirs[key] != ours[key]}
    assert differ == {"GGUF.kv_count", "general.name", "general.file_type"}, differ
    assert {key for key in theirs if key not in ours} <= {
        "general.basename", "general.finetune", "general.languages", "general.license", "general.organization",
        "general.size_label", "tokenizer.ggml.add_space_prefix"}
    assert ours["tokenizer.ggml.pre"] == "smollm" and len(ours["tokenizer.ggml.tokens"]) == 49152
    assert our_tensors == their_tensors


def test_a_finished_run_exports_a_gguf_that_generates_what_its_merged_model_does(shared_run):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline import export
    from pipeline.run_folder import run_files
    from pipeline.run_folder.paths import data_dir

    merged = run_files.merged_model(shared_run.path)
    seen = []
    path = Path(export.export_gguf(shared_run.path, "F16", on_progress=seen.append))
    assert path.parent == data_dir() / "exports" and path.name == f"{shared_run.path.name}-F16.gguf"
    assert seen[-1] == 1.0 and seen == sorted(seen)
    assert not list(path.parent.glob(".*.tmp"))
    tokenizer = AutoTokenizer.from_pretrained(merged)
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    answers = []
    for model in (AutoModelForCausalLM.from_pretrained(merged),
                  AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)):
        with torch.no_grad():
            answers.append(model.eval().generate(**inputs, max_new_tokens=16, do_sample=False)[0].tolist())
    assert answers[0] == answers[1]


def test_a_checkpoint_exports_as_its_adapter_merged_into_the_base_once(shared_run):
    import zipfile

    from safetensors import safe_open

    from pipeline import export
    from pipeline.run_folder import run_files

    merged_zip, adapter_zip = export.export_zips(shared_run.path, step=1)
    assert Path(merged_zip).name == f"{shared_run.path.name}-step1-merged.zip"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(zipfile.ZipFile(merged_zip).namelist())
    # The adapter PEFT loads, without the optimizer state the checkpoint keeps for a resume.
    assert set(zipfile.ZipFile(adapter_zip).namelist()) <= set(export.ADAPTER_FILES)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(zipfile.ZipFile(adapter_zip).namelist())
    folder = Path(merged_zip).with_suffix("")
    made = (folder / "model.safetensors").stat().st_mtime_ns
    path = Path(export.export_gguf(shared_run.path, "Q8_0", step=1))
    assert path.name == f"{shared_run.path.name}-step1-Q8_0.gguf" and path.stat().st_size > 0
    assert (folder / "model.safetensors").stat().st_mtime_ns == made  # merged once, reused by the GGUF
    # Step 1's model, not the final one: the first layer's query weights differ.
    name = "model.layers.0.self_attn.q_proj.weight"
    step1, final = (safe_open(str(d / "model.safetensors"), "pt").get_tensor(name)
                    for d in (folder, run_files.merged_model(shared_run.path)))
    assert not step1.equal(final)


def test_an_export_that_would_not_fit_on_the_disk_is_refused_before_a_byte_is_written(shared_run, monkeypatch):
    import shutil as shell

    from pipeline import export
    from pipeline.run_folder.paths import data_dir

    before = set((data_dir() / "exports").glob("*"))
    real = shell.disk_usage
    monkeypatch.setattr(shell, "disk_usage", lambda path: real(path)._replace(free=100 * 2**20))  # 100 MiB free
    with pytest.raises(export.ExportError, match=r"The F16 file needs about 0\.3 GiB and .* has 0\.1 GiB free\. "
                                                 r"Free some space .* or pick Q8_0"):
        export.export_gguf(shared_run.path, "F16")
    with pytest.raises(export.ExportError, match=r"The zips need about 0\.5 GiB and .* has 0\.1 GiB free"):
        export.export_zips(shared_run.path)
    assert set((data_dir() / "exports").glob("*")) == before


def test_a_write_that_fails_leaves_no_file_and_says_why(bundled_model_dir, shared_run, tmp_path, monkeypatch):
    import errno
    import zipfile

    from pipeline import export
    from pipeline.run_folder.paths import data_dir

    def broken(model_dir, tensors):
        yield from []
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gguf_export, "weights", broken)
    with pytest.raises(OSError, match="No space left"):
        gguf_export.write(bundled_model_dir, tmp_path / "out.gguf")
    assert list(tmp_path.iterdir()) == []
    # Through the app: the export says so in words, and leaves no half-written file in data/exports.
    before = set((data_dir() / "exports").glob("*"))
    with pytest.raises(export.ExportError, match="Could not write the export: No space left on device. Free some"):
        export.export_gguf(shared_run.path, "F16")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "write", full)
    with pytest.raises(export.ExportError, match="Could not write the export: No space left on device"):
        export.export_zips(shared_run.path)
    assert set((data_dir() / "exports").glob("*")) == before
