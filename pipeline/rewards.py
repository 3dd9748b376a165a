"""Reward functions with TRL's signature, a registry of them, and the guard that keeps one bad
reward from killing a run silently.

Every reward takes `(completions, **kwargs)` and returns one float per completion. Completions may be
plain strings or chat messages (`[{"role": "assistant", "content": ...}]`), as TRL passes them.
Malformed completions get a low score, never an exception. Pure Python: no torch import.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

THINK_ANSWER = re.compile(r"^\s*<think>(.+?)</think>\s*<answer>(.+?)</answer>\s*$", re.DOTALL)
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")


class RewardFunctionError(RuntimeError):
    """A reward function raised or returned something unusable. Names the reward and the sample."""


class RewardTimeout(RuntimeError):
    """A reward that did not return in time."""


def completion_text(completion: Any) -> str:
    """Text of one completion, whether TRL passed a string or a list of chat messages.

    >>> completion_text([{"role": "assistant", "content": "hi"}])
    'hi'
    >>> completion_text("plain")
    'plain'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in completion)
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return "" if completion is None else str(completion)


def extract_answer(text: str) -> str:
    """The model's final answer: inside <answer> tags if present, else the last non-empty line.

    >>> extract_answer("<think>2+2</think><answer> 4 </answer>")
    '4'
    >>> extract_answer("so the total is\\n12")
    '12'
    """
    tagged = ANSWER_TAG.findall(text)
    if tagged:
        return tagged[-1].strip()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def parse_number(text: str) -> float | None:
    """Last number in a string, tolerant of thousands separators.

    >>> parse_number("The answer is 1,234.5 apples")
    1234.5
    >>> parse_number("none") is None
    True
    """
    found = NUMBER.findall(text or "")
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower()).strip(" .")


# ---- reward functions (small callable classes: picklable, carry a __name__) --------------------


class LengthTarget:
    """Seed 000's length reward: -|target - length|. 0 is perfect; every unit off costs 1.

    >>> LengthTarget(target=5)(["abcde", "abc", "abcdefg"])
    [0.0, -2.0, -2.0]
    >>> LengthTarget(target=2, unit="words")(["one two three"])
    [-1.0]
    """

    def __init__(self, target: int = 50, unit: str = "chars", name: str = "length_target"):
        if unit not in ("chars", "words"):
            raise ValueError("unit must be 'chars' or 'words'")
        self.target, self.unit, self.__name__ = int(target), unit, name
        self.max_value = 0.0  # exactly on target

    def __call__(self, completions, **kwargs) -> list[float]:
        out = []
        for c in completions:
            text = completion_text(c)
            n = len(text) if self.unit == "chars" else len(text.split())
            out.append(float(-abs(self.target - n)))
        return out


class TokenDiversity:
    """Seed 000's diversity reward: share of unique whitespace tokens, times `scale`. Empty = 0.

    >>> TokenDiversity()(["a b c d", "a a a a", ""])
    [100.0, 25.0, 0.0]
    """

    def __init__(self, scale: float = 100.0, name: str = "token_diversity"):
        self.scale, self.__name__ = float(scale), name
        self.max_value = max(self.scale, 0.0)  # every token different

    def __call__(self, completions, **kwargs) -> list[float]:
        out = []
        for c in completions:
            tokens = completion_text(c).split()
            out.append(self.scale * len(set(tokens)) / len(tokens) if tokens else 0.0)
        return out


class StrictFormat:
    """1.0 when the whole completion is `<think>...</think><answer>...</answer>`, else 0.0.

    >>> StrictFormat()(["<think>a</think>\\n<answer>b</answer>", "<answer>b</answer>"])
    [1.0, 0.0]
    """

    max_value = 1.0

    def __init__(self, name: str = "strict_format"):
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float]:
        return [1.0 if THINK_ANSWER.match(completion_text(c)) else 0.0 for c in completions]


