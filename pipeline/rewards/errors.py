"""The two ways a reward call goes wrong, shared by the reward functions and the guard."""

from __future__ import annotations

class RewardFunctionError(RuntimeError):
    """A reward function raised or returned something unusable. Names the reward and the sample."""


class RewardTimeout(RuntimeError):
    """A reward that did not return in time."""
