"""The reward registry: names -> reward classes with typed, validated parameters. An unknown name
fails with the list of valid names; the Train form and the reward bench are built from `describe()`.
A parameter's default is the one its reward class's `__init__` declares: there is no second copy here."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from pipeline.rewards.accuracy_rewards import ExactAnswer, MovieTitle, NumericTolerance
from pipeline.rewards.custom import CustomPython
from pipeline.rewards.format_rewards import FilmCitation, IncrementalFormat, KeywordPresence, StrictFormat
from pipeline.rewards.grounding import FilmDetails
from pipeline.rewards.meaning_rewards import PostSimilarity
from pipeline.rewards.style_rewards import LengthTarget, TokenDiversity


@dataclass(frozen=True)
class Param:
    kind: type
    help: str
    choices: tuple = ()
    default: Any = None  # filled in from the reward class by RewardDef; never written by hand


def class_defaults(factory: Callable, names) -> dict[str, Any]:
    """The defaults `factory`'s signature gives the parameters `names`; each must have one.

    >>> class_defaults(LengthTarget, ["target", "unit"])
    {'target': 50, 'unit': 'chars'}
    """
    signature = inspect.signature(factory)
    out = {}
    for key in names:
        given = signature.parameters.get(key)
        if given is None or given.default is inspect.Parameter.empty:
            raise TypeError(f"{getattr(factory, '__name__', factory)} must take a parameter '{key}' with a default "
                            "value: the registry reads the default from there.")
        out[key] = given.default
    return out


@dataclass
class RewardDef:
    name: str
    factory: Callable[..., Callable]
    description: str
    params: dict[str, Param] = field(default_factory=dict)
    needs_answer: bool = False
    custom_code: bool = False
    needs_source: bool = False
    # Scored from what an answer says first (a film's name, its number): one cut off at max_completion_length loses
    # nothing this reward scores, so a short cap is a choice, not a fault.
    reads_opening: bool = False

    def __post_init__(self) -> None:
        defaults = class_defaults(self.factory, self.params)
        self.params = {key: replace(p, default=defaults[key]) for key, p in self.params.items()}


class RewardRegistry:
    """Maps names to reward definitions. An unknown name fails with the list of valid names."""

    def __init__(self) -> None:
        self._defs: dict[str, RewardDef] = {}

    def register(self, d: RewardDef) -> None:
        self._defs[d.name] = d

    def names(self) -> list[str]:
        return list(self._defs)

    def get(self, name: str) -> RewardDef:
        try:
            return self._defs[name]
        except KeyError:
            raise KeyError(f"Unknown reward '{name}'. Valid rewards: {', '.join(self._defs)}.") from None

    def needs_answer(self, name: str) -> bool:
        return name in self._defs and self._defs[name].needs_answer

    def needs_source(self, name: str) -> bool:
        return name in self._defs and self._defs[name].needs_source

    def reads_opening(self, name: str) -> bool:
        return name in self._defs and self._defs[name].reads_opening

    def _coerce(self, d: RewardDef, params: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(params) - set(d.params))
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {', '.join(unknown)}; it takes: {', '.join(d.params) or 'none'}"
            )
        out = {}
        for key, p in d.params.items():
            value = params.get(key, p.default)
            try:
                value = (value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")) \
                    if p.kind is bool else p.kind(value)
            except (TypeError, ValueError):
                raise ValueError(f"parameter '{key}' should be a {p.kind.__name__}, got {value!r}") from None
            if p.choices and value not in p.choices:
                raise ValueError(f"parameter '{key}' must be one of {', '.join(map(str, p.choices))}")
            out[key] = value
        return out

    def problems(self, spec, allow_custom: bool = False) -> list[str]:
        if spec.name not in self._defs:
            return [f"Unknown reward '{spec.name}'. Valid rewards: {', '.join(self._defs)}."]
        d = self._defs[spec.name]
        if d.custom_code and not allow_custom:
            return [f"Reward '{spec.name}' runs your own Python code; start with --allow-custom-rewards to allow it."]
        try:
            weight = float(spec.weight)
        except (TypeError, ValueError):
            return [f"Reward '{spec.name}': weight must be a number, got {spec.weight!r}."]
        if not math.isfinite(weight):
            return [f"Reward '{spec.name}': weight must be finite."]
        try:
            if d.custom_code:  # checked, never executed here: this may be the web server
                kwargs = self._coerce(d, dict(spec.params or {}))
                CustomPython.check(kwargs.get("code", ""))
                return []
            self.build(spec, allow_custom=allow_custom)
        except Exception as exc:  # noqa: BLE001 - report any construction problem to the user
            return [f"Reward '{spec.name}': {exc}"]
        return []

    def build(self, spec, allow_custom: bool = False, name: str | None = None) -> Callable:
        d = self.get(spec.name)
        if d.custom_code and not allow_custom:
            raise PermissionError("custom reward code is disabled; start with --allow-custom-rewards")
        kwargs = self._coerce(d, dict(spec.params or {}))
        return d.factory(name=name or spec.name, **kwargs)

    def describe(self) -> list[dict[str, Any]]:
        return [
            {
                "name": d.name,
                "description": d.description,
                "needs_answer": d.needs_answer,
                "custom_code": d.custom_code,
                "params": {k: {"type": p.kind.__name__, "default": p.default, "help": p.help,
                               "choices": list(p.choices)} for k, p in d.params.items()},
            }
            for d in self._defs.values()
        ]


reward_registry = RewardRegistry()
reward_registry.register(RewardDef(
    "length_target", LengthTarget, "-|target - length|; peaks at the target length (the GRPO recipe's length reward).",
    {"target": Param(int, "Target length."),
     "unit": Param(str, "Count characters or words.", ("chars", "words"))}))
reward_registry.register(RewardDef(
    "token_diversity", TokenDiversity,
    "Unique-token share x scale; punishes repetition (the GRPO recipe's diversity reward).",
    {"scale": Param(float, "Multiplier on the 0..1 share.")}))
reward_registry.register(RewardDef(
    "strict_format", StrictFormat, "1 if the completion is exactly <think>...</think><answer>...</answer>."))
reward_registry.register(RewardDef(
    "incremental_format", IncrementalFormat,
    "0.25 per well-formed tag; small penalty for trailing text (partial credit, from TRL's GRPO guide)."))
reward_registry.register(RewardDef(
    "exact_answer", ExactAnswer, "1 if the final answer equals the reference (normalised).", needs_answer=True))
reward_registry.register(RewardDef(
    "numeric_tolerance", NumericTolerance,
    "1 if the final number is within tolerance of the reference (the GRPO tutorial's correctness reward).",
    {"atol": Param(float, "Absolute tolerance."), "rtol": Param(float, "Relative tolerance.")},
    needs_answer=True))
reward_registry.register(RewardDef(
    "movie_title", MovieTitle,
    "1 if the answer names the right film (case, punctuation and a leading 'the/a/an' ignored) and no other "
    "film it was given.", needs_answer=True, reads_opening=True))
reward_registry.register(RewardDef(
    "film_citation", FilmCitation,
    "1 if the answer cites one of the numbered films it was given, like [2]; 0.5 for several; 0 for none.",
    {"right_film": Param(bool, "Count only a citation of the film the question is about (needs the dataset's "
                               "answer and candidates, as Movie questions has).")},
    reads_opening=True))
reward_registry.register(RewardDef(
    "film_details", FilmDetails,
    "1 if the answer names a film it was given and no film number, title, name, year, genre or director those "
    "films lack (for prompts that list numbered films, as Movie questions does); else 0.",
    {"right_film": Param(bool, "Count only an answer that names the film the question is about (needs the "
                               "dataset's answer and candidates, as Movie questions has)."),
     "penalty": Param(bool, "Score only what is invented: -1 for an answer that states a detail the films lack, "
                            "0 for any other. Use it beside a reward for the right film.")},
    reads_opening=True))
reward_registry.register(RewardDef(
    "keyword_presence", KeywordPresence, "Reward (or penalize) completions matching a regex.",
    {"pattern": Param(str, "Regular expression to look for."),
     "mode": Param(str, "reward or penalize.", ("reward", "penalize")),
     "value": Param(float, "Score when it matches."),
     "ignore_case": Param(bool, "Case-insensitive match.")}))
reward_registry.register(RewardDef(
    "post_similarity", PostSimilarity,
    "Meaning kept: cosine of answer and post embeddings (bundled MiniLM), full marks at `full_at`; off-topic ~0.",
    {"scale": Param(float, "Score at full marks."),
     "full_at": Param(float, "Cosine that earns full marks (a good one-line summary reaches ~0.6).")},
    needs_source=True))
reward_registry.register(RewardDef(
    "custom_python", CustomPython, "Your own `reward(completions, **kwargs)` (needs --allow-custom-rewards).",
    {"code": Param(str, "Python source defining reward().")},
    custom_code=True))
