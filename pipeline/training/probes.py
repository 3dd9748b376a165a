"""Probe evaluations during training: every few steps, answer the same held-out prompts greedily and
score them with the run's rewards, so the UI can show the learning while it happens.

The probe prompts are the first `probe_prompts` held-out rows (never trained on, the same every
time). Step 0 is probed before the first update: LoRA's B matrices start at zero, so that is the
base model. Each probe appends one line to run_dir/evals.jsonl (rank 0 only):

    {"step", "reward", "rewards": {name: mean}, "task": task_metrics or null, "seconds",
     "samples": [{"prompt", "completion", "total", "rewards": {name: value}}]}

The pure helpers here need no torch; the callback imports transformers and torch late.
"""

from __future__ import annotations

import logging
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

from pipeline.run_folder import run_files, runs
from pipeline.setup.config import RunConfig
from pipeline.run_folder.jsonio import json_number
from pipeline.training.grpo_trainer import PHASE_PROBE, first_group_phase
from pipeline.training.task_metrics import task_metrics

log = logging.getLogger("grpo_studio.probes")

PROBE_FILE = run_files.EVALS


# ---- pure helpers ------------------------------------------------------------------------------


def should_probe(step: int, every: int, max_steps: int, stopping: bool = False) -> bool:
    """Probe at step 0, every `every` steps, and at the last step (the planned end, or a Stop). A periodic
    probe closer to the planned end than half the period is left out: the end's own probe follows at once,
    and each probe costs seconds of a CPU run (16 steps every 5: 0, 5, 10, 16, not 15 and 16 as well).

    >>> [s for s in range(0, 17) if should_probe(s, 5, 16)]
    [0, 5, 10, 16]
    >>> [s for s in range(0, 21) if should_probe(s, 5, 20)]
    [0, 5, 10, 15, 20]
    >>> should_probe(7, 5, 12, stopping=True), should_probe(7, 0, 12)
    (True, False)
    """
    if every <= 0:
        return False
    if step >= max_steps or stopping or step == 0:
        return True
    return step % every == 0 and 2 * (max_steps - step) >= every


def prompt_text(prompt: Any) -> str:
    """The last user message of a chat prompt (what the person asked), or the prompt itself.

    >>> prompt_text([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    'Hi'
    >>> prompt_text("plain text")
    'plain text'
    """
    if isinstance(prompt, list):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        last = users[-1] if users else (prompt[-1] if prompt else {})
        return str(last.get("content", "")) if isinstance(last, dict) else str(last)
    return str(prompt)


def reward_kwargs(rows: list[dict]) -> dict[str, list]:
    """Dataset columns passed to the rewards, as TRL passes them: one list per column (prompt included).

    >>> reward_kwargs([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2", "id": 7}])
    {'prompts': ['a', 'b'], 'answer': ['1', '2']}
    """
    shared = set.intersection(*(set(r) for r in rows)) if rows else set()
    out: dict[str, list] = {"prompts": [r["prompt"] for r in rows]}
    for key in sorted(shared - {"prompt"}):
        out[key] = [r[key] for r in rows]
    return out


def _mean(values: list) -> float | None:
    vals = [v for v in (json_number(x) for x in values) if v is not None]
    return statistics.fmean(vals) if vals else None


def probe_record(step: int, rows: list[dict], completions: list[str], per_reward: dict[str, list],
                 totals: list, seconds: float) -> dict:
    """One evals.jsonl line from the probe's completions and their scores.

    >>> rec = probe_record(5, [{"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"}], ["4"],
    ...                    {"exact_answer": [1.0]}, [2.0], seconds=0.123)
    >>> rec["reward"], rec["rewards"], rec["task"]["accuracy"], rec["samples"][0]["prompt"], rec["seconds"]
    (2.0, {'exact_answer': 1.0}, 1.0, '2+2?', 0.12)
    """
    names = list(per_reward)
    samples = [
        {"prompt": prompt_text(row["prompt"]), "completion": text, "total": json_number(totals[i]),
         "rewards": {n: json_number(per_reward[n][i]) for n in names}}
        for i, (row, text) in enumerate(zip(rows, completions))
    ]
    return {
        "step": int(step),
        "reward": _mean(totals),
        "rewards": {n: _mean(per_reward[n]) for n in names},
        "task": task_metrics(rows, completions),
        "seconds": round(seconds, 2),
        "samples": samples,
    }


def probed_steps(run_dir: Path) -> set[int]:
    return {r["step"] for r in runs.read_evals(run_dir)}


# ---- generation and scoring (torch imported late) ----------------------------------------------


