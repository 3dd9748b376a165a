"""The trainer with a spy on transformers' checkpoint rotation (test instrumentation, never used by the app).

    python -m tests.integration.rotation_spy --run-dir DIR [any pipeline.train argument]

transformers deletes old checkpoints at the end of its save, before the studio's on_save callback marks
the new folder complete. Right after each rotation the spy appends {"saved": N, "complete": [steps]} to
$ROTATION_LOG, and with $ROTATION_KILL_AT=N it SIGKILLs the trainer right there: the worst moment for a
kill, since the newest checkpoint is not marked complete yet.
"""

import os
import signal
import sys
from pathlib import Path

import transformers.trainer as hf_trainer

from pipeline.run_folder import runs


def main() -> int:
    rotate = hf_trainer.rotate_checkpoints  # the name transformers' _save_checkpoint calls

    def spy(*args, **kwargs):
        rotate(*args, **kwargs)
        run_dir = Path(kwargs.get("output_dir") or args[0])
        saved = max(runs.checkpoint_step(p) for p in runs.checkpoints(run_dir, complete_only=False))
        complete = [runs.checkpoint_step(p) for p in runs.checkpoints(run_dir)]
        runs.append_jsonl(os.environ["ROTATION_LOG"], {"saved": saved, "complete": complete})
        if os.environ.get("ROTATION_KILL_AT") == str(saved):
            os.kill(os.getpid(), signal.SIGKILL)

    hf_trainer.rotate_checkpoints = spy
    from pipeline.train import main as train_main

    return train_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
