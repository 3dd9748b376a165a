"""The names of the files and folders in a run folder (`data/runs/<run>/`), in one place: what each holds,
who writes it and when is in docs/run-files.md. A leaf that imports nothing of ours, so every module, the
trainer process included, can name a run file without a string of its own. No torch or gradio import.
"""

from __future__ import annotations

from pathlib import Path

# The run itself, written once at creation.
OWNER = "owner.json"  # the login that started the run
CONFIG = "config.json"  # its RunConfig; also what marks a folder as a run (a merged model has one too)

# Training (pipeline/train.py and the launcher).
LAUNCHES = "launches.jsonl"  # one line per trainer start, with its overrides
COMMAND = "command.json"  # the launch command and its process count
LAUNCHER = "launcher.json"  # pid and start of the process the app launched
STATUS = "status.json"  # the training's state
STDOUT_LOG = "stdout.log"  # the launched trainer's stdout and stderr
TRAIN_LOG = "train.log"  # the trainer's own log
METRICS = "metrics.jsonl"  # one line per step
GROUPS = "groups.jsonl"  # per step, each prompt's group of completions
TOKENS = "tokens.jsonl"  # per step, each completion of the groups token by token: log-prob and entropy
EVALS = "evals.jsonl"  # one line per held-out probe
EVAL_PROMPTS = "eval_prompts.json"  # the held-out prompts
STEER_REQUESTS = "steer_requests.jsonl"  # changes asked for while it trains (the app, the steer CLI, a user)
STEERING = "steering.jsonl"  # the changes the trainer applied, at which step, or why it refused one
TENSORBOARD = "tensorboard"  # TensorBoard's event files, when asked for
CHECKPOINT_PREFIX = "checkpoint-"  # checkpoint-N/ folders
CHECKPOINT_MARKER = ".complete"  # written into a checkpoint folder once its save finished
ADAPTER = "adapter"  # the LoRA adapter
MERGED = "merged"  # base + LoRA merged, ready for transformers
# A run started from another run's tuned model (its next stage; pipeline/run_folder/stages.py).
STAGE_BASE = "start_model"  # the model it started from, its own (hard links to the earlier run's merged files)
STAGE_FILE = "stage.json"  # inside start_model/: the run and step that model came from

# Evaluation (pipeline/evaluate.py).
EVAL_STATUS = "eval_status.json"
EVAL_LAUNCHER = "eval_launcher.json"
EVAL_LOG = "eval.log"
EVAL_RESULT = "eval.json"

# A push to the Hub (pipeline/export.py).
PUSH_STATUS = "push_status.json"
PUSH_LAUNCHER = "push_launcher.json"
PUSH_LOG = "push.log"

# The runs folder itself (not a run): one Start, Resume or Delete at a time.
START_LOCK = ".start.lock"
# The runs folder's queue of trainings waiting for the machine (pipeline/run_folder/run_queue.py).
QUEUE = ".queue.json"


def merged_model(run_dir: str | Path) -> Path | None:
    """The run's merged model folder when one was written (its config.json is the last file a save leaves),
    else None."""
    path = Path(run_dir) / MERGED
    return path if (path / CONFIG).exists() else None


def checkpoint(run_dir: str | Path, step: int) -> Path:
    """Where the checkpoint of `step` lives.

    >>> checkpoint("r", 12).as_posix()
    'r/checkpoint-12'
    """
    return Path(run_dir) / f"{CHECKPOINT_PREFIX}{int(step)}"