def generate_greedy(model, tokenizer, prompts: list, max_new_tokens: int) -> list[str]:
    """Greedy completions for all prompts in one left-padded batch, with the chat template the trainer
    uses. Leaves the model in the mode (train/eval) it was in and the tokenizer's padding side as it was."""
    import torch

    from pipeline.models.engine import cpu_decoding, merged_adapter

    was_training, side = model.training, tokenizer.padding_side
    conversational = bool(prompts) and isinstance(prompts[0], list)
    try:
        model.eval()  # no LoRA dropout, and gradient checkpointing (training-only) stays out of the way
        tokenizer.padding_side = "left"  # decoder-only models continue from the right edge
        if conversational:
            enc = tokenizer.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True, padding=True,
                                                return_dict=True, return_tensors="pt")
        else:
            enc = tokenizer(prompts, padding=True, return_tensors="pt")
        enc = {k: v.to(model.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        # The adapter folded into the weights while decoding (no LoRA branch per layer), on the CPU's decoding
        # threads: the same greedy answers, in less time (pipeline/models/engine.py).
        with torch.no_grad(), merged_adapter(model), cpu_decoding(model.device):
            ids = model.generate(**enc, max_new_tokens=int(max_new_tokens), do_sample=False, temperature=None,
                                 top_p=None, top_k=None, use_cache=True, pad_token_id=tokenizer.pad_token_id)
        return tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)


class Prober:
    """Answers the probe prompts with the current weights, scores them, and appends the line."""

    def __init__(self, run_dir: Path, cfg: RunConfig, tokenizer, rows: list[dict], allow_custom_rewards: bool = False):
        from pipeline.rewards import build_rewards

        self.run_dir, self.cfg, self.tokenizer, self.rows = Path(run_dir), cfg, tokenizer, rows
        # 'skip': a reward that fails on a probe answer leaves a gap in the chart, never ends the run.
        self.funcs, self.weights = build_rewards(cfg.rewards, policy="skip", allow_custom=allow_custom_rewards,
                                                 on_warning=lambda msg: log.warning("Probe: %s", msg),
                                                 timeout_s=cfg.reward_timeout_s)

    def probe(self, model, step: int) -> dict:
        from pipeline.rewards import score

        t0 = time.time()
        prompts = [r["prompt"] for r in self.rows]
        texts = generate_greedy(model, self.tokenizer, prompts, self.cfg.max_completion_length)
        # Rewards see completions as TRL hands them over: chat messages for chat prompts.
        completions = [[{"role": "assistant", "content": t}] for t in texts] if isinstance(prompts[0], list) else texts
        scored = score(self.funcs, self.weights, completions, **reward_kwargs(self.rows))
        for g in self.funcs:
            g.warnings.clear()  # already logged; the train metrics line reports its own
        record = probe_record(step, self.rows, texts, scored["per_reward"], scored["total"], time.time() - t0)
        runs.append_jsonl(self.run_dir / PROBE_FILE, record)
        log.info("Probe at step %d: held-out reward %s on %d prompts (%.1f s)", step,
                 "-" if record["reward"] is None else f"{record['reward']:.3f}", len(self.rows), record["seconds"])
        return record


def make_probe_callbacks(run_dir: Path, cfg: RunConfig, tokenizer, eval_rows: list[dict],
                         allow_custom_rewards: bool = False, clock=None) -> list:
    """The callback list entry for probes: [] when probes are off or there are no held-out rows. `clock` (the
    trainer's StepClock) learns each probe's time, so the ETA counts the probes to come."""
    rows = eval_rows[:cfg.probe_prompts]
    if cfg.probe_every <= 0 or not rows:
        if cfg.probe_every > 0:
            log.info("No held-out prompts (eval_fraction is 0): probes are off.")
        return []
    from transformers import TrainerCallback

    prober = Prober(run_dir, cfg, tokenizer, rows, allow_custom_rewards)
    if clock is not None:
        clock.probes_at = lambda step, max_steps: should_probe(step, cfg.probe_every, max_steps)

    def safe_probe(model, step: int) -> None:
        # The run header says a probe is running (at step 0, sampling the first group comes next).
        runs.write_status(run_dir, "running", phase=PHASE_PROBE.format(step=step))
        # A probe is a view on training: if it fails, say so in the log and train on.
        try:
            record = prober.probe(model, step)
            if clock is not None:
                clock.probe_seconds = record["seconds"]
        except Exception:  # noqa: BLE001
            log.warning("Probe at step %d failed; training continues:\n%s", step, traceback.format_exc())
        if step == 0:
            generation = runs.read_status(run_dir).get("generation", "eager")
            runs.write_status(run_dir, "running", phase=first_group_phase(generation, resume=False))
        else:
            runs.write_status(run_dir, "running", phase=None)

    class ProbeCallback(TrainerCallback):
        """Probes at step 0 (before any update), every probe_every steps, and at the last step."""

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            # A resumed run starts past step 0, or has its step-0 line already.
            if state.is_world_process_zero and state.global_step == 0 and 0 not in probed_steps(run_dir):
                safe_probe(model, 0)

        def on_step_end(self, args, state, control, model=None, **kwargs):
            # Runs after the studio callback, so a Stop request (should_training_stop) is already visible.
            if state.is_world_process_zero and should_probe(state.global_step, cfg.probe_every, state.max_steps,
                                                            control.should_training_stop):
                safe_probe(model, state.global_step)

    return [ProbeCallback()]
