"""The RAG tab offers a Movie questions run's held-out questions (never trained on) as one-click examples."""

import json

from pipeline.run_folder import runs


def test_a_movie_questions_runs_held_out_questions_and_none_for_other_runs(tmp_path, monkeypatch):
    from ui.held_out import HELD_OUT_SHOWN, held_out_questions

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    movies = runs.new_run_dir("movies")
    rows = [{"prompt": [{"role": "user", "content": "Films: ..."}], "question": f"Which film from 19{n}0 is this?"}
            for n in range(8)]
    (movies / "eval_prompts.json").write_text(json.dumps(rows))
    assert held_out_questions(movies) == [f"Which film from 19{n}0 is this?" for n in range(HELD_OUT_SHOWN)]

    tldr = runs.new_run_dir("tldr")  # prompts with no question: nothing to offer
    (tldr / "eval_prompts.json").write_text(json.dumps([{"prompt": "A post\n\nTL;DR:"}]))
    damaged = runs.new_run_dir("damaged")
    (damaged / "eval_prompts.json").write_text("[{")
    odd = runs.new_run_dir("odd")
    (odd / "eval_prompts.json").write_text(json.dumps({"question": "not a list"}))
    assert [held_out_questions(d) for d in (tldr, damaged, odd, runs.new_run_dir("none"), None)] == [[]] * 5
