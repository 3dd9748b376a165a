"""Two ways of asking the answering model about the films the RAG tab found, on the labelled queries of
bench/rag_relevance.jsonl (most are story ideas, not questions): the tab's prompt ("Question: <query>") against
one that asks which of the films fits the idea. Same films for both (the tab's default search, top 5, the
query's year filters), greedy, the tab's defaults (160 tokens, repetition penalty 1.2), one model, two threads,
A/B interleaved query by query. For each prompt it counts the answers that:

- name a right film (a labelled one, among the five given) by number or title;
- name only films that are not right;
- name no film given;
- state something the films given don't support (the tab's answer check, pipeline/rewards/grounding.py).

    .venv/bin/python bench/rag_prompt.py [--limit N] [--tokens 160]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rag_relevance import load_cases  # noqa: E402
from retrieval.rag import REPETITION_PENALTY, build_messages, films_used  # noqa: E402

IDEA_TAIL = ("Which of these films is about this: {query}\nName the best match by its number and title, and say why "
             "in one sentence.")


def idea_messages(query: str, hits) -> list[dict]:
    """The candidate: the tab's system rule and numbered films, then a question about the idea."""
    messages = build_messages(query, hits)
    body = messages[-1]["content"]
    head = body[:body.index("\n\nQuestion: ")]
    return [*messages[:-1], {"role": "user", "content": head + "\n\n" + IDEA_TAIL.format(query=query)}]


PROMPTS = {"question (the tab's)": build_messages, "idea": idea_messages}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=0, help="only the first N queries")
    ap.add_argument("--tokens", type=int, default=160)
    args = ap.parse_args()

    import torch

    from pipeline.models.loading import load_model
    from pipeline.rewards.grounding import check_answer
    from pipeline.setup.config import BUNDLED_MODEL_ID
    from pipeline.training.generate import stream_chat
    from retrieval.chunks import PlotChunks
    from retrieval.search import SearchFilters, default_mode, search
    from retrieval.store import MovieStore

    torch.set_num_threads(2)
    store = MovieStore(ROOT / "data" / "lancedb")
    table, chunks = store.table(), PlotChunks(store)
    mode = default_mode(store.info().rows)
    model, tokenizer = load_model(BUNDLED_MODEL_ID)
    cases = load_cases()[: args.limit or None]
    print(f"# RAG answer prompt A/B: {len(cases)} labelled queries, search mode {mode}, top 5, greedy, "
          f"{args.tokens} tokens, repetition penalty {REPETITION_PENALTY}, torch threads {torch.get_num_threads()}")
    counts = {name: {"right": 0, "wrong only": 0, "no film": 0, "unsupported": 0, "seconds": 0.0} for name in PROMPTS}
    reachable = 0
    for number, case in enumerate(cases, 1):
        filters = SearchFilters.parse(year_min=case.year_min, year_max=case.year_max, genres=list(case.genres),
                                      top_k=5)
        hits = search(table, case.query, filters, mode, chunks=chunks)
        right = {i for i, hit in enumerate(hits, 1) if (hit.title, hit.release_year) in case.expected}
        reachable += bool(right)
        print(f"\n## {number}. {case.query} ({case.kind}; right film given: {sorted(right) or 'none'})")
        for name, build in PROMPTS.items():
            messages = build(case.query, hits)
            started, answer = time.perf_counter(), ""
            for answer in stream_chat(model, tokenizer, messages, max_new_tokens=args.tokens, temperature=0.0,
                                      top_p=1.0, repetition_penalty=REPETITION_PENALTY):
                pass
            c = counts[name]
            c["seconds"] += time.perf_counter() - started
            used = set(films_used(answer, hits))
            verdict = "right" if used & right else ("wrong only" if used else "no film")
            c[verdict] += 1
            flags = check_answer(answer, hits, messages[-1]["content"])
            c["unsupported"] += bool(flags)
            print(f"- {name}: {verdict}{', unsupported: ' + str(len(flags)) if flags else ''}; "
                  f"{' '.join(answer.split())[:220]!r}")
    print(f"\n# Summary ({len(cases)} queries; the right film was among the five given for {reachable})")
    print("| prompt | names a right film | names only wrong films | names no film | states something "
          "unsupported | generation s |")
    print("|---|---|---|---|---|---|")
    for name, c in counts.items():
        print(f"| {name} | {c['right']} | {c['wrong only']} | {c['no film']} | {c['unsupported']} | "
              f"{c['seconds']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
