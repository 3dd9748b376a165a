"""The guard around every reward: a failure names the reward and the sample that broke it; a timeout
stops a reward that hangs; policy fail or skip decides what the run does next."""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, Iterable

from pipeline.rewards.errors import RewardFunctionError, RewardTimeout
from pipeline.rewards.text import completion_text

THREAD_PREFIX = "reward-"  # names the worker threads of rewards with a timeout


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
            return None, f"returned {type(values).__name__}, not a list of numbers (one per completion)", []
        if len(values) != n:
            return None, f"returned {len(values)} values for {n} completions: return one number per completion", []
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

        worker = threading.Thread(target=work, daemon=True, name=f"{THREAD_PREFIX}{self.__name__}")
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
            if isinstance(exc, KeyError) and kwargs:  # most often a dataset column the run does not have
                msg += f" (the keyword arguments it gets: {', '.join(sorted(kwargs))})"
            if self.policy == "fail":
                raise RewardFunctionError(msg) from exc
            return self._score_one_by_one(completions, kwargs, msg)
        checked, problem, bad = self._check_values(values, n)
        if problem:
            msg = f"Reward '{self.__name__}' {problem}"
            if bad:  # some values were bad; otherwise the whole answer was (its type or length)
                msg += f"; first bad completion #{bad[0]}: \"{_preview(completions[bad[0]])}\""
            return self._fail_or_skip(msg, n, bad or range(n), checked)
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


def wait_for_reward_threads(timeout_s: float = 3.0) -> bool:
    """Let rewards that timed out (abandoned in their worker threads) finish; False if one still runs.
    A process must not reach interpreter shutdown with such a thread alive: it can abort there."""
    deadline = time.time() + timeout_s
    for thread in [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]:
        thread.join(max(0.0, deadline - time.time()))
    return not any(t.is_alive() for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX))
