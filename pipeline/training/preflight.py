"""Pre-flight checks run before a training starts, each explained in plain words."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.run_folder import run_files, stages
from pipeline.setup.config import RunConfig


@dataclass
class Check:
    name: str
    ok: bool
    message: str


def preflight(cfg: RunConfig, allow_custom_rewards: bool = False) -> list[Check]:
    """Config, dataset, model, prompt budget, trainer, GPU memory (on a GPU) and rewards, in that order; later
    checks need earlier ones."""
    from pipeline.setup.data import DatasetError, check_prompt_budget, load_dataset_split
    from pipeline.training.learnability import keep_prompts
    from pipeline.models.loading import ModelError, count_prompt_tokens, load_tokenizer, resolve_model
    from pipeline.training.probes import reward_kwargs
    from pipeline.setup.reward_check import needs_isolation, score_isolated
    from pipeline.rewards import build_rewards, score

    checks: list[Check] = []
    problems = cfg.problems(allow_custom_rewards=allow_custom_rewards)
    # Each problem once, under its own heading: the model's and the dataset's fields have lines of their own.
    model_problems, dataset_problems = cfg.model_problems(), cfg.dataset.problems()
    rest = [p for p in problems if p not in model_problems + dataset_problems]
    checks.append(Check("settings", not rest, " ".join(rest) or
                        f"G={cfg.num_generations}, {cfg.batch_size // max(cfg.num_generations, 1)} prompt(s) per step, "
                        f"{cfg.max_steps} steps."))
    try:
        if dataset_problems:
            raise DatasetError(" ".join(dataset_problems))
        train, held = load_dataset_split(cfg.dataset, cfg.seed)
        message = f"{len(train)} training prompts, {len(held)} held out."
        if cfg.keep_signal_prompts and cfg.signal_prompts:  # without a scan, the settings check says so
            train = keep_prompts(train, cfg.signal_prompts)
            message += f" The run trains on the {len(train)} the learnability scan found signal on."
        checks.append(Check("dataset", True, message))
    except DatasetError as exc:
        checks.append(Check("dataset", False, str(exc)))
        train = []
    try:
        staged = stages.model_in_run(cfg.model)  # a next stage: the model a run ended with
        if stage_problem := stages.problem(cfg.model):  # a run still training, or gone
            model_problems.append(stage_problem)
        if model_problems:
            raise ModelError(" ".join(model_problems))
        tokenizer = load_tokenizer(resolve_model(cfg.model))
        checks.append(Check("model", True, (
            f"The model run '{staged[0].name}' ended with can be loaded; Start takes it into the new run as its own "
            "(start_model/)." if staged and staged[1].name == run_files.MERGED else f"'{cfg.model}' can be loaded.")))
    except (ModelError, OSError, ValueError) as exc:
        checks.append(Check("model", False, str(exc)))
        tokenizer = None
    longest = None
    if tokenizer is not None and train:
        def count(messages):
            return count_prompt_tokens(tokenizer, messages)

        try:
            check_prompt_budget(train, count, cfg.max_prompt_tokens, cfg.dataset.source)
            longest = max(count(r["prompt"]) for r in train)
            too_long = context_problem(longest, cfg.max_completion_length, model_context(cfg.model))
            checks.append(Check("budget", False, too_long) if too_long else Check(
                "budget", True, f"Longest prompt is {longest} tokens, within the {cfg.max_prompt_tokens}-token "
                                f"budget; completions add up to {cfg.max_completion_length} more."))
        except DatasetError as exc:
            checks.append(Check("budget", False, str(exc)))
    if not problems:
        checks.append(trainer_check(cfg))
        memory = memory_check(cfg, longest)
        if memory is not None:
            checks.append(memory)
    if not problems and train:
        try:
            sample = train[0]
            completions = [[{"role": "assistant", "content": text}] for text in
                           ("A short sample answer.", "<think>check</think><answer>42</answer>")]
            # Every dataset column reaches the rewards, as in training (post_similarity reads 'source').
            extra = reward_kwargs([sample, sample])
            if needs_isolation(cfg.rewards):  # custom code runs in a child process, never in this one
                result = score_isolated(cfg.rewards, completions, allow_custom=allow_custom_rewards,
                                        timeout_s=cfg.reward_timeout_s, **extra)
            else:
                funcs, weights = build_rewards(cfg.rewards, policy="fail", timeout_s=cfg.reward_timeout_s)
                result = score(funcs, weights, completions, **extra)
            checks.append(Check("rewards", True, "Every reward scored a sample: " + ", ".join(
                f"{k}={v[0]:.3g}" for k, v in result["per_reward"].items() if v[0] is not None) + "."))
        except Exception as exc:  # noqa: BLE001 - any reward failure is shown to the user
            checks.append(Check("rewards", False, str(exc)))
    return checks


def trainer_check(cfg: RunConfig) -> Check:
    """This machine and TRL's own rules for the GRPO settings: a missing GPU or package, or a combination
    TRL refuses, in TRL's words: GRPOConfig's checks (e.g. a generation batch that does not hold whole
    groups) and the ones GRPOTrainer makes only after the model has loaded (`trainer_refusals`). TRL's
    rules are asked even when this machine can't run the settings, so a GPU config is checked on a laptop."""
    import tempfile
    from pathlib import Path

    from pipeline.models.loading import ModelError, gpu_count, pick_device, resolve_precision, runtime_problems
    from pipeline.training.grpo_trainer import grpo_args, trainer_refusals

    device = pick_device()
    problems = []
    try:
        precision = resolve_precision(cfg.precision, device)
    except ModelError as exc:
        problems.append(str(exc))
        precision = "fp32"  # for TRL's checks below
    problems += runtime_problems(cfg, device, precision=precision, gpus=gpu_count())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            refused = trainer_refusals(grpo_args(cfg, Path(tmp), device, precision))
    except (ValueError, TypeError) as exc:
        refused = [str(exc)]
    problems += [f"TRL refuses these GRPO settings: {r}" for r in refused]
    if problems:
        return Check("trainer", False, " ".join(problems))
    return Check("trainer", True, f"{device}, {precision}: TRL accepts these GRPO settings.")


