"""Typed run configuration: what the Train form and the CLI turn into before anything runs.

Pure Python (no torch, no gradio) so it loads fast and tests fast. Each field carries its
help text in `metadata["help"]`; a field the Train form shows also carries its label and, for a
dropdown, its choices (`_form`), and the form is built from them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.models.loading import BUNDLED_LABEL, QLORA_FP16  # one wording, also used once the machine is known
from pipeline.setup.fields import _form, _help, range_problem
from pipeline.run_folder.paths import BUNDLED_MODEL_ID  # also imported from here by the tabs and tests
from pipeline.models.sources import SourceRefused, check_source

LOSS_TYPES = ("dapo", "grpo", "bnpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo")  # TRL 1.16's
SCALE_REWARDS = ("group", "batch", "none")
IS_LEVELS = ("token", "sequence")
LR_SCHEDULERS = ("constant_with_warmup", "linear", "cosine", "constant")
REPORT_TO = ("none", "tensorboard", "trackio")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
GENERATION_ENGINES = ("auto", "static", "eager")
DATASET_SOURCES = ("tldr", "arithmetic", "movies", "file", "hub")
REWARD_ERROR_POLICIES = ("fail", "skip")


# Refused by RunConfig.problems(): why, and what to turn off (a refused upload's, also by pipeline/setup/data.py).
QLORA_VLLM = ("4-bit QLoRA with vLLM crashes at the first weight sync: TRL hands vLLM the packed 4-bit tensors, "
              "whose shapes vLLM can't load (TRL issue #4973, open). Turn one off: QLoRA samples with transformers, "
              "or vLLM serves the full-precision model.")
NO_PROMPTS_FILE = ("No prompts file yet: upload a CSV, TSV, JSONL or JSON file with a prompt column "
                   "(in config.json, dataset.path).")


class ConfigError(ValueError):
    """A run configuration that cannot run. The message says what to change."""


@dataclass
class RewardSpec:
    """One reward function in the run, with its weight and parameters."""

    name: str = field(metadata=_help("Registered reward name, e.g. 'length_target'."))
    weight: float = field(default=1.0, metadata=_help(
        "Multiplier applied before rewards are summed. 0 makes the reward a monitor: scored, charted and shown "
        "in the group inspector, but left out of the advantage (watch for a trained reward gaming it)."))
    params: dict[str, Any] = field(default_factory=dict, metadata=_help("Reward-specific parameters."))


@dataclass
class DatasetSpec:
    """Where the prompts come from."""

    source: str = field(default="tldr", metadata=_help("tldr, arithmetic, movies (bundled), file (CSV/JSONL) or hub."))
    path: str = field(default="", metadata=_help("CSV or JSONL file, for source=file."))
    prompt_column: str = field(default="prompt", metadata=_help("Column holding the prompt text (or chat messages)."))
    answer_column: str = field(default="", metadata=_help("Optional column with the reference answer."))
    system_prompt: str = field(default="", metadata=_help("Optional system message put before every prompt."))
    hub_id: str = field(default="", metadata=_help("Hub dataset id, for source=hub (needs network)."))
    hub_config: str = field(default="", metadata=_help(
        "Configuration (subset) of the hub dataset, e.g. 'main' for openai/gsm8k; empty when it has only one."))
    hub_split: str = field(default="train", metadata=_help("Split of the hub dataset."))
    limit: int = field(default=0, metadata=_help("Use at most this many rows (0 = all)."))
    eval_fraction: float = field(
        default=0.1, metadata=_help("Share of rows held out for evaluation; they are never trained on.")
    )

    def problems(self) -> list[str]:
        """Why these prompts can't be read, before anything is (pre-flight lists them as the dataset's)."""
        out = []
        if self.source not in DATASET_SOURCES:
            out.append(f"Unknown dataset source '{self.source}'. Choose one of: {', '.join(DATASET_SOURCES)}.")
        if self.source == "file" and not self.path.strip():
            out.append(NO_PROMPTS_FILE)
        if self.source == "hub" and not self.hub_id.strip():
            out.append("No hub dataset id yet: type one such as 'mlabonne/smoltldr'.")
        elif self.source == "hub":
            out.extend(_source_problems(self.hub_id, "dataset"))
        if not 0 <= self.eval_fraction < 0.9:
            out.append("eval_fraction must be between 0 and 0.9.")
        if self.limit < 0:
            out.append("limit cannot be negative (0 means all rows).")
        return out


@dataclass
class RunConfig:
    """Everything one GRPO run needs. Defaults are a quick CPU demo on the bundled model.

    The Train form is built from this class: a field whose metadata comes from `_form(label, help, choices)`
    gets a component (in the order below, under "All settings"), and its value comes back into the config by
    name. A new setting is one field here.
    """

    model: str = field(
        default=BUNDLED_MODEL_ID,
        metadata=_help("Catalog id, hub id or local folder. The bundled model works offline."),
    )
    dataset: DatasetSpec = field(default_factory=DatasetSpec)
    rewards: list[RewardSpec] = field(
        # The GRPO recipe's pair (a length target and token diversity) plus post_similarity: with the pair
        # alone the model learns to be short, not to summarise; at weight 2 post_similarity keeps meaning ahead
        # of length (the weights tried: bench/results/README.md). Empty params: each reward runs with its
        # class's defaults (the rewards table shows them).
        default_factory=lambda: [
            RewardSpec("length_target", 1.0, {}),
            RewardSpec("token_diversity", 1.0, {}),
            RewardSpec("post_similarity", 2.0, {}),
        ],
        metadata=_help("Reward functions and weights; their weighted sum is the reward GRPO normalizes."),
    )

    # GRPO: the knobs most runs change, first in the form
    num_generations: int = field(default=4, metadata=_form(
        "Group size G", "G: completions sampled per prompt (the group).", minimum=2,
        range_error="Group size G must be at least 2: advantages compare completions within a group."))
    batch_size: int = field(
        default=16,
        metadata=_form("Batch (completions / step)",
                       "Completions per device per step; a multiple of G (prompts per step = batch / G). The more "
                       "completions a step samples, the likelier one of them finds what the rewards want, so the demo "
                       "takes 4 prompts a step; fewer learn less reliably. Halve it (and the step time) to try a "
                       "setting quickly.",
                       minimum=1),
    )
    max_steps: int = field(default=11, metadata=_form(
        "Steps", "Optimizer steps to run. 11 steps of 4 prompts keep the CPU demo within about five minutes on 2 "
        "cores; more steps learn more when you have the time.", minimum=1))
    learning_rate: float = field(
        default=3e-4,
        metadata=_form("Learning rate",
                       "How far each step moves the LoRA weights. LoRA starts at zero and the demo is short, so it "
                       "takes 3e-4; use about 5e-5 for long runs, and lower it if KL climbs past 0.5.",
                       above=0, below=1,
                       range_error="Learning rate {value} is out of range; try 5e-5 for LoRA."),
    )
    beta: float = field(
        default=0.04,
        metadata=_form("beta (KL weight)",
                       "KL penalty weight (DeepSeekMath uses 0.04). 0 turns KL off and it is no longer logged.",
                       minimum=0),
    )
    epsilon: float = field(default=0.2, metadata=_form(
        "epsilon (clip)", "PPO clip range: the ratio is clipped to [1-eps, 1+eps].", above=0, below=1,
        range_error="epsilon (clip range) must be between 0 and 1, e.g. 0.2."))
    max_completion_length: int = field(
        default=32, metadata=_form("Max completion tokens",
                                   "Max new tokens per completion. The demo's 32 (~130 characters) leaves room above "
                                   "the length reward's 50-character target; raise it for tasks with longer answers. "
                                   "Sampling takes about half of a step, so every token costs time.", minimum=1))
    max_prompt_tokens: int = field(default=512, metadata=_form(
        "Prompt token budget", "Budget for a prompt after the chat template; longer prompts are an error.", minimum=8))
    temperature: float = field(default=1.0, metadata=_form("Temperature",
        "Sampling temperature. 1.0: the G completions of a prompt must differ, or every advantage is 0.", above=0,
        range_error="Temperature must be above 0: GRPO needs sampled, varied completions."))
    top_p: float = field(default=1.0, metadata=_form("top-p", "Nucleus sampling cut-off.", above=0, maximum=1))
    loss_type: str = field(
        default="dapo", metadata=_form(
            "Loss type",
            "TRL's loss: dapo (default: normalise by the active tokens of the whole batch), grpo (per sequence, "
            "length-biased), bnpo, dr_grpo (a global constant), cispo, sapo, luspo, vespo.", LOSS_TYPES)
    )
    scale_rewards: str = field(
        default="batch", metadata=_form(
            "Scale advantages by",
            "Divide advantages (total minus the group's mean) by the batch's std (batch, the demo's default), the "
            "group's std (group, GRPO as published) or not at all (none, Dr. GRPO: mean-centred only). Use batch for "
            "continuous rewards such as the demo's: divided by its own tiny std, a group whose answers score nearly "
            "alike would push a near-tie as hard as a real difference. Use group for right-or-wrong rewards (the "
            "arithmetic presets).", SCALE_REWARDS)
    )

    # GRPO: finer options (DAPO / GSPO variants, schedule, sampling filters)
    num_iterations: int = field(default=1, metadata=_form("Iterations per batch (mu)",
        "mu: optimisation passes over each generated batch. 2 learns twice from each batch of samples, worth it "
        "when sampling is most of a step (on CPU; the Arithmetic preset uses 2). Above 1 the clip (epsilon) starts "
        "to matter.", minimum=1))
    epsilon_high: float = field(default=0.0, metadata=_form("epsilon high (clip-higher, 0 = epsilon)",
        "Upper clip bound, DAPO's clip-higher (e.g. 0.28); 0 = the same as epsilon."))
    importance_sampling_level: str = field(default="token", metadata=_form(
        "Importance sampling level (sequence = GSPO)",
        "Importance ratios per token (GRPO) or one per sequence (sequence = GSPO, often steadier).", IS_LEVELS))
    steps_per_generation: int = field(default=0, metadata=_form("Steps per generation (0 = TRL default)",
        "Optimizer steps taken from each generation round (the round samples this many batches at once); "
        "0 = TRL's default (gradient accumulation steps).", minimum=0))
    lr_scheduler: str = field(default="constant_with_warmup", metadata=_form("LR schedule",
        "Learning-rate schedule after warm-up. Constant for short runs: a decaying rate hides whether learning "
        "works; linear or cosine for long GPU runs.", LR_SCHEDULERS))
    warmup_steps: int = field(default=0, metadata=_form("Warm-up steps",
        "Linear learning-rate warm-up steps. 0 for the demo: LoRA starts at zero, and 11 steps leave no room.",
        minimum=0))
    mask_truncated_completions: bool = field(
        default=False,
        metadata=_form("Mask cut-off completions",
                       "Leave completions that hit the token cap out of the loss (TRL option). Off for the demo: "
                       "the length reward already scores rambling low, and that push away from it is the lesson."),
    )
    top_k: int = field(default=50, metadata=_form("top-k (0 = off)",
        "Sample only from the k likeliest tokens; 0 = every token. 50 is what transformers samples with unless "
        "told otherwise. Raise it or set 0 for more varied completions (and more strange ones); lower it when "
        "samples wander into rare tokens.", minimum=0))
    min_p: float = field(default=0.0, metadata=_form("min-p (0 = off)",
        "Drop tokens less likely than min_p x the top token's probability; 0 = off.", minimum=0, below=1))
    repetition_penalty: float = field(default=1.0, metadata=_form("Repetition penalty",
        "Above 1 discourages repeating tokens while sampling; 1 = off.", above=0))
    seed: int = field(default=42, metadata=_form("Seed", "Seeds sampling, data order and the eval split."))
    keep_signal_prompts: bool = field(default=False, metadata=_form(
        "Train only on prompts with signal (from the scan)",
        "Train only on the prompts where the learnability scan's G completions scored differently; the others "
        "would teach nothing. Run the scan first (it records its prompts with signal); scan more prompts to keep "
        "more. Off: every training prompt."))
    signal_prompts: list[str] = field(default_factory=list, metadata=_help(
        "The prompts (their last user turn) the learnability scan found signal on; with keep_signal_prompts on, "
        "the run trains on exactly these. Filled in by the scan."))
    # Not in the form: set them in config.json (the CLI's --config).
    gradient_accumulation_steps: int = field(default=1, metadata=_help("Micro-batches summed per optimizer step.",
                                                                       minimum=1))
    max_grad_norm: float = field(default=1.0, metadata=_help("Gradient clipping norm."))

    # Rewards that fail
    reward_errors: str = field(
        default="fail",
        metadata=_form(
            "On reward errors",
            "What happens when a reward raises or returns junk: 'fail' stops the run with the reward's name "
            "and the bad sample; 'skip' scores that completion as missing (advantage 0) and logs a warning.",
            REWARD_ERROR_POLICIES),
    )
    reward_timeout_s: float = field(
        default=60.0,
        metadata=_form("Reward timeout (s)",
                       "Seconds one reward call may take for a batch before it counts as an error (then "
                       "reward_errors decides: fail the run, or skip the batch for that reward).",
                       above=0, maximum=3600),
    )

    # LoRA
    lora_r: int = field(default=8, metadata=_form("LoRA r", "LoRA rank. Higher = more capacity, more memory.",
                                                  minimum=1))
    lora_alpha: int = field(default=32, metadata=_form(
        "LoRA alpha", "LoRA scaling; the update is scaled by alpha / r.", minimum=1))
    lora_dropout: float = field(default=0.05, metadata=_form("LoRA dropout", "Dropout on the LoRA branch.",
                                                             minimum=0, below=1))
    lora_target_modules: str = field(
        default="all-linear",
        metadata=_form("LoRA target modules", "'all-linear' or a comma list such as 'q_proj,v_proj'."),
    )

    # Watching it learn
    probe_every: int = field(
        default=5,
        metadata=_form("Probe every N steps (0 = off)",
                       "Every N steps, answer the probe prompts greedily and score them with the run's rewards "
                       "(step 0 is the base model). 0 turns probes off.", minimum=0),
    )
    probe_prompts: int = field(
        default=4, metadata=_form("Probe prompts (held out)",
                                  "How many held-out prompts to probe: never trained on, the same ones every time.",
                                  minimum=0),
    )

    # Runtime: checkpoints, precision, engine
    save_steps: int = field(default=10, metadata=_form(
        "Checkpoint every N steps", "Write a resumable checkpoint every N steps.", minimum=1))
    keep_checkpoints: int = field(
        default=3,
        metadata=_form("Checkpoints to keep",
                       "Complete checkpoints kept on disk, newest first; 0 keeps all. Each holds the adapter and the "
                       "optimizer state, so they pile up. The newest complete one is never deleted.", minimum=0),
    )
    precision: str = field(
        default="auto",
        metadata=_form("Precision",
                       "auto = bf16 on GPUs that do it natively (compute capability 8.0+, Ampere and later), fp16 "
                       "mixed precision on older GPUs (weights and LoRA weights stay fp32), fp32 on CPU. bf16 on CPU "
                       "is opt-in. In bf16 the LoRA weights are fp32 (PEFT keeps them so), except with QLoRA: bf16.",
                       PRECISIONS),
    )
    gradient_checkpointing: bool = field(
        default=False,
        metadata=_form("Gradient checkpointing",
                       "Recompute activations in the backward pass to save memory: turn on for large models on a "
                       "GPU. Off by default: a 135M model fits easily, and the fast engine needs it off."),
    )
    fast_engine: bool = field(
        default=True,
        metadata=_form("Fast engine (one process)",
                       "One process: sample with the adapter merged into the weights (static decoding on a GPU) "
                       "and, on the CPU, score each prompt once for its G completions. Same numbers as TRL's own "
                       "path, less work; off = TRL's path."),
    )
    generation_engine: str = field(
        default="auto",
        metadata=_form("Generation engine",
                       "How the fast engine samples completions. static: key/value buffers allocated once and a "
                       "compiled decoding step (CUDA graphs on a GPU), which removes most of the per-token overhead of "
                       "small models; the same sampling as eager (the first step also compiles it: up to a minute). "
                       "eager: transformers' generate. auto: static on a "
                       "GPU, eager on the CPU. Where static can't run (vLLM, QLoRA, more than one "
                       "process, a model without static-cache support), eager is used and the run header says why. "
                       "Choose eager if static decoding fails or uses too much memory on your card.",
                       GENERATION_ENGINES),
    )

    # GPU path
    load_in_4bit: bool = field(default=False, metadata=_form("QLoRA: 4-bit base (GPU)",
        "QLoRA: load the base model in 4-bit NF4 (bitsandbytes) and train the LoRA on top, in bf16 (TRL casts the "
        "LoRA weights to bf16, as the QLoRA paper does): needs a bf16 GPU (compute capability 8.0+) and "
        "`make setup-gpu`. About a quarter of the base model's memory. Not with vLLM: it can't load the packed "
        "4-bit weights."))
    use_vllm: bool = field(default=False, metadata=_form("Generate with vLLM (GPU)",
        "GPU only: generate with vLLM in colocate mode (same GPU as training); needs `make setup-gpu`. TRL's "
        "importance-sampling correction for the vLLM/training mismatch stays on."))
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata=_form("vLLM GPU memory share",
        "Share of the GPU's memory vLLM reserves for weights and KV cache; the rest is training's.",
        above=0, below=1, range_error=(
        "vllm_gpu_memory_utilization is a share of the GPU's memory, between 0 and 1 (e.g. 0.3).")))
    vllm_enable_sleep_mode: bool = field(default=False, metadata=_form("vLLM sleep mode",
        "Offload vLLM's weights and cache during the optimizer step: less memory, some transfer time."))
    vllm_max_model_length: int = field(default=0, metadata=_form("vLLM max model length (0 = prompt + completion)",
        "vLLM's context window; 0 = the prompt budget plus max completion tokens.", minimum=0))
    vllm_tensor_parallel_size: int = field(default=1, metadata=_form("vLLM tensor parallel size",
        "GPUs one vLLM engine spans (colocate: must divide the number of processes, and at most the GPUs there are).",
        minimum=1))

    # Outputs
    report_to: str = field(default="none", metadata=_form("Also report to",
        "Also log to tensorboard (<run>/tensorboard) or trackio (project 'grpo-studio'); the app's charts "
        "need neither.", REPORT_TO))
    merge_at_end: bool = field(default=True, metadata=_help("Write merged/ (base + LoRA) at the end for chat."))

    # ---- (de)serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        if not isinstance(data, dict):
            raise ConfigError("The config must be a JSON object.")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"Unknown config field(s): {', '.join(unknown)}. "
                              f"Valid fields: {', '.join(sorted(known))}.")
        kwargs = dict(data)
        if isinstance(kwargs.get("scale_rewards"), bool):  # configs written before group/batch/none
            kwargs["scale_rewards"] = "group" if kwargs["scale_rewards"] else "none"
        if "dataset" in kwargs:
            ds = kwargs["dataset"]
            if not isinstance(ds, dict):
                raise ConfigError("'dataset' must be an object such as {\"source\": \"tldr\"}.")
            ds_known = {f.name for f in dataclasses.fields(DatasetSpec)}
            bad = sorted(set(ds) - ds_known)
            if bad:
                raise ConfigError(f"Unknown dataset field(s): {', '.join(bad)}. Valid: {', '.join(sorted(ds_known))}.")
            kwargs["dataset"] = DatasetSpec(**ds)
        if "rewards" in kwargs:
            rewards = kwargs["rewards"]
            if not isinstance(rewards, list):
                raise ConfigError("'rewards' must be a list of {name, weight, params} objects.")
            specs = []
            for item in rewards:
                if isinstance(item, str):
                    item = {"name": item}
                if not isinstance(item, dict) or "name" not in item:
                    raise ConfigError(f"Each reward needs a 'name'; got {item!r}.")
                specs.append(RewardSpec(name=item["name"], weight=item.get("weight", 1.0),
                                        params=item.get("params") or {}))
            kwargs["rewards"] = specs
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config.json is not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> "RunConfig":
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    # ---- validation ---------------------------------------------------------------------------
    def problems(self, allow_custom_rewards: bool = False) -> list[str]:
        """Every reason this config can't run, in plain words. Empty list = good to go."""
        from pipeline.rewards import reward_registry  # pure module; late import avoids a cycle

        out: list[str] = []
        for f in dataclasses.fields(self):  # every field with choices (the form's dropdowns) or a range
            allowed = f.metadata.get("choices")
            if allowed and getattr(self, f.name) not in allowed:
                out.append(f"{f.name} must be one of: {', '.join(allowed)} (got {getattr(self, f.name)!r}).")
            outside = range_problem(f.name, f.metadata, getattr(self, f.name))
            if outside:
                out.append(outside)
        out.extend(self.model_problems())
        if self.batch_size >= 1 and self.batch_size % max(self.num_generations, 1):  # below 1: its range says so
            g = max(self.num_generations, 1)
            below = max(self.batch_size // g * g, g)  # the multiples of G nearest the batch asked for
            out.append(f"Batch size {self.batch_size} is not a multiple of the group size G={self.num_generations}. "
                       f"Use {below} or {below + g}.")
        if not re.fullmatch(r"all-linear|[A-Za-z0-9_.]+(\s*,\s*[A-Za-z0-9_.]+)*", self.lora_target_modules.strip()):
            out.append("LoRA target modules: 'all-linear' or a comma list such as 'q_proj,v_proj'.")
        if self.epsilon_high and not self.epsilon <= self.epsilon_high < 1:
            out.append(f"epsilon_high must be at least epsilon ({self.epsilon}) and below 1, or 0 for the same.")
        if self.load_in_4bit and self.precision == "fp32":
            out.append("4-bit QLoRA trains in bf16 (TRL casts the LoRA weights to bf16): "
                       "set precision to auto or bf16.")
        if self.load_in_4bit and self.precision == "fp16":
            out.append(QLORA_FP16)
        if self.load_in_4bit and self.use_vllm:
            out.append(QLORA_VLLM)

        ds = self.dataset
        out.extend(ds.problems())

        if self.keep_signal_prompts:
            out.extend(self._signal_problems())

        if not self.rewards:
            out.append("Switch on at least one reward function.")
        elif all(_is_zero(s.weight) for s in self.rewards):
            out.append("Every reward has weight 0: weight 0 makes a reward a monitor (charted, never trained on), "
                       "so nothing would be learned. Give at least one reward a weight other than 0.")
        for spec in self.rewards:
            out.extend(reward_registry.problems(spec, allow_custom=allow_custom_rewards))
        needs_answer = [s.name for s in self.rewards if reward_registry.needs_answer(s.name)]
        if needs_answer and ds.source in ("file", "hub") and not ds.answer_column:
            out.append(f"Reward(s) {', '.join(needs_answer)} compare against a reference answer: "
                       "set the answer column.")
        needs_source = [s.name for s in self.rewards if reward_registry.needs_source(s.name)]
        if needs_source and ds.source != "tldr":
            out.append(f"Reward(s) {', '.join(needs_source)} compare the answer with the text it summarises, which "
                       "only the bundled TL;DR prompts carry (a 'source' column). Untick them for this dataset.")
        if needs_answer and ds.source == "tldr":
            out.append(f"Reward(s) {', '.join(needs_answer)} need reference answers, which TL;DR has none of. "
                       "Use the Arithmetic set or a file with an answer column.")
        if ds.source != "movies" and any(s.name == "film_citation" and s.params.get("right_film") is True
                                         for s in self.rewards):
            out.append("film_citation with right_film needs to know which numbered film each prompt is about, which "
                       "only the Movie questions prompts say: on other prompts it would score 0 everywhere. Set "
                       "right_film to false (any citation counts) or pick Movie questions.")
        if ds.source in ("tldr", "arithmetic") and any(s.name == "film_details" for s in self.rewards):
            out.append("film_details checks an answer against the numbered films its prompt lists, and these prompts "
                       "list none: it would score 0 everywhere. Pick Movie questions, or prompts that list films.")
        return out

    def _signal_problems(self) -> list[str]:
        """Keeping the scan's prompts needs a scan, and enough of them for one generation round (TRL leaves out
        a round's incomplete batch of prompts, so fewer would train on nothing)."""
        kept = [p for p in self.signal_prompts if isinstance(p, str) and p]
        if len(kept) != len(self.signal_prompts):
            return ["signal_prompts must be a list of prompt texts, as the learnability scan records them."]
        if not kept:
            return ["'Train only on prompts with signal' needs a learnability scan first (it finds the prompts with "
                    "signal), or untick it to train on every prompt."]
        per_round = max(self.batch_size // max(self.num_generations, 1), 1) * max(
            self.steps_per_generation or self.gradient_accumulation_steps, 1)
        if len(set(kept)) < per_round:
            return [f"The learnability scan kept {len(set(kept))} prompt(s) with signal, fewer than the {per_round} "
                    "prompts one generation round takes. Scan more prompts, or lower the batch."]
        return []

    def model_problems(self) -> list[str]:
        """The reasons in problems() that are about the model field alone (pre-flight lists them as the model's)."""
        if not str(self.model).strip():
            return ["Pick a model: the bundled SmolLM2 works offline."]
        return [] if self.model in (BUNDLED_MODEL_ID, BUNDLED_LABEL) else _source_problems(self.model, "model")

    def validate(self, allow_custom_rewards: bool = False) -> "RunConfig":
        problems = self.problems(allow_custom_rewards=allow_custom_rewards)
        if problems:
            raise ConfigError("This run can't start:\n- " + "\n- ".join(problems))
        return self


def _source_problems(value: Any, what: str) -> list[str]:
    """pipeline/models/sources.py's rule for a typed model or dataset, as a problem list (empty when it passes)."""
    try:
        check_source(str(value), what)
    except SourceRefused as exc:
        return [str(exc)]
    return []


def _is_zero(weight: Any) -> bool:
    try:
        return float(weight) == 0
    except (TypeError, ValueError):  # a bad weight is reported by the reward registry
        return False
