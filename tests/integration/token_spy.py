"""The trainer with a spy on its loss pass (test instrumentation, never used by the app).

    python -m tests.integration.token_spy --run-dir DIR [any pipeline.train argument]

Each time the loss asks the trainer for per-token log-probs and entropies (compute_entropy=True), the spy
appends one line per row to $TOKEN_SPY_LOG: the step being trained, the completion's token ids (padding
left out) and the values the trainer returned, unrounded. It reads the result from outside every hook of
the trainer class, so it does not share the token view's row bookkeeping.
"""

import os
import sys

from pipeline.run_folder import runs


def main() -> int:
    from pipeline import train

    make = train.make_trainer_class

    def spied_class():
        base = make()

        class Spied(base):
            def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args,
                                                   **kwargs):
                out = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                                 *args, **kwargs)
                if kwargs.get("compute_entropy") and self.model.training:
                    ids = input_ids[:, -logits_to_keep:].tolist()
                    mask = attention_mask[:, -logits_to_keep:].tolist()
                    for r, (row_ids, row_mask) in enumerate(zip(ids, mask)):
                        keep = [k for k, m in enumerate(row_mask) if m]
                        runs.append_jsonl(os.environ["TOKEN_SPY_LOG"], {
                            "step": self.state.global_step + 1,
                            "ids": [row_ids[k] for k in keep],
                            "logp": [out[0][r, k].item() for k in keep],
                            "entropy": [out[1][r, k].item() for k in keep],
                        })
                return out

        return Spied

    train.make_trainer_class = spied_class
    return train.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
