"""The Train form's presets: each a short diff against RunConfig's defaults (the defaults are the Quick CPU
demo), and apply_preset, which fills a config from one."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from pipeline.setup.config import ConfigError, DatasetSpec, RewardSpec, RunConfig


def _vllm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


GSM8K_SYSTEM = ("Solve the math problem. Reason step by step inside <think></think>, then give only the final "
                "number inside <answer></answer>.")

# Presets are short diffs against the defaults (nanoGPT style). The defaults are the Quick CPU demo.
PRESETS: dict[str, dict[str, Any]] = {
    "Quick CPU demo": {},
    # The GRPO recipe's reward pair alone, one click away: it learns to be short, and the held-out task metric
    # shows that it stops summarising (a calibration run: "The post is too long.").
    "Length + diversity pair": {
        "rewards": [RewardSpec("length_target", 1.0, {}),
                    RewardSpec("token_diversity", 1.0, {})],
    },
    # A verifiable task (as in TRL's GRPO guide and the GRPO tutorial): correctness on the bundled arithmetic set plus
    # partial credit for the <think>/<answer> tags; strict_format at weight 0 is a monitor (charted, never in the
    # advantage).
    # Rewards are listed in the registry's order, the order the Train form's table gives them back in.
    "Arithmetic: correctness + format": {
        "dataset": DatasetSpec(source="arithmetic"),
        "rewards": [RewardSpec("strict_format", 0.0, {}), RewardSpec("incremental_format", 1.0, {}),
                    RewardSpec("numeric_tolerance", 2.0, {})],
        # The base model answers ~40% of the set right greedily, ~1 in 5 of its samples: 8 tries give a group
        # with a right and a wrong answer on ~60% of problems (bench/results/arithmetic-levels-scan-2026-11-26b.txt)
        "num_generations": 8,
        "batch_size": 16,
        "max_completion_length": 40,  # "<think>24 × 6 = 144</think><answer>144</answer>" is ~25 tokens
        # Each sampled batch trained on twice (sampling is most of a CPU step): 30 steps from 15 batches of 2
        # problems. On seeds 1-5 no seed ends below its base model, unlike 20 or 24 steps of one pass a batch
        # (bench/results/learning-arithmetic-trials-2026-11-27.txt)
        "num_iterations": 2,
        "max_steps": 30,
        "scale_rewards": "group",  # right/wrong rewards: each group's own std, as published
        # Right or wrong moves a probe prompt's score all at once: 8 of them put the header's before-and-after in
        # steps of 12.5% rather than 25%. Probes answer greedily in eval mode, so training is the same either way.
        "probe_prompts": 8,
    },
    # Questions about the bundled films, each followed by the three plots the RAG tab's search ranks first for
    # it (answer with top-k 3 in the RAG tab too); the answer is the film's title (built by
    # bench/movie_questions.py). Correctness dominates; the citation counts only when it names the right film's
    # number, so citing whichever plot comes first earns nothing (with any citation rewarded, runs learned to
    # copy line [1]). The set holds out at least 24% (50 films no training question is about;
    # pipeline/setup/data.py). The sizes are the default run's: short prompts (~250 tokens) keep its step time.
    "Movie questions": {
        "dataset": DatasetSpec(source="movies"),
        "rewards": [RewardSpec("movie_title", 2.0, {}), RewardSpec("film_citation", 0.5, {"right_film": True})],
        # 11 steps of 4 questions: 3e-4 moved accuracy within noise, 5e-4 learned on 2 seeds in 3, 1e-3 was unstable
        "learning_rate": 7e-4,
        "max_completion_length": 24,  # "The Cabinet of Dr. Caligari [4]" is about 12 tokens
        "scale_rewards": "group",  # right/wrong rewards: each group's own std, as published
        "probe_prompts": 8,  # a right/wrong probe moves the header's before-and-after by 12.5%, not 25%
    },
    # The classic GRPO run (DeepSeek-R1 style) on a GPU: GSM8K word problems, correctness + format, vLLM
    # generation when it is installed. Online only: the model and the dataset come from the Hub.
    "GSM8K on GPU: Qwen2.5-0.5B-Instruct": {
        "model": "Qwen/Qwen2.5-0.5B-Instruct",
        "dataset": DatasetSpec(source="hub", hub_id="openai/gsm8k", hub_config="main", hub_split="train",
                               prompt_column="question", answer_column="answer", system_prompt=GSM8K_SYSTEM),
        # The reference's last number is the answer ("... #### 72"), which numeric_tolerance reads.
        "rewards": [RewardSpec("strict_format", 0.5, {}), RewardSpec("incremental_format", 0.5, {}),
                    RewardSpec("numeric_tolerance", 2.0, {})],
        "scale_rewards": "group",
        "num_generations": 8,
        "batch_size": 32,  # 4 prompts a step
        "learning_rate": 5e-5,  # as GPU standard: a LoRA takes ~10x a full fine-tune's rate
        "lr_scheduler": "cosine",
        "warmup_steps": 10,
        "lora_r": 32,
        "lora_alpha": 64,
        "max_completion_length": 512,  # room for worked reasoning
        "max_steps": 250,
        "gradient_checkpointing": True,
        "fast_engine": True,  # sampling: vLLM where it is installed, else static decoding on a GPU
        "use_vllm": _vllm_installed(),
        "probe_every": 25,
        "save_steps": 50,
    },
    "GPU standard": {
        "gradient_checkpointing": True,
        "num_generations": 8,
        "batch_size": 16,
        "learning_rate": 5e-5,
        "max_completion_length": 256,
        "max_steps": 250,
        "precision": "auto",
    },
}


def apply_preset(config: RunConfig, preset: str) -> RunConfig:
    if preset not in PRESETS:
        raise ConfigError(f"Unknown preset '{preset}'. Choose one of: {', '.join(PRESETS)}.")
    changes = dict(PRESETS[preset])
    defaults = RunConfig()
    for key in ("model", "dataset", "rewards"):  # a preset without them puts the defaults back: they go together
        changes.setdefault(key, getattr(defaults, key))
    return dataclasses.replace(config, **{k: copy.deepcopy(v) for k, v in changes.items()})
