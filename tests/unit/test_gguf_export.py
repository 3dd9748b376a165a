"""GGUF export's checks, read from a model folder's JSON alone: what it writes, what it refuses and why."""

import json

import pytest

from pipeline import export
from pipeline.models import gguf_export
from pipeline.models.gguf_export import GGUFError, problem

BPE = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}, "decoder": {"type": "ByteLevel"},
       "pre_tokenizer": {"type": "ByteLevel", "use_regex": True}}


def folder(tmp_path, config=None, tokenizer=None):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **(config or {})}))
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer or BPE))
    return tmp_path


def test_llama_and_qwen2_with_a_byte_level_bpe_tokenizer_can_be_written(tmp_path):
    assert problem(folder(tmp_path)) is None
    assert problem(folder(tmp_path, {"model_type": "qwen2", "rope_parameters": {"rope_type": "default"}})) is None


@pytest.mark.parametrize("config, tokenizer, says", [
    ({"model_type": "gemma3"}, None, "this one is 'gemma3'"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}}, None, "scales its rotary embedding ('llama3')"),
    ({}, {**BPE, "model": {"type": "Unigram", "vocab": []}}, "byte-level BPE"),
    ({}, {**BPE, "model": {**BPE["model"], "byte_fallback": True}}, "byte-level BPE"),
    ({}, {**BPE, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\d+"}}}, "splits text in a way"),
])
def test_what_it_can_not_write_is_refused_with_what_to_do_instead(tmp_path, config, tokenizer, says):
    found = problem(folder(tmp_path, config, tokenizer))
    assert says in found and "convert_hf_to_gguf.py" in found and "Export the zip instead" in found
    with pytest.raises(GGUFError, match="convert_hf_to_gguf"):
        gguf_export.write(tmp_path, tmp_path / "out.gguf")
    assert not list(tmp_path.glob("*out.gguf*"))  # nothing half-written


def test_an_unknown_type_a_folder_without_a_model_and_a_run_without_a_merged_model_are_refused(tmp_path):
    assert "holds no transformers model (no config.json)" in problem(tmp_path)
    with pytest.raises(GGUFError, match="pick one of Q8_0, F16"):
        gguf_export.write(folder(tmp_path), tmp_path / "out.gguf", "Q4_K")
    with pytest.raises(export.ExportError, match="has no final model yet: pick one of its checkpoints"):
        export.export_gguf(tmp_path)
    with pytest.raises(export.ExportError, match="Checkpoint 3 of .* is missing or incomplete"):
        export.export_gguf(tmp_path, step=3)
    with pytest.raises(export.ExportError, match="Pick a run's tuned model"):
        export.export_gguf(None)
    with pytest.raises(export.ExportError, match="Unknown GGUF type '../../x'"):  # a type never names a file
        export.export_gguf(tmp_path, "../../x")


def test_the_run_commands_quote_the_file_and_name_the_ollama_model_after_the_run():
    text = export.gguf_snippet("20261127-101500-my-run-Q8_0.gguf")
    assert "llama-cli -m 20261127-101500-my-run-Q8_0.gguf -cnv" in text
    assert "echo 'FROM ./20261127-101500-my-run-Q8_0.gguf' > Modelfile" in text
    assert "ollama create grpo-20261127-101500-my-run -f Modelfile" in text
    assert "llama-cli -m 'odd name;rm-F16.gguf'" in export.gguf_snippet("odd name;rm-F16.gguf")