def model_context(model_id: str) -> int:
    """The model's context length from its config.json (max_position_embeddings); 0 when it is not known."""
    from pipeline.setup import gpu_memory

    shape, _ = gpu_memory.model_shape(model_id)
    return shape.context if shape is not None else 0


def context_problem(longest_prompt: int, completion_tokens: int, context: int) -> str | None:
    """Why the longest prompt and a full completion do not fit the model's context, or None (also when the
    context is not known).

    >>> context_problem(251, 32, 8192) is None, context_problem(251, 32, 0) is None
    (True, True)
    >>> context_problem(251, 100000, 8192)
    "The longest prompt (251 tokens) and a full completion (100000 tokens) come to 100251 tokens, over the model's \
context of 8192: it was never trained on positions that far. Set max completion tokens to 7941 or less."
    """
    if not context or longest_prompt + completion_tokens <= context:
        return None
    room = context - longest_prompt
    fix = (f"Set max completion tokens to {room} or less." if room > 0 else
           "Shorten the prompts or lower the prompt token budget, then set max completion tokens.")
    return (f"The longest prompt ({longest_prompt} tokens) and a full completion ({completion_tokens} tokens) come "
            f"to {longest_prompt + completion_tokens} tokens, over the model's context of {context}: it was never "
            f"trained on positions that far. {fix}")


def memory_check(cfg: RunConfig, prompt_tokens: int | None = None, device: str | None = None,
                 precision: str | None = None, card: tuple[int, int, bool] | None = None) -> Check | None:
    """Will the run fit the GPU's memory? Estimated from the model's config.json (no weights loaded) and the settings
    (pipeline/setup/gpu_memory.py), before anything loads; when it will not fit, the settings that would make it fit,
    largest saving first. None on a CPU (nothing new to say there). `device`, `precision` and `card` (free and
    total bytes, native bf16) default to this machine's."""
    from pipeline.setup import gpu_memory
    from pipeline.models.loading import ModelError, pick_device, resolve_precision

    device = device or pick_device()
    if device != "cuda":
        return None
    try:
        precision = precision or resolve_precision(cfg.precision, device)
    except ModelError:  # the trainer check already says why
        return None
    shape, source = gpu_memory.model_shape(cfg.model)
    if shape is None:
        return Check("memory", True, f"GPU memory not estimated: {source}.")
    free, total, bf16_ok = card or gpu_memory.card_memory()
    settings = gpu_memory.settings_from_config(cfg, precision, prompt_tokens, card_total=total)
    ok, message = gpu_memory.fit_verdict(shape, settings, free, total, bf16_ok=bf16_ok)
    return Check("memory", ok, message)