class IncrementalFormat:
    """Partial credit (seed 002): 0.25 per tag that appears exactly once, minus 0.001 per
    character left after </answer>.

    >>> IncrementalFormat()(["<think>x</think><answer>y</answer>", "<think>x", "<answer>y</answer>tail"])
    [1.0, 0.25, 0.496]
    """

    TAGS = ("<think>", "</think>", "<answer>", "</answer>")
    max_value = 1.0

    def __init__(self, name: str = "incremental_format"):
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float]:
        out = []
        for c in completions:
            text = completion_text(c)
            score = sum(0.25 for tag in self.TAGS if text.count(tag) == 1)
            if text.count("</answer>") == 1:
                score -= 0.001 * len(text.split("</answer>")[-1].strip())
            out.append(float(round(score, 6)))
        return out


def _answers(kwargs: dict, n: int, reward: str) -> list[Any]:
    answers = kwargs.get("answer")
    if answers is None:
        raise RewardFunctionError(
            f"Reward '{reward}' needs a reference answer column named 'answer' in the dataset."
        )
    if isinstance(answers, (str, int, float)):
        answers = [answers] * n
    return list(answers)


class ExactAnswer:
    """1.0 when the extracted answer equals the reference (case, spaces and a trailing dot ignored).

    >>> ExactAnswer()(["<answer>Paris</answer>", "london"], answer=["paris", "Paris"])
    [1.0, 0.0]
    """

    needs_answer = True
    max_value = 1.0

    def __init__(self, name: str = "exact_answer"):
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float]:
        refs = _answers(kwargs, len(completions), self.__name__)
        return [
            1.0 if _normalise(extract_answer(completion_text(c))) == _normalise(str(ref)) else 0.0
            for c, ref in zip(completions, refs)
        ]


class NumericTolerance:
    """1.0 when the answer's last number is within `atol` (or `rtol` of the reference), else 0.0.
    Seed 003's correctness reward; works with or without <answer> tags.

    >>> NumericTolerance(atol=0.5)(["<answer>14</answer>", "it is 14.4", "15", "no idea"], answer=["14"] * 4)
    [1.0, 1.0, 0.0, 0.0]
    """

    needs_answer = True
    max_value = 1.0

    def __init__(self, atol: float = 1e-6, rtol: float = 0.0, name: str = "numeric_tolerance"):
        self.atol, self.rtol, self.__name__ = float(atol), float(rtol), name

    def __call__(self, completions, **kwargs) -> list[float]:
        refs = _answers(kwargs, len(completions), self.__name__)
        out = []
        for c, ref in zip(completions, refs):
            got, want = parse_number(extract_answer(completion_text(c))), parse_number(str(ref))
            if got is None or want is None:
                out.append(0.0)
                continue
            ok = abs(got - want) <= max(self.atol, self.rtol * abs(want))
            out.append(1.0 if ok else 0.0)
        return out


class KeywordPresence:
    """`value` when the regex matches (or, with mode='penalize', `-value` when it matches).

    >>> KeywordPresence(pattern=r"\\bTL;DR\\b")(["TL;DR: short", "nothing"])
    [1.0, 0.0]
    >>> KeywordPresence(pattern="sorry", mode="penalize", ignore_case=True)(["Sorry!", "ok"])
    [-1.0, 0.0]
    """

    def __init__(self, pattern: str = "", mode: str = "reward", value: float = 1.0, ignore_case: bool = False,
                 name: str = "keyword_presence"):
        if mode not in ("reward", "penalize"):
            raise ValueError("mode must be 'reward' or 'penalize'")
        if not pattern:
            raise ValueError("pattern must not be empty")
        self.pattern = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        self.value = float(value) if mode == "reward" else -float(value)
        self.max_value = max(self.value, 0.0)
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float]:
        return [self.value if self.pattern.search(completion_text(c)) else 0.0 for c in completions]


