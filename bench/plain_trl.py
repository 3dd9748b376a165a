"""Reference: seed 000's TRL + LoRA recipe, adapted to the installed TRL, with no GRPO Studio code.

Used by bench/train_step.py as the baseline. It trains on the same prompts, model folder and
rewards as the pipeline, and prints one JSON line with its per-step timings.

    python bench/plain_trl.py --model DIR --prompts prompts.json --steps N [--gradient-checkpointing]

Prints the wall-clock time of every logged step (the moment TRL hands the step's logs to callbacks),
so the benchmark can time consecutive steps the same way for both sides.
"""

import argparse
import json
import time

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer


def reward_len(completions, **kwargs):
    return [-abs(50 - len(c[0]["content"])) for c in completions]


def reward_token_diversity(completions, **kwargs):
    out = []
    for c in completions:
        tokens = c[0]["content"].split()
        out.append(len(set(tokens)) / len(tokens) * 100 if tokens else 0)
    return out


class Timer(TrainerCallback):
    def __init__(self):
        self.steps, self.lengths, self.log_times = [], [], []

    def on_step_begin(self, args, state, control, **kw):
        self.t0 = time.time()

    def on_step_end(self, args, state, control, **kw):
        self.steps.append(time.time() - self.t0)

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "completions/mean_length" in logs:
            self.lengths.append(logs["completions/mean_length"])
            self.log_times.append(time.time())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompts", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out", default="/tmp/plain_trl_out")
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--max-completion-length", type=int, default=48)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--batch", type=int, default=0, help="completions per step (default: G)")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--lora-dropout", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()

    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16 if a.bf16 else torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    prompts = json.load(open(a.prompts))
    dataset = Dataset.from_list([{"prompt": p} for p in prompts])
    args = GRPOConfig(
        output_dir=a.out, use_cpu=not torch.cuda.is_available(), bf16=a.bf16,
        learning_rate=a.lr, lr_scheduler_type="constant_with_warmup", logging_steps=1,
        per_device_train_batch_size=a.batch or a.generations, num_generations=a.generations,
        max_completion_length=a.max_completion_length, max_steps=a.steps, save_strategy="no",
        temperature=a.temperature, beta=a.beta, report_to="none", gradient_checkpointing=a.gradient_checkpointing,
        seed=42,
        disable_tqdm=True,
    )
    timer = Timer()
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=[reward_len, reward_token_diversity],
        args=args, train_dataset=dataset,
        peft_config=LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=32, lora_dropout=a.lora_dropout,
                               target_modules="all-linear"),
        callbacks=[timer],
    )
    trainer.train()
    print("RESULT " + json.dumps({"step_seconds": timer.steps, "completion_lengths": timer.lengths,
                                  "log_times": timer.log_times, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
