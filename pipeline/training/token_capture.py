"""The token view's capture in the trainer: the per-token log-probs and entropies the loss pass computes for a
step's completions, kept for the rows the group inspector shows and written to tokens.jsonl (pipeline/token_log.py).

The values are the trainer's own: `_get_per_token_logps_and_entropies`, called by TRL's loss with
compute_entropy=True (the shared-prompt path of pipeline/engine.py, or TRL's), is wrapped and its result read.
Rows reach the loss shuffled and split into micro-batches (gradient accumulation), each process its own share:
every row carries its place in the generation batch (`ROW_KEY`), the order of groups.jsonl. With several
iterations per batch (num_iterations > 1), a row's first loss pass is kept: the policy that sampled it.
No torch import: tensors come in and leave as lists.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pipeline.run_folder import token_log

log = logging.getLogger("grpo_studio.tokens")

ROW_KEY = "studio_row"  # the generation batch's row index, carried beside each row through shuffling and splits


class TokenCapture:
    """One generation's rows on this process, filled from the loss passes and written once every row of it has
    been through one (a generation can span several optimizer steps: steps_per_generation)."""

    def __init__(self, run_dir: str | Path, tokenizer, group_size: int, main: bool):
        self.run_dir = Path(run_dir)
        self.tokenizer = tokenizer
        self.group_size = max(int(group_size), 1)
        self.main = main
        self.rows: dict[int, tuple[list[int], list[float], list[float]]] = {}
        self.local_rows = 0
        self.total_rows = 0
        self.step: int | None = None  # the step whose groups.jsonl line shows this generation
        self.open = False
        self.kept: list[tuple] = []  # loss passes not yet read back (tensors: see keep)

    def begin_generation(self, local_rows: int, total_rows: int, gather=None) -> None:
        """A new generation batch: `local_rows` of its `total_rows` rows are this process's. What is left of the
        previous one (a Stop between two of its steps) is written as it is."""
        self.take_kept()
        if self.open and self.step is not None and self.rows:
            self.flush(gather)
        self.rows, self.step, self.open = {}, None, True
        self.local_rows, self.total_rows = int(local_rows), int(total_rows)

    def keep(self, rows, ids, mask, logps, entropies) -> None:
        """One loss pass's tensors, detached, read back at the step's log: reading a GPU tensor back in the middle
        of the step would make the step wait for the device (as `take`, in tensors)."""
        self.kept.append((rows, ids, mask, logps, entropies))

    def take_kept(self) -> None:
        kept, self.kept = self.kept, []
        for rows, ids, mask, logps, entropies in kept:
            self.take(rows.tolist(), ids.tolist(), mask.tolist(), logps.float().tolist(), entropies.float().tolist())

    def take(self, rows: list[int], ids: list[list[int]], mask: list[list[int]], logps: list[list[float]],
             entropies: list[list[float]]) -> None:
        """One loss pass's rows: completion token ids, completion mask (padding is 0) and the values per position.
        A row already taken keeps its first values."""
        if not self.open:
            return
        for row, row_ids, row_mask, row_lp, row_ent in zip(rows, ids, mask, logps, entropies):
            if row in self.rows:
                continue
            keep = [k for k, m in enumerate(row_mask) if m]
            self.rows[row] = ([row_ids[k] for k in keep], [row_lp[k] for k in keep], [row_ent[k] for k in keep])

    def after_log(self, step: int, gather=None) -> None:
        """Called at each training log (every process): the first log after a generation is the step groups.jsonl
        files it under; once every local row has been scored, the step's line is written (the main process)."""
        if not self.open:
            return
        self.take_kept()
        if self.step is None:
            self.step = int(step)
        # Every process holds the same number of rows and scores the same share per micro-batch, so all of them
        # reach this point at the same log, and gather together.
        if len(self.rows) >= self.local_rows:
            self.flush(gather)

    def flush(self, gather=None) -> None:
        """Write the generation's line (main process; `gather` collects every process's rows first)."""
        rows = self.rows
        if gather is not None:
            rows = {}
            for part in gather(self.rows):
                rows.update(part)
        if self.main and self.step is not None:
            try:
                token_log.append_step(self.run_dir, self.step, self.groups(rows))
            except OSError as exc:  # a full disk ends the run at the next checkpoint, not here
                log.warning("Could not write the token view's record of step %s: %s", self.step, exc)
        self.rows, self.open = {}, False

    def groups(self, rows: dict[int, tuple[list[int], list[float], list[float]]]) -> list[list[dict | None]]:
        """The generation's rows as groups of G entries, in groups.jsonl's order (None for a row not scored)."""
        total = self.total_rows or (max(rows) + 1 if rows else 0)
        out = []
        for start in range(0, total - self.group_size + 1, self.group_size):
            group = []
            for row in range(start, start + self.group_size):
                if row not in rows:
                    group.append(None)
                    continue
                ids, logps, entropies = rows[row]
                pieces, special = token_log.token_pieces(self.tokenizer, ids)
                group.append(token_log.completion_entry(pieces, logps, entropies, special))
            out.append(group)
        return out


def with_token_capture(trainer_class):
    """`trainer_class` (a TRL GRPOTrainer) with the token view's capture around its hooks: rows are numbered where
    they are generated, the loss pass's per-token values are read where they are computed, and each step's record
    is written at its log."""

    class TokenCapturingTrainer(trainer_class):
        studio_tokens: TokenCapture | None = None
        _studio_loss_rows = None

        def _studio_gather(self):
            if self.accelerator.num_processes == 1:
                return None
            from accelerate.utils import gather_object

            return lambda rows: gather_object([rows])

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            run_dir = getattr(self, "studio_run_dir", None)  # None: a trainer built without a run folder (tests)
            if self.model.training and "completion_ids" in output and run_dir is not None:
                if self.studio_tokens is None:
                    self.studio_tokens = TokenCapture(run_dir, self.processing_class, self.num_generations,
                                                      self.accelerator.is_main_process)
                local = output["completion_ids"].size(0)
                first = self.accelerator.process_index * local  # TRL gathers the processes' rows in this order
                output[ROW_KEY] = output["completion_ids"].new_tensor(list(range(first, first + local)))
                self.studio_tokens.begin_generation(local, local * self.accelerator.num_processes,
                                                    self._studio_gather())
            return output

        def _compute_loss(self, model, inputs):
            self._studio_loss_rows = inputs.get(ROW_KEY)
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self._studio_loss_rows = None

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args,
                                               **kwargs):
            out = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                             *args, **kwargs)
            rows, capture = self._studio_loss_rows, self.studio_tokens
            if rows is not None and capture is not None and kwargs.get("compute_entropy") and out[1] is not None:
                capture.keep(rows, input_ids[:, -logits_to_keep:], attention_mask[:, -logits_to_keep:],
                             out[0].detach(), out[1].detach())
            return out

        def log(self, logs, start_time=None):
            super().log(logs, start_time)  # groups.jsonl first: the token line follows its step
            if self.model.training and self.studio_tokens is not None:
                self.studio_tokens.after_log(self.state.global_step, self._studio_gather())

    TokenCapturingTrainer.__name__ = TokenCapturingTrainer.__qualname__ = trainer_class.__name__
    return TokenCapturingTrainer
