"""The token view: the group inspector's token renderer (escaping, shading, values on hover), the bounded
tokens.jsonl writer and its reader (one step's line, a torn last line, the size bound), and the trainer-side
capture's bookkeeping (rows back in groups.jsonl's order, padding left out, the first loss pass kept)."""

import json
import re

import pytest

from pipeline.run_folder import run_files, token_log
from pipeline.training.token_capture import TokenCapture
from ui import token_views, views

HOSTILE = "<script>alert('x')</script>\"&"


def entry(tokens, logp, entropy, special=None):
    return token_log.completion_entry(tokens, logp, entropy, special)


# ---- the renderer -----------------------------------------------------------------------------------------


def spans(html_text):
    return re.findall(r"<span class='(gs-tok[^']*)' style='background:rgba\((\d+),(\d+),(\d+),([\d.]+)\)' "
                      r"title='([^']*)'>([^<]*)</span>", html_text)


def test_tokens_are_escaped_in_text_and_hover():
    out = token_views.token_spans(entry([HOSTILE, " ok"], [-1.0, -0.1], [2.0, 0.5]), token_views.LOGP)
    assert "<script>" not in out and "alert('x')" not in out
    found = spans(out)
    assert len(found) == 2  # every token is one span, nothing leaked out of its attribute
    assert found[0][6] == "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;&amp;"
    assert "&lt;script&gt;" in found[0][5]


def test_shade_follows_the_value_of_the_mode_and_the_hover_gives_exact_values():
    e = entry([" sure", " odd", " very odd"], [-0.01, -2.5, -12.0], [7.0, 3.0, 0.0])
    by_logp = spans(token_views.token_spans(e, token_views.LOGP))
    alphas = [float(s[4]) for s in by_logp]
    assert alphas[0] < alphas[1] < alphas[2] == token_views.MAX_ALPHA  # lower log-prob: stronger shade
    assert alphas[1] == pytest.approx(token_views.MAX_ALPHA / 2, abs=0.01)
    by_entropy = spans(token_views.token_spans(e, token_views.ENTROPY))
    assert [float(s[4]) for s in by_entropy] == [token_views.MAX_ALPHA, pytest.approx(0.38, abs=0.01), 0.0]
    assert by_logp[0][1:4] != by_entropy[0][1:4]  # each mode its own colour
    title = by_logp[1][5]
    assert "log-prob -2.5000 (p = 0.0821)" in title and "entropy 3.0000" in title and "&#x27; odd&#x27;" in title


def test_special_tokens_and_line_breaks_are_visible():
    out = token_views.token_spans(entry(["a\n", "<|im_end|>"], [-0.5, -0.2], [1.0, 0.3], special=[1]),
                                  token_views.ENTROPY)
    found = spans(out)
    assert found[0][6] == "a↵\n" and found[1][0] == "gs-tok gs-tok-special"
    assert "special token" in found[1][5]


def test_missing_values_are_not_shaded():
    found = spans(token_views.token_spans({"tokens": ["a", "b"], "logp": [None], "entropy": []}, token_views.LOGP))
    assert [float(s[4]) for s in found] == [0.0, 0.0]
    assert "log-prob —" in found[0][5]


def groups_record():
    completions = [{"completion": text, "rewards": {"r": score}, "total": score, "advantage": adv}
                   for text, score, adv in ((" low", 0.0, -1.0), (HOSTILE, 1.0, 1.0))]
    return {"step": 3, "weights": {"r": 1.0}, "groups": [{"prompt": "p", "completions": completions}]}


def test_the_inspector_draws_each_completion_with_its_own_tokens_beside_its_rewards_and_advantage():
    record = groups_record()
    tokens = {"step": 3, "groups": [[entry([" low"], [-4.0], [0.2]), entry([HOSTILE], [-0.1], [2.9])]]}
    out = views.groups_html(record, tokens, token_views.LOGP)
    assert "gs-tok-legend" in out and "surprising" in out
    rows = re.findall(r"<tr class='gs-(\w+)'><td class='gs-adv'>([^<]*)</td>.*?<td class='gs-text'>(.*?)</td></tr>",
                      out)
    # Sorted by advantage, each row keeps its own tokens (the record is in groups.jsonl's order).
    assert [(cls, adv) for cls, adv, _ in rows] == [("pos", "+1.00"), ("neg", "-1.00")]
    assert "log-prob -0.1000" in rows[0][2] and "log-prob -4.0000" in rows[1][2]
    assert "<script>" not in out
    text = views.groups_html(record, tokens, token_views.TEXT)
    assert "gs-tok" not in text and "&lt;script&gt;" in text


