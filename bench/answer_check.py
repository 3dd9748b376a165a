"""What the RAG tab's answer check (pipeline/rewards/grounding.py) flags on real answers, for a reader to judge
each flag:

1. the held-out answers of the Movie questions runs kept under bench/results (base and tuned, greedy; the films
   each was given are the prompt's own, from assets/prompts/movies.jsonl);
2. with --generate, the bundled model's answers to open questions over the bundled table (top 5, greedy, the
   tab's defaults), each printed with the films it was given.

    python bench/answer_check.py [--generate] [--tokens 160]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.rewards.grounding import check_answer, films_in_prompt  # noqa: E402
from retrieval.rag import build_messages  # noqa: E402

ANSWER_FILES = ["learning-movies-2026-11-26-answers.txt", "learning-movies-lr5e-4-2026-11-26-answers.txt"]
ANSWER_LINE = re.compile(r"^\s*(base|tuned)\s*\(([-\d.]+)\):\s*(.*)$")
QUESTIONS = [
    ("the protagonist turns out to be the bad guy", None, 1989),
    ("A story told by someone who is already dead", None, None),
    ("Robots or computers that turn against their makers", 1960, 2000),
    ("A heist where the crew is betrayed by one of its own", None, None),
    ("Which film has a man who cannot form new memories?", None, None),
    ("Who directed the film about a haunted hotel?", None, None),
    ("In which year was the film about a shark released?", None, None),
    ("Recommend a comedy about mistaken identity", None, None),
    ("What happens at the end of the film about the magician rivalry?", None, None),
    ("Name a film where a child sees ghosts", None, None),
    ("Which war films are about soldiers trying to get home?", None, None),
    ("What do the films about time loops have in common?", None, None),
    ("A detective who is secretly the murderer", None, None),
    ("A family moves into a house that is haunted", 1970, 2024),
    ("Which Western has a lone gunman defending a town?", None, None),
    ("Tell me about a musical set in Hollywood", None, None), ("An animated film about toys", None, None),
    ("A documentary about nature or animals", None, None), ("Which film is about a boxer's comeback?", None, None),
    ("Movies about artificial intelligence falling in love", None, None),
]


def shown(items) -> str:
    return " · ".join(f"{item.said} | {item.why}" for item in items) or "(nothing)"


def kept_answers() -> None:
    rows = {}
    for line in (ROOT / "assets" / "prompts" / "movies.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        rows[row["question"]] = row
    for name in ANSWER_FILES:
        counts = {"base": [0, 0], "tuned": [0, 0]}
        print(f"## {name}")
        question = None
        for line in (ROOT / "bench" / "results" / name).read_text(encoding="utf-8").splitlines():
            if line.strip().startswith("Q: "):
                question = line.strip()[3:]
            elif (match := ANSWER_LINE.match(line)) and question in rows:
                who, answer = match.group(1), ast.literal_eval(match.group(3))
                content = rows[question]["prompt"][-1]["content"]
                items = check_answer(answer, films_in_prompt(content), content)
                counts[who][0] += 1
                counts[who][1] += bool(items)
                if items:
                    print(f"{who:5} {answer!r}\n      -> {shown(items)}")
        print("flagged: " + ", ".join(f"{who} {n} of {total}" for who, (total, n) in counts.items()) + "\n")


def generated_answers(tokens: int) -> None:
    import torch

    from pipeline.models.loading import load_model
    from pipeline.setup.config import BUNDLED_MODEL_ID
    from retrieval import movies
    from retrieval.rag import stream_answer
    from retrieval.search import SearchFilters, search
    from retrieval.store import MovieStore

    torch.set_num_threads(2)
    store = MovieStore(Path(tempfile.mkdtemp(prefix="answer-check-")) / "lancedb")
    store.upsert(movies.load_bundled())
    model, tokenizer = load_model(BUNDLED_MODEL_ID)
    print(f"## the bundled model over the bundled table (top 5, greedy, {tokens} tokens)")
    for query, year_min, year_max in QUESTIONS:
        hits = search(store.table(), query, SearchFilters.parse(year_min=year_min, year_max=year_max, top_k=5))
        answer = ""
        for answer in stream_answer(model, tokenizer, query, hits, max_new_tokens=tokens):
            pass
        items = check_answer(answer, hits, build_messages(query, hits)[-1]["content"])
        print(f"Q: {query}\nA: {answer!r}\n  films: {'; '.join(hit.label for hit in hits)}\n  -> {shown(items)}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generate", action="store_true", help="also answer open questions with the bundled model")
    parser.add_argument("--tokens", type=int, default=160)
    args = parser.parse_args()
    kept_answers()
    if args.generate:
        generated_answers(args.tokens)


if __name__ == "__main__":
    main()
