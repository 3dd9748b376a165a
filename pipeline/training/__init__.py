"""GRPO training: the trainer's TRL side (hooks, callback, metrics), held-out probes and task metrics, health
warnings, sampling and generation, the learnability scan and pre-flight."""
