"""Score the base model and the tuned model on the run's held-out prompts with the run's rewards.

    python -m pipeline.evaluate --run-dir DIR [--limit 32]

Writes DIR/eval.json, and its progress to DIR/eval_status.json (running with done/total prompts and an
ETA, then done, failed or stopped) so the app's Runs panel can follow it; SIGTERM stops it. A runner job
(pipeline/run_folder/jobs.py: EVALUATE). Decoding is
greedy so the comparison is repeatable (the GRPO tutorial's advice: judge on data the run never trained
on, with the same rewards).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

from pipeline.run_folder import run_files, runs
from pipeline.setup.config import RunConfig
from pipeline.setup.data import load_dataset_split
from pipeline.run_folder.jobs import EVALUATE
from pipeline.run_folder.jobstate import JobWorker, job_worker
from pipeline.run_folder.paths import keep_private
from pipeline.training.probes import reward_kwargs
from pipeline.rewards import build_rewards, reward_maximum, score
from pipeline.training.paired_gain import gain_sentence, paired_gain
from pipeline.training.task_metrics import headline, task_metrics


def _summary(scored: dict) -> dict:
    totals = [t for t in scored["total"] if t is not None]
    return {
        "reward_mean": statistics.fmean(totals) if totals else None,
        "rewards": {name: statistics.fmean([v for v in vals if v is not None]) if any(v is not None for v in vals)
                    else None for name, vals in scored["per_reward"].items()},
    }


def gap_closed(base: float | None, tuned: float | None, best: float | None) -> float | None:
    """Share of the distance from the base model's mean reward to the best possible reward that tuning
    covered: 0 = no better than base, 1 = perfect. None when the reward has no declared maximum.

    >>> gap_closed(-50.0, 25.0, 100.0)
    0.5
    >>> gap_closed(-50.0, 25.0, None) is None
    True
    """
    if base is None or tuned is None or best is None or best - base <= 1e-12:
        return None
    return (tuned - base) / (best - base)


def report(result: dict) -> str:
    """The CLI's summary of an eval.json."""
    b, t = result["base"]["reward_mean"], result["tuned"]["reward_mean"]
    lines = [f"{result['n']} held-out prompts (greedy): base mean reward {b:.3f}, tuned {t:.3f} "
             f"(delta {result['delta']:+.3f})."]
    if result.get("gap_closed") is not None:
        lines.append(f"gap_closed = (tuned - base) / (max - base) = ({t:.2f} - {b:.2f}) / "
                     f"({result['reward_max']:.2f} - {b:.2f}) = {result['gap_closed']:.1%}")
    else:
        lines.append("gap_closed: a reward declares no maximum (e.g. custom code), so only the delta is shown.")
    if result.get("paired"):
        lines.append(gain_sentence(result["paired"]))
    hb, ht = headline(result["base"].get("task")), headline(result["tuned"].get("task"))
    if hb and ht:
        extra = ""
        if result["base"]["task"]["kind"] == "summary":
            extra = (f" (grounded {result['base']['task']['grounded']:.2f} -> "
                     f"{result['tuned']['task']['grounded']:.2f}, "
                     f"on topic {result['base']['task']['on_topic']:.0%} -> {result['tuned']['task']['on_topic']:.0%})")
        if "format_compliance" in result["base"]["task"]:
            extra = (f" (format compliance {result['base']['task']['format_compliance']:.0%} -> "
                     f"{result['tuned']['task']['format_compliance']:.0%})")
        lines.append(f"task metric, not a reward: {hb[0]} base {hb[1]:.3f}, tuned {ht[1]:.3f}{extra}")
        invented = result["base"]["task"].get("invented_details"), result["tuned"]["task"].get("invented_details")
        if None not in invented:
            lines.append(f"answers with a film number, title, name, year, genre or director the films given lack: "
                         f"base {invented[0]:.1%}, tuned {invented[1]:.1%}")
        recall = result["base"]["task"].get("retrieval_recall")
        if recall is not None:
            lines.append(f"the right film was among the retrieved plots for {recall:.1%} of the questions "
                         "(retrieval recall: the most accuracy can reach)")
    return "\n".join(lines)


def tuned_model_path(run_dir: Path) -> Path:
    merged = run_files.merged_model(run_dir)
    if merged is not None:
        return merged
    raise FileNotFoundError(f"{run_dir.name} has no merged model yet (it is still running, failed, or was "
                            "started with merge_at_end off).")


BATCH = 8  # prompts generated together; progress is reported after each batch