class PostSimilarity:
    """How close the answer's meaning is to the text it summarises: the cosine of their sentence
    embeddings (the bundled all-MiniLM-L6-v2), divided by `full_at` and capped at 1, times `scale`.
    An answer that talks about something else ("The post is too long.") scores near 0 however short
    it is. A one-sentence summary rarely gets closer to its post than a cosine of about 0.6 without
    copying it, so `full_at` 0.6 gives full marks there and makes the maximum reachable.

    Needs the summarised text in a `source` column (the bundled TL;DR rows carry their post there).
    The embedder loads on first use, in the process that trains.
    """

    needs_source = True

    def __init__(self, scale: float = 100.0, full_at: float = 0.6, name: str = "post_similarity"):
        if not 0 < full_at <= 1:
            raise ValueError("full_at must be in (0, 1]")
        self.scale, self.full_at, self.__name__ = float(scale), float(full_at), name
        self.max_value = max(self.scale, 0.0)

    def __call__(self, completions, source=None, **kwargs) -> list[float]:
        if source is None:
            raise RewardFunctionError(f"Reward '{self.__name__}' needs the summarised text in a 'source' column "
                                      "(the bundled TL;DR prompts have one).")
        sources = [source] * len(completions) if isinstance(source, str) else list(source)
        texts = [completion_text(c).strip() for c in completions]
        model = sentence_embedder()
        unique = list(dict.fromkeys(sources))
        post_vecs = dict(zip(unique, model.encode(unique, normalize_embeddings=True)))
        answer_vecs = model.encode([t or " " for t in texts], normalize_embeddings=True)
        return [0.0 if not t else self.scale * min(1.0, max(0.0, float((a * post_vecs[s]).sum())) / self.full_at)
                for t, a, s in zip(texts, answer_vecs, sources)]


_EMBEDDER: list = []


def sentence_embedder():
    """The bundled sentence embedder, loaded once per process."""
    if not _EMBEDDER:
        from sentence_transformers import SentenceTransformer

        from pipeline.models import bundled_embedder_dir

        _EMBEDDER.append(SentenceTransformer(str(bundled_embedder_dir()), device="cpu"))
    return _EMBEDDER[0]


class CustomPython:
    """User-typed code defining `reward(completions, **kwargs) -> list[float]`.

    Arbitrary code: the registry only builds it when the app or CLI was started with
    --allow-custom-rewards, and only the trainer subprocess ever calls it.
    """

    def __init__(self, code: str = "", name: str = "custom"):
        self.code, self.__name__ = code, name
        self.max_value = None  # unknown: evaluation reports a plain delta
        namespace: dict[str, Any] = {}
        exec(compile(code, f"<custom reward {name}>", "exec"), namespace)  # noqa: S102 - opt-in only
        fn = namespace.get("reward")
        if not callable(fn):
            raise ValueError("custom reward code must define a function named 'reward(completions, **kwargs)'")
        self._fn = fn

    def __call__(self, completions, **kwargs) -> list[float]:
        texts = [completion_text(c) for c in completions]
        return list(self._fn(texts, **kwargs))

    @staticmethod
    def check(code: str) -> None:
        """Parse the code without running it (the web server never executes custom rewards).

        >>> CustomPython.check("def reward(completions, **kw): return [0.0] * len(completions)")
        >>> CustomPython.check("x = 1")
        Traceback (most recent call last):
        ValueError: custom reward code must define a function named 'reward(completions, **kwargs)'
        """
        import ast

        try:
            tree = ast.parse(code or "", "<custom reward>")
        except SyntaxError as exc:
            raise ValueError(f"custom reward code has a syntax error on line {exc.lineno}: {exc.msg}") from None
        if not any(isinstance(node, ast.FunctionDef) and node.name == "reward" for node in tree.body):
            raise ValueError("custom reward code must define a function named 'reward(completions, **kwargs)'")


# ---- registry ----------------------------------------------------------------------------------


@dataclass
class Param:
    kind: type
    default: Any
    help: str
    choices: tuple = ()


@dataclass
class RewardDef:
    name: str
    factory: Callable[..., Callable]
    description: str
    params: dict[str, Param] = field(default_factory=dict)
    needs_answer: bool = False
    custom_code: bool = False
    needs_source: bool = False


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
    "length_target", LengthTarget, "Seed 000: -|target - length|; peaks at the target length.",
    {"target": Param(int, 50, "Target length."),
     "unit": Param(str, "chars", "Count characters or words.", ("chars", "words"))}))
reward_registry.register(RewardDef(
    "token_diversity", TokenDiversity, "Seed 000: unique-token share x scale; punishes repetition.",
    {"scale": Param(float, 100.0, "Multiplier on the 0..1 share.")}))
reward_registry.register(RewardDef(
    "strict_format", StrictFormat, "1 if the completion is exactly <think>...</think><answer>...</answer>."))
reward_registry.register(RewardDef(
    "incremental_format", IncrementalFormat, "Seed 002: 0.25 per well-formed tag; small penalty for trailing text."))