# The scan's default number of prompts: on 2 CPU cores with the bundled model and the default run's settings
# (G=4, 32 completion tokens), sampling and scoring 8 prompts takes well under a minute.
SCAN_PROMPTS = 8


def learnability_scan(cfg: RunConfig, prompts: int = SCAN_PROMPTS, allow_custom_rewards: bool = False,
                      model=None, tokenizer=None, progress=None):
    """Sample G completions for the first `prompts` training prompts with the run's sampling settings, score them
    with the run's rewards under the trainer's guard, and read the scores (pipeline/training/learnability.py): which
    prompts give GRPO something to learn from. `model` and `tokenizer` default to loading cfg.model; `progress`
    (a callable taking a share and a description) hears of each stage. Raises ConfigError or DatasetError with
    the reason when the settings or the prompts can't be scanned."""
    import dataclasses
    import time

    from pipeline.setup.config import ConfigError
    from pipeline.setup.data import DatasetError, load_dataset_split
    from pipeline.training.generate import sample_groups
    from pipeline.training.learnability import scan_report
    from pipeline.models.loading import load_model
    from pipeline.training.probes import prompt_text, reward_kwargs
    from pipeline.setup.reward_check import needs_isolation, score_isolated
    from pipeline.rewards import build_rewards, reward_registry, score

    def tell(share: float, what: str) -> None:
        if progress is not None:
            progress(share, desc=what)

    # 1. Settings: the scan is what fills signal_prompts, so it runs whatever 'keep' says.
    scanned = dataclasses.replace(cfg, keep_signal_prompts=False, signal_prompts=[])
    scanned.validate(allow_custom_rewards=allow_custom_rewards)
    if int(prompts) < 1:
        raise ConfigError("Scan at least one prompt.")
    # 2. Prompts: the first training prompts in the run's order (the run's seed and split), never held-out ones.
    train, _ = load_dataset_split(cfg.dataset, cfg.seed)
    rows = train[:int(prompts)]
    if not rows:
        raise DatasetError("There are no training prompts to scan.")
    start = time.perf_counter()
    # 3. Sampling: G completions per prompt, as the trainer samples them.
    if model is None or tokenizer is None:
        tell(0.05, "Loading the model")
        model, tokenizer = load_model(cfg.model, precision=cfg.precision)
    g = cfg.num_generations
    tell(0.2, f"Sampling {g} completions for each of {len(rows)} prompts")
    groups = sample_groups(model, tokenizer, [r["prompt"] for r in rows], g, cfg.max_completion_length,
                           temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, min_p=cfg.min_p,
                           repetition_penalty=cfg.repetition_penalty, seed=cfg.seed)
    # 4. Scoring: every completion with the run's rewards and their guard, each seeing its own row's columns.
    tell(0.8, "Scoring with the run's rewards")
    flat_rows = [row for row in rows for _ in range(g)]
    chat = isinstance(rows[0]["prompt"], list)
    completions = [[{"role": "assistant", "content": t}] if chat else t for group in groups for t in group]
    extra = reward_kwargs(flat_rows)
    if needs_isolation(cfg.rewards):  # custom code runs in a child process, never in this one
        result = score_isolated(cfg.rewards, completions, allow_custom=allow_custom_rewards,
                                timeout_s=cfg.reward_timeout_s, **extra)
        maxima = {name: None if reward_registry.get(spec.name).custom_code
                  else getattr(reward_registry.build(spec), "max_value", None)
                  for name, spec in zip(result["per_reward"], cfg.rewards)}
    else:
        funcs, _ = build_rewards(cfg.rewards, policy=cfg.reward_errors, allow_custom=allow_custom_rewards,
                                 timeout_s=cfg.reward_timeout_s)
        result = score(funcs, [s.weight for s in cfg.rewards], completions, **extra)
        maxima = {f.__name__: f.max_value for f in funcs}
    weights = dict(zip(result["per_reward"], (float(s.weight) for s in cfg.rewards)))
    # 5. Reading: group the scores back by prompt.
    totals = [result["total"][i * g:(i + 1) * g] for i in range(len(rows))]
    per_prompt = [{name: values[i * g:(i + 1) * g] for name, values in result["per_reward"].items()}
                  for i in range(len(rows))]
    return scan_report([prompt_text(r["prompt"]) for r in rows], totals, per_prompt, weights, maxima, groups,
                       seconds=time.perf_counter() - start)
