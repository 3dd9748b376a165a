"""The token view's record holds the trainer's own numbers: for every completion of every step, the log-probs
and entropies in tokens.jsonl are the ones the loss pass computed for that completion (read by a spy outside the
trainer's hooks, tests/integration/token_spy.py), and its tokens joined are the completion's text in groups.jsonl.
Rows reach the loss shuffled and split into two micro-batches, on the shared-prompt path and on TRL's."""

import sys

import pytest

from pipeline.run_folder import runs, token_log

from . import forked
from .helpers import make_run, said, status, tiny_settings

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("fast_engine", [True, False], ids=["shared-prompt pass", "trl pass"])
def test_each_completions_token_values_are_the_loss_pass_values_of_that_completion(tiny_model_dir, tmp_path,
                                                                                  fast_engine):
    from transformers import AutoTokenizer

    # Two groups of 4 a micro-batch, two micro-batches a step: each step's 16 rows are shuffled across the two.
    run_dir = make_run("tokens", **tiny_settings(tiny_model_dir), batch_size=8, gradient_accumulation_steps=2,
                       fast_engine=fast_engine, max_steps=2)
    spy_log = tmp_path / "spy.jsonl"
    proc = forked.run([sys.executable, "-m", "tests.integration.token_spy", "--run-dir", str(run_dir)],
                      timeout=600, own_env={"TOKEN_SPY_LOG": str(spy_log)})
    assert proc.returncode == 0, said(proc.stderr)
    assert status(run_dir)["state"] == "finished"

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    spied = runs.read_jsonl(spy_log)
    groups = runs.read_groups(run_dir)
    assert [g["step"] for g in groups] == token_log.steps_recorded(run_dir) == [1, 2]
    for record in groups:
        step = record["step"]
        scored = [row for row in spied if row["step"] == step]
        assert len(scored) == 16
        # The loss pass's rows by the tokens they score, as the token view renders them.
        by_tokens = {}
        for row in scored:
            pieces, _ = token_log.token_pieces(tokenizer, row["ids"])
            by_tokens.setdefault(tuple(pieces), []).append(row)
        tokens = token_log.read_step(run_dir, step)
        assert len(tokens["groups"]) == len(record["groups"]) == 4
        for group, entries in zip(record["groups"], tokens["groups"]):
            assert len(entries) == len(group["completions"]) == 4
            for completion, entry in zip(group["completions"], entries):
                special = set(entry.get("special", []))
                text = "".join(t for k, t in enumerate(entry["tokens"]) if k not in special)
                assert text == completion["completion"]
                rows = by_tokens[tuple(entry["tokens"])]
                assert any(entry["logp"] == pytest.approx(row["logp"], abs=1e-4)
                           and entry["entropy"] == pytest.approx(row["entropy"], abs=1e-4) for row in rows), (
                    step, entry, rows)
                assert len(entry["logp"]) == len(entry["entropy"]) == len(entry["tokens"]) > 0
