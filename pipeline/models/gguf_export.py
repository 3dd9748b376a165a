"""A merged model folder written as one GGUF file: the format llama.cpp, Ollama and LM Studio run.

Llama-architecture models (SmolLM, SmolLM2, Llama) and Qwen2 ones (Qwen2, Qwen2.5) with a byte-level BPE
tokenizer, as Q8_0 (8-bit, about half of F16's size, close to it in quality) or F16. The file holds what
llama.cpp needs to run the model alone: the weights under its tensor names (a Llama model's query and key
rows in its rotary layout), the shape, the tokenizer with its special tokens, and the chat template.

The tensors are read, converted and written one at a time, so a large model needs little memory beyond one
weight. The checks (`problem`, `pre_tokenizer`) read JSON only; torch and gguf are imported when a file
is written.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from pipeline.run_folder.runs import room_problem

# What the file holds: the choices the export offers, as a dropdown shows them.
OUT_TYPES = {"Q8_0": "Q8_0 (8-bit, smaller)", "F16": "F16 (16-bit, as trained)"}
OUT_TYPES_HELP = ("Q8_0 is about half the size of F16 and answers all but the same: the usual choice. F16 keeps "
                  "the weights as trained, for converting further (other quantizations with llama.cpp's tools).")
DEFAULT_OUT_TYPE = "Q8_0"

# The architectures written, as llama.cpp names them, and whether the query/key rows are re-laid for its rotary
# embedding (llama.cpp's Llama graph rotates interleaved pairs; transformers rotates halves).
ARCHITECTURES = {"llama": True, "qwen2": False}
ROPE_TYPES = ("default", None)  # scaled rotary embeddings (llama3, yarn, ...) would need keys this file lacks

# How llama.cpp splits text before BPE ("tokenizer.ggml.pre"), recognised from the tokenizer's own split rule.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
SPLIT_RULES = {LLAMA3_SPLIT: "llama-bpe", QWEN2_SPLIT: "qwen2"}
# The SmolLM tokenizer (SmolLM and SmolLM2 share it), known by its vocabulary: the bundled model's folder,
# converted from its GGUF, lost its digit-by-digit split rule, which llama.cpp calls "smollm".
SMOLLM_VOCAB_SHA256 = "d1f2ce856b324081"


MODEL_CONFIG = "config.json"  # a transformers model folder's shape


class GGUFError(ValueError):
    """A model that can't be written as GGUF here; the message says why and what to do instead."""


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def vocab_fingerprint(tokenizer_json: dict) -> str:
    """A short hash of a BPE tokenizer's vocabulary in id order.

    >>> ordered, shuffled = {"model": {"vocab": {"a": 0, "b": 1}}}, {"model": {"vocab": {"b": 1, "a": 0}}}
    >>> vocab_fingerprint(ordered) == vocab_fingerprint(shuffled)
    True
    """
    vocab = tokenizer_json.get("model", {}).get("vocab", {})
    ordered = "\n".join(token for token, _ in sorted(vocab.items(), key=lambda item: item[1]))
    return hashlib.sha256(ordered.encode("utf-8")).hexdigest()[:16]


def split_rules(pre: dict | None) -> list[dict]:
    """The pre-tokenizer's steps, a Sequence flattened."""
    if not pre:
        return []
    return [step for inner in pre.get("pretokenizers", []) for step in split_rules(inner)] if pre.get(
        "type") == "Sequence" else [pre]


def pre_tokenizer(tokenizer_json: dict) -> str | None:
    """llama.cpp's name for how this tokenizer splits text before BPE; None when it is not one known here.

    >>> split = {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False}
    >>> pre_tokenizer({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, {"type": "ByteLevel"}]}})
    'qwen2'
    >>> pre_tokenizer({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    ...     {"type": "Digits", "individual_digits": True}, {"type": "ByteLevel", "use_regex": True}]}})
    'smollm'
    >>> pre_tokenizer({"pre_tokenizer": {"type": "ByteLevel", "use_regex": True}}), pre_tokenizer({})
    ('gpt-2', None)
    """
    if vocab_fingerprint(tokenizer_json) == SMOLLM_VOCAB_SHA256:
        return "smollm"
    steps = split_rules(tokenizer_json.get("pre_tokenizer"))
    kinds = [step.get("type") for step in steps]
    if kinds == ["Split", "ByteLevel"]:
        return SPLIT_RULES.get(steps[0].get("pattern", {}).get("Regex"))
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and steps[1].get("use_regex", True):
        return "smollm"
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    return None


