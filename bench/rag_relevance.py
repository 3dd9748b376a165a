"""RAG relevance: how often each search mode puts the right film on top, on a labelled set of queries.

Builds the bundled 330-film table through the app's own store (MovieStore in a temporary folder, plus the
plot-chunk table), then runs every query of bench/rag_relevance.jsonl through the app's own search
function (retrieval.search.search) with the query's own year/genre filters, in every mode:

- recall@1 / recall@5: share of queries with an expected film at rank 1 / in the top 5 (a query lists
  more than one film only where several fit equally, e.g. two time-loop comedies; any of them counts);
- MRR: mean of 1 / rank of the first expected film within the top 20 (0 when it is not there);
- latency p50 / p95 per search at top-5, the modes interleaved query by query (same machine state).

    python bench/rag_relevance.py                 # the shipped modes
    python bench/rag_relevance.py --sweep         # also RRF k, chunk weight and glossary variants
    python bench/rag_relevance.py --rewrite       # also the chat model rewriting the query first (slow)

Writes bench/results/rag-relevance-<date>.txt and .json (use --tag to name a variant run).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval.search import search_modes  # noqa: E402  (the shipped modes, declared once)

CASES = Path(__file__).resolve().parent / "rag_relevance.jsonl"
RESULTS = Path(__file__).resolve().parent / "results"
RANK_DEPTH = 20
KINDS = ("twist", "paraphrase", "character", "setting", "theme")


@dataclass(frozen=True)
class Case:
    query: str
    expected: tuple[tuple[str, int], ...]          # (title, year) of each film that answers it
    year_min: int | None = None
    year_max: int | None = None
    genres: tuple[str, ...] = field(default_factory=tuple)
    kind: str = "paraphrase"


def load_cases(path: Path = CASES) -> list[Case]:
    """The labelled queries; a malformed line fails with its line number."""
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            expected = tuple((str(e["title"]), int(e["year"])) for e in row["expected"])
            case = Case(query=str(row["query"]).strip(), expected=expected, year_min=row.get("year_min"),
                        year_max=row.get("year_max"), genres=tuple(row.get("genres") or ()),
                        kind=row.get("kind", "paraphrase"))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path.name} line {number}: {exc}") from None
        if not case.query or not case.expected or case.kind not in KINDS:
            raise ValueError(f"{path.name} line {number}: needs a query, expected films and a kind in {KINDS}")
        cases.append(case)
    return cases


def rank_of(case: Case, titles_years: list[tuple[str, int]]) -> int | None:
    """1-based rank of the first expected film among the results, None when absent."""
    wanted = set(case.expected)
    return next((i for i, ty in enumerate(titles_years, 1) if ty in wanted), None)


def scores(ranks: list[int | None]) -> dict:
    n = len(ranks) or 1
    return {"recall@1": sum(1 for r in ranks if r == 1) / n,
            "recall@5": sum(1 for r in ranks if r is not None and r <= 5) / n,
            "mrr": sum(1.0 / r for r in ranks if r is not None) / n}


@dataclass
class Mode:
    name: str
    mode: str
    kwargs: dict = field(default_factory=dict)
    rewrite: bool = False


# The modes the RAG tab offers, from the one registry (retrieval/search.py), as they ship.
SHIPPED = [Mode(f"{m.name}: {m.label}", m.name) for m in reversed(list(search_modes))]
SWEEP = ([Mode(f"hybrid k={k}", "hybrid", {"rrf_k": k}) for k in (5, 20, 100)]
         + [Mode("hybrid + glossary", "hybrid", {"glossary": True})]
         + [Mode(f"chunks weight={w}", "chunks", {"chunk_weight": w}) for w in (0.3, 0.7, 1.0)]
         + [Mode("chunks+keywords, no glossary", "chunks+keywords", {"glossary": False})]
         + [Mode(f"chunks+keywords k={k}", "chunks+keywords", {"rrf_k": k}) for k in (5, 20, 100)])
REWRITE = [Mode("vector, query rewritten by the chat model", "vector", rewrite=True),
           Mode("chunks+keywords, query rewritten by the chat model", "chunks+keywords", rewrite=True)]

REWRITE_SYSTEM = ("Rewrite the user's movie question as one sentence in the words a plot summary would use: "
                  "what happens and to whom. Answer with that sentence only.")


def rewrite_queries(queries: list[str]) -> tuple[dict[str, str], float]:
    """The bundled chat model's rewrite of each query (greedy), and the seconds per query it took."""
    from pipeline.setup.config import BUNDLED_MODEL_ID
    from pipeline.training.generate import generate_batch
    from pipeline.models.loading import load_model

    model, tokenizer = load_model(BUNDLED_MODEL_ID)
    t0 = time.perf_counter()
    outs = generate_batch(model, tokenizer, [[{"role": "system", "content": REWRITE_SYSTEM},
                                              {"role": "user", "content": q}] for q in queries], max_new_tokens=40)
    per_query = (time.perf_counter() - t0) / max(len(queries), 1)
    return {q: (" ".join(o.split()) or q) for q, o in zip(queries, outs)}, per_query


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", action="store_true", help="also RRF k / chunk weight / glossary variants")
    ap.add_argument("--rewrite", action="store_true", help="also rewrite each query with the bundled chat model")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes over the queries per mode")
    ap.add_argument("--db", help="reuse this LanceDB folder (default: a new temporary one)")
    ap.add_argument("--tag", default="", help="suffix of the results file names")
    a = ap.parse_args()

    from report import p50_p95

    from retrieval.chunks import PlotChunks
    from retrieval.movies import load_bundled
    from retrieval.search import SearchFilters, search
    from retrieval.store import MovieStore

    cases = load_cases()
    store = MovieStore(Path(a.db) if a.db else Path(tempfile.mkdtemp(prefix="rag-relevance-")))
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    t0 = time.perf_counter()
    report = store.upsert(load_bundled())
    say(f"table: {report.rows} films ({report.embedded} embedded in {time.perf_counter() - t0:.1f} s)")
    chunks = PlotChunks(store)
    t0 = time.perf_counter()
    done = chunks.sync()
    say(f"chunk table: {chunks.table().count_rows()} sentence chunks ({done} films chunked in "
        f"{time.perf_counter() - t0:.1f} s)")
    table, genres = store.table(), store.info().genres

    modes = SHIPPED + (SWEEP if a.sweep else []) + (REWRITE if a.rewrite else [])
    rewritten: dict[str, str] = {}
    if a.rewrite:
        rewritten, per_query = rewrite_queries([c.query for c in cases])
        say(f"chat-model rewrite: {per_query:.2f} s per query (batched by 8, greedy, 40 new tokens)")

    def run(mode: Mode, case: Case, top_k: int):
        filters = SearchFilters.parse(case.year_min, case.year_max, list(case.genres), top_k, known_genres=genres)
        text = rewritten.get(case.query, case.query) if mode.rewrite else case.query
        return search(table, text, filters, mode.mode, chunks=chunks, **mode.kwargs)

    # Relevance: one pass at depth RANK_DEPTH.
    ranks: dict[str, list[int | None]] = {m.name: [] for m in modes}
    for number, case in enumerate(cases, 1):
        print(f"  relevance {number}/{len(cases)}", file=sys.stderr, flush=True)
        for mode in modes:
            hits = run(mode, case, RANK_DEPTH)
            ranks[mode.name].append(rank_of(case, [(h.title, h.release_year) for h in hits]))
    # Latency of the shipped modes: top-5 as the tab asks, interleaved query by query, order rotated.
    timed = SHIPPED
    for mode in timed:
        run(mode, cases[0], 5)  # warm-up: FTS index, caches
    seconds: dict[str, list[float]] = {m.name: [] for m in modes}
    for rep in range(a.repeats):
        for i, case in enumerate(cases):
            order = timed[(i + rep) % len(timed):] + timed[:(i + rep) % len(timed)]
            for mode in order:
                t = time.perf_counter()
                run(mode, case, 5)
                seconds[mode.name].append(time.perf_counter() - t)

    say(f"\n{len(cases)} queries ({', '.join(f'{k} {sum(c.kind == k for c in cases)}' for k in KINDS)}); "
        f"latency (shipped modes only): {a.repeats} passes at top-5, modes interleaved; one process, "
        f"default torch threads")
    header = f"{'mode':52}{'recall@1':>9}{'recall@5':>9}{'MRR':>7}{'p50 ms':>8}{'p95 ms':>8}{'p95/vector':>11}"
    say(header)
    results = {}
    base_p95 = p50_p95(seconds[modes[0].name])[1] if seconds[modes[0].name] else None
    for mode in modes:
        s = scores(ranks[mode.name])
        by_kind = {k: scores([r for r, c in zip(ranks[mode.name], cases) if c.kind == k]) for k in KINDS}
        results[mode.name] = {**s, "ranks": ranks[mode.name], "by_kind": by_kind, "mode": mode.mode, **mode.kwargs}
        timing = f"{'':8}{'':8}{'':11}"
        if seconds[mode.name] and base_p95:
            p50, p95 = p50_p95(seconds[mode.name])
            results[mode.name].update(p50_ms=p50 * 1e3, p95_ms=p95 * 1e3, p95_ratio_to_vector=p95 / base_p95)
            timing = f"{p50 * 1e3:8.1f}{p95 * 1e3:8.1f}{p95 / base_p95:11.2f}"
        say(f"{mode.name:52}{s['recall@1']:9.3f}{s['recall@5']:9.3f}{s['mrr']:7.3f}{timing}")
    say("\nrecall@5 by kind of query")
    say(f"{'mode':52}" + "".join(f"{k:>11}" for k in KINDS))
    for mode in modes:
        say(f"{mode.name:52}" + "".join(f"{results[mode.name]['by_kind'][k]['recall@5']:11.3f}" for k in KINDS))
    say("\nrank of the first expected film per query (- = not in the top 20)")
    short = [m.name.split(" ")[0] + (f"({','.join(f'{k}={v}' for k, v in m.kwargs.items())})" if m.kwargs else "")
             + ("+rw" if m.rewrite else "") for m in modes]
    for i, case in enumerate(cases):
        cells = " ".join(f"{(ranks[m.name][i] or '-')!s:>3}" for m in modes)
        say(f"  {cells}  {case.query[:70]}")
    say("  columns: " + ", ".join(short))
    if rewritten:
        say("\nchat-model rewrites")
        for q, r in rewritten.items():
            say(f"  {q[:60]!r} -> {r[:120]!r}")

    RESULTS.mkdir(exist_ok=True)
    stem = f"rag-relevance{('-' + a.tag) if a.tag else ''}-{date.today().isoformat()}"
    (RESULTS / f"{stem}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (RESULTS / f"{stem}.json").write_text(json.dumps({"queries": len(cases), "rank_depth": RANK_DEPTH,
                                                      "repeats": a.repeats, "modes": results,
                                                      "rewrites": rewritten}, indent=1), encoding="utf-8")
    print(f"wrote {RESULTS / stem}.txt and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