reward_registry.register(RewardDef(
    "exact_answer", ExactAnswer, "1 if the final answer equals the reference (normalised).", needs_answer=True))
reward_registry.register(RewardDef(
    "numeric_tolerance", NumericTolerance, "Seed 003: 1 if the final number is within tolerance of the reference.",
    {"atol": Param(float, 1e-6, "Absolute tolerance."), "rtol": Param(float, 0.0, "Relative tolerance.")},
    needs_answer=True))
reward_registry.register(RewardDef(
    "keyword_presence", KeywordPresence, "Reward (or penalize) completions matching a regex.",
    {"pattern": Param(str, "TL;DR", "Regular expression to look for."),
     "mode": Param(str, "reward", "reward or penalize.", ("reward", "penalize")),
     "value": Param(float, 1.0, "Score when it matches."),
     "ignore_case": Param(bool, False, "Case-insensitive match.")}))
reward_registry.register(RewardDef(
    "post_similarity", PostSimilarity,
    "Meaning kept: cosine of answer and post embeddings (bundled MiniLM), full marks at `full_at`; off-topic ~0.",
    {"scale": Param(float, 100.0, "Score at full marks."),
     "full_at": Param(float, 0.6, "Cosine that earns full marks (a good one-line summary reaches ~0.6).")},
    needs_source=True))
reward_registry.register(RewardDef(
    "custom_python", CustomPython, "Your own `reward(completions, **kwargs)` (needs --allow-custom-rewards).",
    {"code": Param(str, "def reward(completions, **kwargs):\n    return [0.0 for _ in completions]\n",
                   "Python source defining reward().")},
    custom_code=True))


# ---- guard -------------------------------------------------------------------------------------


def _preview(sample: Any, limit: int = 160) -> str:
    text = completion_text(sample).replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + "..."