def problem(model_dir: Path) -> str | None:
    """Why the model in `model_dir` can't be written as GGUF here, in words; None when it can."""
    config = read_json(model_dir / MODEL_CONFIG)
    arch = config.get("model_type")
    if not config:
        return f"{model_dir} holds no transformers model (no {MODEL_CONFIG}): give a run's merged/ folder."
    if arch not in ARCHITECTURES:
        return (f"GGUF export writes Llama- and Qwen2-architecture models (SmolLM2, Qwen2.5, ...); this one is "
                f"'{arch}'. Export the zip instead, and convert its merged folder with llama.cpp's "
                "convert_hf_to_gguf.py.")
    rope = (config.get("rope_parameters") or config.get("rope_scaling") or {}).get("rope_type")
    if rope not in ROPE_TYPES:
        return (f"This model scales its rotary embedding ('{rope}'), which this GGUF export does not write. "
                "Export the zip instead, and convert its merged folder with llama.cpp's convert_hf_to_gguf.py.")
    tokenizer = read_json(model_dir / "tokenizer.json")
    model = tokenizer.get("model", {})
    if model.get("type") != "BPE" or model.get("byte_fallback") or tokenizer.get("decoder", {}).get(
            "type") != "ByteLevel":
        return ("GGUF export writes byte-level BPE tokenizers (GPT-2 style); this model's is not one. Export the "
                "zip instead, and convert its merged folder with llama.cpp's convert_hf_to_gguf.py.")
    if pre_tokenizer(tokenizer) is None:
        return ("This model's tokenizer splits text in a way this GGUF export does not know, and llama.cpp "
                "would tokenize it differently. Export the zip instead, and convert its merged folder with "
                "llama.cpp's convert_hf_to_gguf.py.")
    return None


# ---- tensors -----------------------------------------------------------------------------------


# Values a block holds and the bytes it takes, per stored type (Q8_0: 32 int8 values and their f16 scale).
BLOCK_BYTES = {"Q8_0": (32, 34), "F16": (1, 2), "F32": (1, 4)}
HEADER_ROOM = 64 * 2**20  # the tokenizer, chat template and tensor table, with room to spare


@dataclass(frozen=True)
class Tensor:
    """One weight as it goes into the file."""

    source: str  # its name in the safetensors files
    file: str  # the safetensors file that holds it
    name: str  # its name in the GGUF file
    shape: tuple[int, ...]
    out_type: str  # "Q8_0", "F16" or "F32"
    rotary_heads: int = 0  # > 0: re-lay the rows for llama.cpp's rotary layout, in this many heads

    @property
    def nbytes(self) -> int:
        """The bytes it takes in the file.

        >>> q = Tensor("w", "model.safetensors", "blk.0.attn_q.weight", (576, 576), "Q8_0")
        >>> q.nbytes, Tensor("n", "model.safetensors", "n", (576,), "F32").nbytes
        (352512, 2304)
        """
        block, size = BLOCK_BYTES[self.out_type]
        return math.prod(self.shape) // block * size


def type_problem(out_type: str) -> str | None:
    """Why `out_type` is not a type the export writes, in words; None when it is one."""
    return None if out_type in OUT_TYPES else f"Unknown GGUF type '{out_type}'; pick one of {', '.join(OUT_TYPES)}."


def tensor_type(name: str, shape: tuple[int, ...], out_type: str) -> str:
    """What a weight is stored as: vectors (norms, biases) stay F32, as llama.cpp keeps them; Q8_0 needs rows
    of a multiple of 32 values, else the weight is F16.

    >>> tensor_type("blk.0.attn_norm.weight", (576,), "Q8_0"), tensor_type("blk.0.attn_q.weight", (576, 576), "Q8_0")
    ('F32', 'Q8_0')
    >>> tensor_type("blk.0.attn_q.weight", (10, 20), "Q8_0"), tensor_type("token_embd.weight", (9, 64), "F16")
    ('F16', 'F16')
    """
    if len(shape) < 2:
        return "F32"
    if out_type == "Q8_0" and shape[-1] % 32:
        return "F16"
    return out_type


