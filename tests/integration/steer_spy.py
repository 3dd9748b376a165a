"""The trainer with a spy on the values it trains with (test instrumentation, never used by the app).

    python -m tests.integration.steer_spy --run-dir DIR [any pipeline.train argument]

Each step appends what the trainer really used to $STEER_SPY_LOG: the reward weights TRL multiplies the
scores by, the temperature sampling and the log-probabilities use (the studio's path and the one TRL's
fused LM head holds), the optimizer's learning rate and beta. With $STEER_AT=N and $STEER_REQUESTS (a JSON
list of changes), the spy asks for each change through pipeline.steer once step N has ended, as a user
would between steps; with $STEER_KILL_AT=N it asks for $STEER_PENDING (when set) right after the step-N
checkpoint is marked complete, then SIGKILLs the trainer before it can apply it.
"""

import json
import os
import signal
import sys
from pathlib import Path

from pipeline.run_folder import run_files, runs
from pipeline.setup import steering as steer


def fused_head_temperature(trainer):
    """The temperature TRL's fused LM head divides by (a value its patched forward closes over)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    forward = vars(base).get("forward")
    if forward is None:
        return None
    func = forward.__func__
    return dict(zip(func.__code__.co_freevars, func.__closure__))["temperature"].cell_contents


def main() -> int:
    from transformers import TrainerCallback

    from pipeline import train

    log_path = os.environ["STEER_SPY_LOG"]
    make_trainer_class = train.make_trainer_class

    def note(trainer, **values):
        runs.append_jsonl(log_path, {"step": trainer.state.global_step + 1, **values})

    class Asker(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if os.environ.get("STEER_AT") == str(state.global_step):
                for changes in json.loads(os.environ["STEER_REQUESTS"]):
                    runs.append_jsonl(Path(args.output_dir) / run_files.STEER_REQUESTS, {"changes": changes})

        def on_save(self, args, state, control, **kwargs):
            if os.environ.get("STEER_KILL_AT") == str(state.global_step):
                if os.environ.get("STEER_PENDING"):
                    steer.request(args.output_dir, json.loads(os.environ["STEER_PENDING"]))
                os.kill(os.getpid(), signal.SIGKILL)

    def spying_trainer_class():
        base = make_trainer_class()

        class SpyTrainer(base):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.add_callback(Asker())

            def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
                note(self, weights=self.reward_weights.tolist())
                return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

            def _generate_and_score_completions(self, inputs):
                note(self, sampling_temperature=self.generation_config.temperature, logps_temperature=self.temperature,
                     fused_head_temperature=fused_head_temperature(self), beta=self.beta)
                return super()._generate_and_score_completions(inputs)

            def training_step(self, model, inputs, num_items_in_batch=None):
                note(self, lr=self.optimizer.param_groups[0]["lr"])
                return super().training_step(model, inputs, num_items_in_batch)

        return SpyTrainer

    train.make_trainer_class = spying_trainer_class
    return train.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
