"""The run header says what the trainer does outside a step (status.json's `phase`): loading, sampling the
first group, each probe, the merge; each step's status clears it, and so does the end of the run."""

import json
import subprocess
import sys

from .helpers import ROOT, make_run, said, status, tiny_settings

# The trainer, with every status write's `phase` recorded as it is written.
WITH_PHASE_LOG = """
import json, sys
from pipeline.run_folder import runs
import pipeline.train as train

write = runs.write_status
def recording(run_dir, state, writer=None, **fields):
    if "phase" in fields:
        with open(sys.argv[2], "a") as log:
            log.write(json.dumps({"phase": fields["phase"], "steps": len(runs.read_metrics(run_dir))}) + "\\n")
    return write(run_dir, state, writer, **fields)
runs.write_status = recording
sys.exit(train.main(["--run-dir", sys.argv[1]]))
"""


def test_the_trainer_says_what_it_does_between_steps(tiny_model_dir, tmp_path):
    run_dir = make_run("phases", **tiny_settings(tiny_model_dir), max_steps=2, probe_every=2, probe_prompts=2,
                       merge_at_end=True)
    log = tmp_path / "phases.jsonl"
    done = subprocess.run([sys.executable, "-c", WITH_PHASE_LOG, str(run_dir), str(log)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, said(done.stderr)
    written = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(w["phase"], w["steps"]) for w in written] == [
        ("loading the model", 0),
        ("sampling the first group", 0),
        ("answering the held-out prompts (probe at step 0)", 0),
        ("sampling the first group", 0),
        (None, 1),  # step 1's status: nothing between steps any more
        ("answering the held-out prompts (probe at step 2)", 1),  # the last step's probe, before its line
        (None, 1),
        (None, 2),
        ("saving the adapter and merging it into the model", 2),
        (None, 2),  # finished
    ], written
    assert status(run_dir)["state"] == "finished" and status(run_dir)["phase"] is None
