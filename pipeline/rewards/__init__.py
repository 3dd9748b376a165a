"""Rewards with TRL's signature: every reward takes `(completions, **kwargs)` and returns one float per
completion; completions may be plain strings or chat messages, as TRL passes them. Malformed completions
get a low score, never an exception. Pure Python: no torch import (the embedder loads on first use).

Where things live (split by kind, as TRL splits trl/rewards):
    text.py              completion text, final answer, last number
    style_rewards.py     length target, token diversity (the GRPO recipe's pair)
    format_rewards.py    <think>/<answer> tags, regex presence, film citations
    accuracy_rewards.py  exact answer, numeric tolerance, movie title (need a reference answer)
    grounding.py         what an answer says that the films it was given lack; the film details reward
    meaning_rewards.py   post similarity (sentence embeddings)
    custom.py            user-written Python (opt-in)
    registry.py          names -> reward classes, typed parameters; a new reward is registered here
    guard.py             failure and timeout handling around each reward
    scoring.py           build a run's guarded rewards, score completions, best possible total
    advantages.py        group-relative advantages of the weighted totals, as TRL's GRPOTrainer computes them
"""

from pipeline.rewards.accuracy_rewards import ExactAnswer, MovieTitle, NumericTolerance
from pipeline.rewards.custom import CustomPython
from pipeline.rewards.errors import RewardFunctionError, RewardTimeout
from pipeline.rewards.format_rewards import FilmCitation, IncrementalFormat, KeywordPresence, StrictFormat
from pipeline.rewards.grounding import FilmDetails
from pipeline.rewards.guard import GuardedReward, wait_for_reward_threads
from pipeline.rewards.meaning_rewards import PostSimilarity, sentence_embedder
from pipeline.rewards.registry import Param, RewardDef, RewardRegistry, reward_registry
from pipeline.rewards.scoring import build_rewards, reward_maximum, score
from pipeline.rewards.style_rewards import LengthTarget, TokenDiversity
from pipeline.rewards.text import completion_text, extract_answer, parse_number

__all__ = [
    "CustomPython", "ExactAnswer", "FilmCitation", "FilmDetails", "GuardedReward", "IncrementalFormat",
    "KeywordPresence", "LengthTarget", "MovieTitle", "NumericTolerance", "Param", "PostSimilarity", "RewardDef",
    "RewardFunctionError", "RewardRegistry", "RewardTimeout", "StrictFormat", "TokenDiversity", "build_rewards",
    "completion_text", "extract_answer", "parse_number", "reward_maximum", "reward_registry", "score",
    "sentence_embedder", "wait_for_reward_threads",
]