def rotary_heads(name: str, config: dict) -> int:
    """For a Llama model's query and key weights, the head count to re-lay their rows by; 0 for the rest."""
    if not ARCHITECTURES.get(config.get("model_type")) or not name.endswith("weight"):
        return 0
    heads = int(config["num_attention_heads"])
    if ".attn_q." in name:
        return heads
    if ".attn_k." in name:
        return int(config.get("num_key_value_heads") or heads)
    return 0


def relay_rotary(weight, heads: int):
    """A query or key weight's rows re-laid from transformers' rotary layout (each head's first half, then its
    second) to llama.cpp's (the two halves interleaved), as its Llama graph expects. numpy in, numpy out.

    >>> import numpy as np
    >>> relay_rotary(np.arange(8).reshape(8, 1), 2).ravel().tolist()  # two heads of 4 rows: 0 1 | 2 3 -> 0 2 1 3
    [0, 2, 1, 3, 4, 6, 5, 7]
    """
    rows = weight.shape[0]
    return (weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def safetensors_shapes(model_dir: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each weight's file and shape, read from the safetensors headers (no weight is loaded)."""
    index = read_json(model_dir / "model.safetensors.index.json")
    files = sorted(set(index.get("weight_map", {}).values())) or ["model.safetensors"]
    shapes = {}
    for file in files:
        path = model_dir / file
        if not path.is_file():
            raise GGUFError(f"The merged model is missing {file}. Train or resume the run to write it again.")
        with open(path, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(size))
        for name, entry in header.items():
            if name != "__metadata__":
                shapes[name] = (file, tuple(entry["shape"]))
    return shapes


def plan(model_dir: Path, out_type: str) -> list[Tensor]:
    """Every weight of the model, in file order, with its GGUF name and type."""
    import gguf

    config = read_json(model_dir / MODEL_CONFIG)
    arch = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2}[config["model_type"]]
    names = gguf.get_tensor_name_map(arch, int(config["num_hidden_layers"]))
    tensors = []
    for source, (file, shape) in safetensors_shapes(model_dir).items():
        if source == "lm_head.weight" and config.get("tie_word_embeddings"):
            continue  # the output layer is the embedding, as the file says by having no output.weight
        name = names.get_name(source, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise GGUFError(f"The merged model has a weight GGUF export does not know ('{source}'). Export the "
                            "zip instead, and convert it with llama.cpp's convert_hf_to_gguf.py.")
        tensors.append(Tensor(source, file, name, shape, tensor_type(name, shape, out_type),
                              rotary_heads(name, config)))
    return tensors


def weights(model_dir: Path, tensors: list[Tensor]) -> Iterator[tuple[Tensor, object]]:
    """Each planned weight as float32 numpy, converted to what the file stores (bytes for Q8_0)."""
    import gguf
    import numpy as np
    from safetensors import safe_open

    handles: dict = {}
    try:
        for tensor in tensors:
            if tensor.file not in handles:
                handles[tensor.file] = safe_open(str(model_dir / tensor.file), framework="pt")
            data = handles[tensor.file].get_tensor(tensor.source).float().numpy()
            if tensor.rotary_heads:
                data = relay_rotary(data, tensor.rotary_heads)
            if tensor.out_type == "Q8_0":
                data = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            else:
                data = data.astype(np.float16 if tensor.out_type == "F16" else np.float32)
            yield tensor, np.ascontiguousarray(data)
    finally:
        handles.clear()


# ---- the file ----------------------------------------------------------------------------------


def add_shape(writer, config: dict) -> None:
    """The model's shape, under the architecture's keys."""
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    writer.add_context_length(int(config.get("max_position_embeddings") or 2048))
    writer.add_embedding_length(hidden)
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(int(config.get("num_key_value_heads") or heads))
    rope = config.get("rope_parameters") or {}
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_vocab_size(int(config["vocab_size"]))
    writer.add_rope_dimension_count(int(config.get("head_dim") or hidden // heads))


def add_tokenizer(writer, model_dir: Path, vocab_size: int) -> None:
    """The tokenizer: its tokens in id order (ids the model has beyond the tokenizer's are padding, as
    llama.cpp writes them), their kinds, the merges, the special tokens and the chat template."""
    import gguf

    tokenizer = read_json(model_dir / "tokenizer.json")
    vocab = dict(tokenizer["model"]["vocab"])
    added = {entry["id"]: entry for entry in tokenizer.get("added_tokens", [])}
    vocab.update({entry["content"]: token_id for token_id, entry in added.items()})
    by_id = {token_id: token for token, token_id in vocab.items()}
    tokens, kinds = [], []
    for token_id in range(max(vocab_size, max(by_id) + 1)):
        if token_id not in by_id:
            tokens.append(f"[PAD{token_id}]")
            kinds.append(gguf.TokenType.UNUSED)
        elif token_id in added:
            tokens.append(by_id[token_id])
            kinds.append(gguf.TokenType.CONTROL if added[token_id].get("special") else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[token_id])
            kinds.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre_tokenizer(tokenizer))
    writer.add_token_list(tokens)
    writer.add_token_types(kinds)
    special = gguf.SpecialVocab(model_dir, load_merges=True, n_vocab=len(tokens))
    special.add_to_gguf(writer, quiet=True)
    if "bos" not in special.add_special_token:
        # transformers' byte-level BPE tokenizers add no BOS unless their config says so; llama.cpp would.
        writer.add_add_bos_token(False)


def write(model_dir: str | Path, out_path: str | Path, out_type: str = DEFAULT_OUT_TYPE, name: str = "",
          on_progress: Callable[[float], None] = lambda done: None) -> Path:
    """Write the merged model in `model_dir` as a GGUF file at `out_path` (through a temporary file beside it,
    so a failed export leaves nothing half-written); returns the path. `on_progress` gets the share done."""
    import gguf
    import numpy as np

    model_dir, out_path = Path(model_dir), Path(out_path)
    if (found := type_problem(out_type) or problem(model_dir)) is not None:
        raise GGUFError(found)
    config = read_json(model_dir / MODEL_CONFIG)
    tensors = plan(model_dir, out_type)
    need = sum(tensor.nbytes for tensor in tensors) + HEADER_ROOM
    also = "or pick Q8_0 (about half the size of F16)" if out_type == "F16" else ""
    if (found := room_problem(need, out_path.parent, f"The {out_type} file needs", also)) is not None:
        raise GGUFError(found)
    tmp = out_path.with_name(f".{out_path.name}.tmp")
    writer = gguf.GGUFWriter(tmp, config["model_type"])
    try:
        writer.add_type("model")
        writer.add_name(name or model_dir.name)
        writer.add_file_type({"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "F16": gguf.LlamaFileType.MOSTLY_F16}[out_type])
        if out_type == "Q8_0":
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        add_shape(writer, config)
        add_tokenizer(writer, model_dir, int(config["vocab_size"]))
        for tensor in tensors:
            # With raw_dtype given, the writer takes the shape as it is and only asks the dtype whether it is bytes.
            writer.add_tensor_info(tensor.name, tensor.shape, np.dtype(np.float32), tensor.nbytes,
                                   raw_dtype=gguf.GGMLQuantizationType[tensor.out_type])
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for done, (_, data) in enumerate(weights(model_dir, tensors), start=1):
            writer.write_tensor_data(data)
            on_progress(done / len(tensors))
        writer.close()
        os.replace(tmp, out_path)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    return out_path


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline.models.gguf_export MODEL_DIR OUT.gguf [--type Q8_0|F16]`: a transformers model folder
    (a run's merged/ folder, for one) as a GGUF file."""
    import argparse

    parser = argparse.ArgumentParser(description="Write a transformers model folder as one GGUF file.")
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--type", default=DEFAULT_OUT_TYPE, choices=list(OUT_TYPES), help=OUT_TYPES_HELP)
    args = parser.parse_args(argv)
    try:
        path = write(args.model_dir, args.out, args.type)
    except GGUFError as exc:
        print(f"gguf_export: {exc}")
        return 2
    print(f"wrote {path} ({path.stat().st_size / 2**20:,.0f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