def evaluate(run_dir: Path, limit: int = 32,
             progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Score base and tuned on the held-out prompts and write eval.json. `progress(done, total, phase)`
    is called as prompts are answered (total counts each prompt twice: base and tuned)."""
    from pipeline.training.generate import generate_batch
    from pipeline.models.loading import load_model

    progress = progress or (lambda done, total, phase: None)
    cfg = RunConfig.load(run_dir / run_files.CONFIG)
    held_path = run_dir / run_files.EVAL_PROMPTS
    held = json.loads(held_path.read_text()) if held_path.exists() else load_dataset_split(cfg.dataset, cfg.seed)[1]
    if not held:
        raise ValueError("This run has no held-out prompts (eval_fraction was 0).")
    held = held[:limit]
    prompts = [r["prompt"] for r in held]
    extra = reward_kwargs(held)  # every dataset column, as TRL passes them (answer, source, ...)
    funcs, weights = build_rewards(cfg.rewards, policy="skip")

    result: dict = {"run": run_dir.name, "n": len(held), "max_new_tokens": cfg.max_completion_length,
                    "decoding": "greedy"}
    texts: dict[str, list[str]] = {}
    total = 2 * len(prompts)
    for side, (which, model_id) in enumerate((("base", cfg.model), ("tuned", str(tuned_model_path(run_dir))))):
        t0 = time.time()
        done = side * len(prompts)
        progress(done, total, f"loading the {which} model")
        model, tokenizer = load_model(model_id, precision=cfg.precision)
        texts[which] = []
        # The same batches generate_batch makes on its own, so the greedy answers don't change.
        for start in range(0, len(prompts), BATCH):
            progress(done + start, total, f"answering with the {which} model")
            texts[which] += generate_batch(model, tokenizer, prompts[start:start + BATCH],
                                           max_new_tokens=cfg.max_completion_length)
        progress(done + len(prompts), total, f"scoring the {which} model's answers")
        scored = score(funcs, weights, texts[which], **extra)
        result[which] = _summary(scored) | {"seconds": round(time.time() - t0, 1), "totals": scored["total"]}
        del model
        result[which]["task"] = task_metrics(held, texts[which])
    b, t = result["base"]["reward_mean"], result["tuned"]["reward_mean"]
    result["delta"] = (t - b) if b is not None and t is not None else None
    result["reward_max"] = reward_maximum(funcs, weights)
    result["gap_closed"] = gap_closed(b, t, result["reward_max"])
    result["paired"] = paired_gain(result["base"]["totals"], result["tuned"]["totals"])  # more than chance?
    result["samples"] = [
        {"prompt": p[-1]["content"], "base": bt, "tuned": tt,
         "base_total": result["base"]["totals"][i], "tuned_total": result["tuned"]["totals"][i]}
        for i, (p, bt, tt) in enumerate(zip(prompts, texts["base"], texts["tuned"]))
    ]
    runs.write_json_atomic(run_dir / run_files.EVAL_RESULT, result)
    return result


class StatusReporter:
    """Writes the evaluator's progress to eval_status.json: done/total prompts, phase and an ETA."""

    def __init__(self, job: JobWorker):
        self.job = job

    def __call__(self, done: int, total: int, phase: str) -> None:
        elapsed = time.time() - self.job.started
        # Model loads are inside the elapsed time, so early estimates run long; it settles as prompts finish.
        eta = elapsed / done * (total - done) if done else None
        self.job.write("running", done=done, total=total, phase=phase,
                       eta_s=round(eta, 1) if eta is not None else None, elapsed_s=round(elapsed, 1))

    def elapsed(self) -> dict:
        return {"elapsed_s": round(time.time() - self.job.started, 1)}


def failure_message(exc: BaseException) -> str:
    from pipeline.models.loading import is_out_of_memory, out_of_memory_message

    if is_out_of_memory(exc):
        return out_of_memory_message("evaluating", "Evaluate fewer prompts (--limit) or free memory first.")
    return str(exc)


def main(argv: list[str] | None = None) -> int:
    keep_private()  # what it writes is for this user's eyes only (pipeline/run_folder/paths.py)
    parser = argparse.ArgumentParser(prog="python -m pipeline.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--limit", type=int, default=32, help="Evaluate at most this many held-out prompts.")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir).resolve()
    if not (run_dir / run_files.CONFIG).exists():
        print(f"Evaluation failed: {run_dir} is not a run directory (it has no config.json).", file=sys.stderr)
        return 1
    # The tuned model is the run's own merged folder, and the run folder is the one named on this command line:
    # allowed wherever it is (a headless run may live outside the data folder), beside the operator's folders.
    from pipeline.models.sources import allow_local_dirs, allowed_dirs

    allow_local_dirs([*allowed_dirs()[1:], run_dir])
    reporter: StatusReporter | None = None
    # running -> done, or stopped (SIGTERM, the app's Stop) or failed (with the reason): eval_status.json.
    with job_worker(run_dir, EVALUATE, failure=failure_message, ending=lambda: reporter.elapsed() if reporter else {},
                    limit=args.limit, done=0, total=None, phase="starting", eta_s=None) as job:
        reporter = StatusReporter(job)
        result = evaluate(run_dir, args.limit, progress=reporter)
        job.finish("done", done=2 * result["n"], total=2 * result["n"], phase="done", eta_s=0,
                   delta=result["delta"], gap_closed=result["gap_closed"], n=result["n"], **reporter.elapsed())
    if job.state == "stopped":
        print("Evaluation stopped.", file=sys.stderr)
    elif job.state == "failed":
        print(f"Evaluation failed: {job.error}", file=sys.stderr)
    else:
        print(report(result))
        print("Wrote eval.json.")
    return job.exit_code


if __name__ == "__main__":
    sys.exit(main())
