"""RAG benchmark, all in one run:

1. ingest throughput (plots/s) of the app's store (embedding + merge_insert) on the bundled films;
2. write throughput (rows/s) of upserting 50,000 pre-embedded rows;
3. query latency p50/p95 through the app's search path (retrieval.search.search: validated filters,
   typed prefilter, query embedding, result rows) against raw LanceDB calls (table.search(text) with a
   hand-written SQL prefilter), on the bundled table and on a generated table of 50,000 plots.

The generated plots are three sentences drawn from different bundled plots, with a random title, year and
genre. Embedding 50,000 plots on a 2-core CPU would take about 40 minutes, so each generated plot's vector
is the normalised mean of its sentences' embeddings (every distinct sentence embedded once, for real). The
queries are embedded by the real model in both paths.

    python bench/rag.py [--rows 50000] [--repeats 30]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from report import p50_p95, save  # noqa: E402

QUERIES = [
    "the protagonist turns out to be the bad guy",
    "a heist that goes wrong because of a traitor",
    "robots that turn against the people who built them",
    "a ghost story told from the ghost's side",
    "two strangers fall in love on a long train journey",
    "a small town hides a terrible secret",
    "soldiers trapped behind enemy lines",
    "a musician fights to be heard",
]
# (app filter kwargs, the same filter hand-written as SQL for the raw path)
FILTERS = [
    ({}, None),
    ({"year_max": 1989}, "release_year <= 1989"),
    ({"year_min": 1970, "year_max": 1999, "genres": ["Thriller", "Crime"]},
     "release_year >= 1970 AND release_year <= 1999 AND genre IN ('Thriller', 'Crime')"),
]
COLUMNS = ["id", "title", "release_year", "genre", "director", "plot"]


def sentences_of(plot: str) -> list[str]:
    out, current = [], ""
    for piece in plot.replace("? ", "?|").replace("! ", "!|").replace(". ", ".|").split("|"):
        current = piece.strip()
        if len(current) > 20:
            out.append(current)
    return out


def generated_rows(n: int, embed, seed: int = 0):
    """n generated films with vectors (normalised mean of their sentences' real embeddings)."""
    import numpy as np

    from retrieval.movies import load_bundled

    films = load_bundled()
    pools = [sentences_of(f.plot) for f in films]
    unique = sorted({s for pool in pools for s in pool})
    t0 = time.perf_counter()
    vectors = np.asarray(embed(unique), dtype=np.float32)
    print(f"  embedded {len(unique)} distinct sentences in {time.perf_counter() - t0:.1f} s")
    index = {s: i for i, s in enumerate(unique)}
    genres = sorted({f.genre for f in films})
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        picks = [rng.choice(pools[rng.randrange(len(pools))]) for _ in range(3)]
        vec = vectors[[index[s] for s in picks]].mean(axis=0)
        vec /= np.linalg.norm(vec) or 1.0
        rows.append({"id": 10_000_000 + i, "title": f"Generated film {i}", "release_year": rng.randint(1920, 2024),
                     "genre": rng.choice(genres), "director": f"Director {rng.randrange(2000)}",
                     "plot": " ".join(picks), "vector": vec.tolist()})
    return rows


def time_queries(table, repeats: int, known_genres: list[str]) -> dict:
    """Interleave app and raw calls per query so both see the same machine state."""
    from retrieval.search import SearchFilters, search

    app_s, raw_s = [], []
    for _ in range(repeats):
        for query in QUERIES:
            for kwargs, sql in FILTERS:
                t0 = time.perf_counter()
                filters = SearchFilters.parse(top_k=5, known_genres=known_genres, **kwargs)
                hits = search(table, query, filters)
                t1 = time.perf_counter()
                builder = table.search(query, query_type="vector").distance_type("cosine")
                if sql:
                    builder = builder.where(sql, prefilter=True)
                raw = builder.limit(5).select(COLUMNS).to_list()
                t2 = time.perf_counter()
                assert [h.id for h in hits] == [r["id"] for r in raw], (query, kwargs)  # same answer
                app_s.append(t1 - t0)
                raw_s.append(t2 - t1)
    (a50, a95), (r50, r95) = p50_p95(app_s), p50_p95(raw_s)
    return {"app_p50_ms": a50 * 1e3, "app_p95_ms": a95 * 1e3, "raw_p50_ms": r50 * 1e3, "raw_p95_ms": r95 * 1e3,
            "ratio_p50": a50 / r50, "ratio_p95": a95 / r95, "samples": len(app_s)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=10, help="passes over 8 queries x 3 filters per table")
    a = ap.parse_args()

    import pyarrow as pa

    from retrieval.movies import load_bundled
    from retrieval.store import WRITE_BATCH, MovieStore, embedding_function, movie_schema

    tmp = Path(tempfile.mkdtemp(prefix="rag-bench-"))
    func = embedding_function()
    func.ndims()  # load the embedder before any timing

    print("1. ingest: bundled films through MovieStore.upsert (embed + merge_insert)")
    bundled = MovieStore(tmp / "bundled")
    report = bundled.upsert(load_bundled())
    print(f"  {report.embedded} plots in {report.seconds:.1f} s -> {report.plots_per_s:.1f} plots/s")
    again = bundled.upsert(load_bundled())
    print(f"  re-adding the same films: {again.unchanged} unchanged, {again.seconds:.2f} s")

    print(f"2. generated table: {a.rows} rows")
    rows = generated_rows(a.rows, func.compute_source_embeddings)
    big = MovieStore(tmp / "big")
    table = big.db().create_table(big.table_name, schema=movie_schema(func))
    t0 = time.perf_counter()
    for start in range(0, len(rows), WRITE_BATCH):
        chunk = pa.Table.from_pylist(rows[start:start + WRITE_BATCH], schema=table.schema)
        table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(chunk)
    write_s = time.perf_counter() - t0
    print(f"  upserted {table.count_rows()} pre-embedded rows in {write_s:.1f} s -> {a.rows / write_s:,.0f} rows/s")
    table.optimize()

    print(f"3. query latency, {a.repeats} x {len(QUERIES)} queries x {len(FILTERS)} filters, top-5, "
          "app path vs raw LanceDB (same table, interleaved, identical results checked)")
    results = {}
    for name, store in (("bundled (330)", bundled), (f"generated ({a.rows})", big)):
        info = store.info()
        time_queries(store.table(), 1, info.genres)  # warm-up
        results[name] = time_queries(store.table(), a.repeats, info.genres)
    print(f"  {'table':22}{'app p50':>10}{'app p95':>10}{'raw p50':>10}{'raw p95':>10}{'ratio p50':>11}{'ratio p95':>11}")
    for name, r in results.items():
        print(f"  {name:22}{r['app_p50_ms']:9.1f}ms{r['app_p95_ms']:9.1f}ms{r['raw_p50_ms']:9.1f}ms"
              f"{r['raw_p95_ms']:9.1f}ms{r['ratio_p50']:11.3f}{r['ratio_p95']:11.3f}")
    worst = max(max(r["ratio_p50"], r["ratio_p95"]) for r in results.values())
    print(f"  worst ratio {worst:.3f} (target <= 1.1)")
    save("rag", {"ingest_plots_per_s": report.plots_per_s, "ingest_plots": report.embedded,
                 "write_rows_per_s": a.rows / write_s, "rows": a.rows, "queries": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