def test_a_step_without_a_token_record_says_so_and_shows_text():
    out = views.groups_html(groups_record(), None, token_views.ENTROPY)
    assert "No token record for step 3" in out and "gs-tok'" not in out and "&lt;script&gt;" in out


# ---- the file: bound, reader, torn lines -----------------------------------------------------------------


def step_groups(n_tokens=3):
    return [[entry(["x"] * n_tokens, [-1.0] * n_tokens, [0.5] * n_tokens)] * 2]


def test_one_steps_line_is_read_back_and_a_relogged_step_reads_its_last_line(tmp_path):
    for step in (1, 2, 3):
        assert token_log.append_step(tmp_path, step, step_groups(step))
    assert token_log.read_step(tmp_path, 2)["groups"][0][0]["tokens"] == ["x", "x"]
    assert token_log.append_step(tmp_path, 2, step_groups(5))  # a resume logs step 2 again
    assert token_log.read_step(tmp_path, 2)["groups"][0][0]["tokens"] == ["x"] * 5
    assert token_log.steps_recorded(tmp_path) == [1, 2, 3]
    assert token_log.read_step(tmp_path, 9) is None
    assert token_log.read_step(tmp_path / "no-run", 1) is None


def test_a_torn_last_line_is_skipped_and_the_next_line_reads(tmp_path):
    token_log.append_step(tmp_path, 1, step_groups())
    path = tmp_path / run_files.TOKENS
    line = json.dumps({"step": 2, "groups": step_groups()})
    with open(path, "a") as fh:
        fh.write(line[: len(line) // 2])  # killed mid-write
    assert token_log.read_step(tmp_path, 1)["step"] == 1
    assert token_log.read_step(tmp_path, 2) is None
    assert token_log.steps_recorded(tmp_path) == [1]
    token_log.append_step(tmp_path, 2, step_groups(4))  # the resumed run logs step 2 whole
    assert token_log.read_step(tmp_path, 2)["groups"][0][0]["tokens"] == ["x"] * 4
    assert token_log.read_step(tmp_path, 1)["step"] == 1


def test_a_damaged_newest_line_gives_way_to_an_older_one_and_a_replaced_file_is_read_anew(tmp_path):
    token_log.append_step(tmp_path, 1, step_groups(2))
    path = tmp_path / run_files.TOKENS
    with open(path, "a") as fh:
        fh.write('{"step": 1, "groups": [garbled\n')
    assert token_log.read_step(tmp_path, 1)["groups"][0][0]["tokens"] == ["x", "x"]
    path.unlink()
    token_log.append_step(tmp_path, 7, step_groups(1))
    assert token_log.steps_recorded(tmp_path) == [7]


def test_the_file_keeps_every_step_then_every_tenth_then_stops(tmp_path, monkeypatch):
    one_line = len(json.dumps({"step": 100, "groups": step_groups(50)})) + 1
    monkeypatch.setattr(token_log, "FULL_BYTES", 5 * one_line)
    monkeypatch.setattr(token_log, "MAX_BYTES", 8 * one_line)
    written = [step for step in range(100, 200) if token_log.append_step(tmp_path, step, step_groups(50))]
    assert written[:5] == [100, 101, 102, 103, 104]  # every step until FULL_BYTES
    assert written[5:] == [110, 120, 130]  # then every 10th until MAX_BYTES, then none
    assert (tmp_path / run_files.TOKENS).stat().st_size <= token_log.MAX_BYTES + one_line


def test_token_pieces_keep_spaces_and_join_to_the_text_even_when_a_character_spans_tokens():
    class Bytes:  # a byte-level tokenizer: each id is one byte; 0 is end of sequence
        all_special_ids = [0]

        def decode(self, ids, skip_special_tokens=False):
            data = b"".join(b"<eos>" if i == 0 else bytes([i]) for i in ids if not (skip_special_tokens and i == 0))
            return data.decode("utf-8", errors="replace")

    ids = [*" é!".encode(), 0]
    pieces, special = token_log.token_pieces(Bytes(), ids)
    assert pieces == [" ", "", "é", "!", "<eos>"] and special == [4]
    pieces, _ = token_log.token_pieces(Bytes(), [*b" a b"])
    assert pieces == [" ", "a", " ", "b"]


# ---- the capture's bookkeeping -----------------------------------------------------------------------------


class Words:
    all_special_ids = [0]

    def decode(self, ids, skip_special_tokens=False):
        return "".join("" if (i == 0 and skip_special_tokens) else ("<eos>" if i == 0 else f" w{i}") for i in ids)


def test_rows_from_shuffled_micro_batches_come_back_in_group_order_without_padding(tmp_path):
    capture = TokenCapture(tmp_path, Words(), group_size=2, main=True)
    capture.begin_generation(4, 4)
    # The second micro-batch first, rows shuffled; padding (mask 0) after each completion.
    capture.take([3, 0], [[7, 0, 9], [5, 6, 0]], [[1, 1, 0], [1, 1, 1]], [[-0.3, -0.4, 0.0], [-0.1, -0.2, -0.9]],
                 [[1.3, 1.4, 0.0], [1.1, 1.2, 1.9]])
    capture.after_log(step=5)  # two of four rows: not yet
    assert token_log.read_step(tmp_path, 5) is None
    capture.take([2, 1, 0], [[8], [4], [99]], [[1], [1], [1]], [[-0.5], [-0.6], [-9.0]], [[0.5], [0.6], [9.0]])
    capture.after_log(step=6)  # the generation's rows are complete: filed under the first step that logged it
    record = token_log.read_step(tmp_path, 5)
    first, second = record["groups"]
    assert first[0] == {"tokens": [" w5", " w6", "<eos>"], "logp": [-0.1, -0.2, -0.9], "entropy": [1.1, 1.2, 1.9],
                        "special": [2]}  # row 0 keeps its first pass, not the later -9.0
    assert first[1]["tokens"] == [" w4"] and second[0]["tokens"] == [" w8"]
    assert second[1] == {"tokens": [" w7", "<eos>"], "logp": [-0.3, -0.4], "entropy": [1.3, 1.4], "special": [1]}
    assert token_log.steps_recorded(tmp_path) == [5]


def test_a_generation_cut_short_is_written_with_its_scored_rows_and_only_the_main_process_writes(tmp_path):
    capture = TokenCapture(tmp_path, Words(), group_size=2, main=True)
    capture.begin_generation(4, 4)
    capture.take([1], [[3]], [[1]], [[-1.0]], [[1.0]])
    capture.after_log(step=1)
    capture.begin_generation(4, 4)  # a new batch before the old one was complete
    assert token_log.read_step(tmp_path, 1)["groups"] == [[None, entry([" w3"], [-1.0], [1.0])], [None, None]]

    other = TokenCapture(tmp_path / "other", Words(), group_size=2, main=False)
    other.begin_generation(2, 4)
    other.take([2, 3], [[1], [2]], [[1], [1]], [[-1.0], [-1.0]], [[1.0], [1.0]])
    other.after_log(step=1)
    assert not (tmp_path / "other").exists()


def test_the_main_process_writes_every_processs_rows(tmp_path):
    ranks = [TokenCapture(tmp_path, Words(), group_size=2, main=rank == 0) for rank in (0, 1)]
    for rank, capture in enumerate(ranks):
        capture.begin_generation(2, 4)
        capture.take([2 * rank, 2 * rank + 1], [[1 + rank], [3]], [[1], [1]], [[-1.0], [-2.0]], [[1.0], [2.0]])
    gathered = [c.rows for c in ranks]
    ranks[1].after_log(step=4, gather=lambda rows: gathered)
    ranks[0].after_log(step=4, gather=lambda rows: gathered)
    groups = token_log.read_step(tmp_path, 4)["groups"]
    assert [[e["tokens"] for e in g] for g in groups] == [[[" w1"], [" w3"]], [[" w2"], [" w3"]]]


class Tensor(list):
    """Enough of a tensor for the capture: what it calls to read one back."""

    def tolist(self):
        return [list(r) if isinstance(r, list) else r for r in self]

    def float(self):
        return self


def test_loss_passes_kept_as_tensors_are_read_back_at_the_log_in_the_order_they_came(tmp_path):
    capture = TokenCapture(tmp_path, Words(), group_size=2, main=True)
    capture.begin_generation(2, 2)
    capture.keep(Tensor([1, 0]), Tensor([[4], [3]]), Tensor([[1], [1]]), Tensor([[-0.4], [-0.3]]),
                 Tensor([[0.4], [0.3]]))
    capture.keep(Tensor([0]), Tensor([[3]]), Tensor([[1]]), Tensor([[-9.0]]), Tensor([[9.0]]))  # a later pass
    assert capture.rows == {}  # nothing read back during the step
    capture.after_log(step=2)
    assert token_log.read_step(tmp_path, 2)["groups"] == [[entry([" w3"], [-0.3], [0.3]), entry([" w4"], [-0.4], [0.4])]]