class GuardedReward:
    """Wraps a reward so a failure names the reward and shows the sample that broke it.

    policy='fail' raises RewardFunctionError; policy='skip' scores the bad completions None
    (TRL treats None as missing: excluded from the group baseline) and records a warning.

    >>> def bad(completions, **kw): return [1 / len(completion_text(c)) for c in completions]
    >>> bad.__name__ = "inverse_len"
    >>> GuardedReward(bad, policy="skip")(["ab", ""])
    [0.5, None]
    """

    def __init__(self, fn: Callable, policy: str = "fail", on_warning: Callable[[str], None] | None = None,
                 timeout_s: float | None = None):
        self.fn, self.policy, self.on_warning, self.timeout_s = fn, policy, on_warning, timeout_s
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.max_value = getattr(fn, "max_value", None)
        self.warnings: list[str] = []

    def _warn(self, msg: str) -> None:
        self.warnings.append(msg)
        if self.on_warning:
            self.on_warning(msg)

    def _fail_or_skip(self, msg: str, n: int, bad: Iterable[int], partial: list | None = None) -> list:
        if self.policy == "fail":
            raise RewardFunctionError(msg)
        self._warn(msg + " (skipped: scored as missing)")
        bad = set(bad)
        base = partial if partial is not None else [None] * n
        return [None if i in bad else base[i] for i in range(n)]

    def _check_values(self, values: Any, n: int) -> tuple[list | None, str | None, list[int]]:
        try:
            values = list(values)
        except TypeError:
            return None, f"returned {type(values).__name__}, not a list of numbers", list(range(n))
        if len(values) != n:
            return None, f"returned {len(values)} values for {n} completions", list(range(n))
        out, bad = [], []
        for i, v in enumerate(values):
            if v is None:
                out.append(None)
                continue
            try:
                f = float(v)
            except (TypeError, ValueError):
                bad.append(i)
                out.append(None)
                continue
            if not math.isfinite(f):
                bad.append(i)
                out.append(None)
            else:
                out.append(f)
        if bad:
            return out, f"returned a non-finite or non-numeric value ({values[bad[0]]!r})", bad
        return out, None, []

    def _call(self, completions, kwargs):
        """Call the reward; with a timeout, in a worker thread that is abandoned if it never returns
        (Python can't kill a thread: with policy 'fail' the trainer process ends and takes it along)."""
        if not self.timeout_s:
            return self.fn(completions, **kwargs)
        box: dict[str, Any] = {}

        def work():
            try:
                box["value"] = self.fn(completions, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = exc

        worker = threading.Thread(target=work, daemon=True, name=f"reward-{self.__name__}")
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            raise RewardTimeout(f"did not return within {self.timeout_s:g} s (an endless loop, or waiting on "
                                "the network?)")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def __call__(self, completions, **kwargs) -> list:
        n = len(completions)
        try:
            values = self._call(completions, kwargs)
        except RewardTimeout as exc:
            return self._fail_or_skip(f"Reward '{self.__name__}' {exc}", n, range(n))
        except RewardFunctionError as exc:
            return self._fail_or_skip(f"Reward '{self.__name__}': {exc}", n, range(n))
        except Exception as exc:  # noqa: BLE001 - any user reward error is reported, not swallowed
            idx = self._find_offender(completions, kwargs)
            where = f" on completion #{idx}: \"{_preview(completions[idx])}\"" if idx is not None else ""
            msg = f"Reward '{self.__name__}' raised {type(exc).__name__}: {exc}{where}"
            if self.policy == "fail":
                raise RewardFunctionError(msg) from exc
            return self._score_one_by_one(completions, kwargs, msg)
        checked, problem, bad = self._check_values(values, n)
        if problem:
            first = bad[0] if bad else 0
            msg = f"Reward '{self.__name__}' {problem}; first bad completion #{first}: \"{_preview(completions[first])}\""
            return self._fail_or_skip(msg, n, bad, checked)
        return checked

    def _slice_kwargs(self, kwargs: dict, i: int, n: int) -> dict:
        return {k: ([v[i]] if isinstance(v, list) and len(v) == n else v) for k, v in kwargs.items()}

    def _find_offender(self, completions, kwargs) -> int | None:
        n = len(completions)
        for i in range(n):
            try:
                self.fn([completions[i]], **self._slice_kwargs(kwargs, i, n))
            except Exception:  # noqa: BLE001
                return i
        return None

    def _score_one_by_one(self, completions, kwargs, msg: str) -> list:
        self._warn(msg + " (skipped: scored as missing)")
        n, out = len(completions), []
        for i in range(n):
            try:
                v = self.fn([completions[i]], **self._slice_kwargs(kwargs, i, n))
                v = float(list(v)[0])
                out.append(v if math.isfinite(v) else None)
            except Exception:  # noqa: BLE001
                out.append(None)
        return out


def build_rewards(specs, policy: str = "fail", allow_custom: bool = False,
                  on_warning: Callable[[str], None] | None = None,
                  timeout_s: float | None = None) -> tuple[list[GuardedReward], list[float]]:
    """Guarded reward callables and their weights, with unique names (metric keys)."""
    funcs, weights, seen = [], [], {}
    for spec in specs:
        seen[spec.name] = seen.get(spec.name, 0) + 1
        name = spec.name if seen[spec.name] == 1 else f"{spec.name}_{seen[spec.name]}"
        fn = reward_registry.build(spec, allow_custom=allow_custom, name=name)
        funcs.append(GuardedReward(fn, policy=policy, on_warning=on_warning, timeout_s=timeout_s))
        weights.append(float(spec.weight))
    return funcs, weights


def reward_maximum(funcs: list[Callable], weights: list[float]) -> float | None:
    """Best possible weighted total, or None when a reward declares no maximum (or has a negative weight,
    whose best is the reward's minimum).

    >>> reward_maximum([LengthTarget(), TokenDiversity()], [1.0, 1.0])
    100.0
    >>> reward_maximum([LengthTarget(), CustomPython("def reward(c, **k): return [0] * len(c)")], [1, 1]) is None
    True
    """
    total = 0.0
    for f, w in zip(funcs, weights):
        best = getattr(f, "max_value", None)
        if best is None or w < 0:
            return None
        total += w * best
    return total


def score(funcs: list[Callable], weights: list[float], completions: list, **kwargs) -> dict[str, Any]:
    """Per-reward scores and the weighted total for a list of completions (None = missing)."""
    from pipeline.advantages import weighted_totals

    per = {f.__name__: f(completions, **kwargs) for f in funcs}
    return {"per_reward": per, "total": weighted_totals(per, {f.__name__: w for f, w in zip(funcs, weights)})}
