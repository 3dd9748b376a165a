"""Build the Movie questions prompt set: assets/prompts/movies.jsonl.

For every bundled film with a usable question (pipeline/setup/movie_questions.py), search the bundled table the
way the RAG tab does by default (its default search mode, no filters), keep the top PROMPT_TOP_K films, shuffle the films found with
a seed taken from the film's id (so the right film's position gives nothing away), and write the RAG tab's
answer prompt (retrieval/rag.py build_messages) with the film's title as the answer. Run it once, offline;
training reads the file and needs no LanceDB.

    .venv/bin/python bench/movie_questions.py [--out assets/prompts/movies.jsonl] [--top-k N] [--plot-chars N]

The defaults (pipeline/setup/movie_questions.py) build the bundled file; other values are for trials.

Deterministic: the same films, embedder and search give the same file.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import scratch  # noqa: E402

from pipeline.setup.movie_questions import PROMPT_PLOT_CHARS, PROMPT_TOP_K, question_for  # noqa: E402

OUT = ROOT / "assets" / "prompts" / "movies.jsonl"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--top-k", type=int, default=PROMPT_TOP_K, help="films retrieved per question")
    ap.add_argument("--plot-chars", type=int, default=PROMPT_PLOT_CHARS, help="plot characters shown per film")
    a = ap.parse_args()
    from retrieval.chunks import PlotChunks
    from retrieval.movies import load_bundled
    from retrieval.rag import build_messages
    from retrieval.search import SearchFilters, default_mode, search
    from retrieval.store import MovieStore

    films = load_bundled()
    store = MovieStore(Path(scratch("movie-questions-")))
    store.upsert(films)
    chunks = PlotChunks(store)
    chunks.sync()
    mode = default_mode(len(films))
    filters = SearchFilters.parse(top_k=a.top_k)
    rows, positions = [], Counter()
    for film in films:
        question = question_for(film.title, film.plot, film.director, plot_chars=a.plot_chars, year=film.release_year)
        if question is None:
            continue
        hits = search(store.table(), question, filters, mode, chunks=chunks)
        random.Random(film.id).shuffle(hits)
        where = next((i for i, h in enumerate(hits, 1) if h.id == film.id), None)
        positions[where] += 1
        rows.append({"prompt": build_messages(question, hits, plot_chars=a.plot_chars),
                     "answer": film.title, "film_id": film.id, "question": question,
                     "candidates": [h.title for h in hits], "retrieved": where is not None})
    Path(a.out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    found = sum(r["retrieved"] for r in rows)
    print(f"{len(rows)} questions ({len(films) - len(rows)} films had no usable sentence); search mode {mode}, "
          f"top {a.top_k}; the film was among the retrieved plots for {found} ({found / len(rows):.0%}); its "
          f"position: {dict(sorted((k or 0, v) for k, v in positions.items()))} (0 = not retrieved)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
