"""Two torchrun ranks run the steering callback on a stand-in trainer (test instrumentation, no model).

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m tests.integration.steer_ranks DIR

Rank 0 steers the run folder DIR/rank0, where a change request waits; rank 1 is given DIR/rank1, which
has none, so any change it applies came from rank 0. Each rank writes what it holds after the step
boundary to DIR/seen-<rank>.json.
"""

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace


def stand_in_trainer():
    import torch

    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=3e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model = torch.nn.Linear(1, 1)
    return SimpleNamespace(
        reward_weights=torch.tensor([1.0, 1.0, 2.0]), studio_weights={}, temperature=1.0,
        generation_config=SimpleNamespace(temperature=1.0), generation_kwargs={"temperature": 1.0},
        optimizer=optimizer, lr_scheduler=scheduler, beta=0.04, model=model,
        accelerator=SimpleNamespace(unwrap_model=lambda m: m))


def main(out: Path) -> int:
    import torch.distributed as dist

    from pipeline.setup.config import RunConfig
    from pipeline.training.steer_trainer import make_steering_callback

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    trainer, weights = stand_in_trainer(), [1.0, 1.0, 2.0]
    callback = make_steering_callback(trainer, out / f"rank{rank}", RunConfig(), weights)
    callback.on_train_begin(None, SimpleNamespace(global_step=0), None)
    callback.on_step_begin(None, SimpleNamespace(global_step=0), None)
    (out / f"seen-{rank}.json").write_text(json.dumps({
        "weights": trainer.reward_weights.tolist(), "metrics_weights": weights, "temperature": trainer.temperature,
        "sampling_temperature": trainer.generation_config.temperature, "beta": trainer.beta,
        "lr": trainer.optimizer.param_groups[0]["lr"]}))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RANK", "0")
    sys.exit(main(Path(sys.argv[1])))
