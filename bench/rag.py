"""RAG speed benchmark, all in one run, every figure a ratio against a reference measured in the same run
(interleaved A/B/A/B, same process, same torch thread count):

1. ingest: the app's store (MovieStore.upsert: skip unchanged, embed, commit on a writer thread) against
   the embedder's own `encode` on the same bundled plots;
2. query latency p50/p95 through the app's search path (retrieval.search.search on a MovieStore table:
   validated filters, typed prefilter, query embedding, result rows) against raw LanceDB (the model's
   `encode` plus table.search(vector) with a hand-written SQL prefilter), on the bundled table (330 films)
   and on a generated table of 50,000 films. Cold = the query is not in the app's query-vector cache (both
   paths embed it); warm = it is (the raw reference then searches with a vector it already holds);
3. ANN crossover: an IVF_HNSW_SQ index against brute force at several table sizes: latency, build time,
   and recall (overlap of the top-k with brute force's top-k) at LanceDB's default ef and at the app's.

The generated plots are three sentences drawn from different bundled plots, with a random title, year and
genre. Embedding 50,000 plots on a 2-core CPU would take about 40 minutes, so each generated plot's vector
is the normalised mean of its sentences' embeddings (every distinct sentence embedded once, for real). The
queries are embedded by the real model in both paths.

    python bench/rag.py [--rows 50000] [--repeats 5] [--ingest-rounds 2] [--sizes 2000,5000,10000,20000]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from report import p50_p95, scratch  # noqa: E402

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
# (app filter kwargs, the same filter hand-written as SQL for the raw path). Filters on: the brief's target.
FILTERS = [
    ({"year_max": 1989}, "release_year <= 1989"),
    ({"year_min": 1970, "year_max": 1999, "genres": ["Thriller", "Crime"]},
     "release_year >= 1970 AND release_year <= 1999 AND genre IN ('Thriller', 'Crime')"),
    ({"genres": ["Drama"]}, "genre IN ('Drama')"),
]
COLUMNS = ["id", "title", "release_year", "genre", "director", "plot"]
PROFILE_FILMS = 128


def sentences_of(plot: str) -> list[str]:
    out, current = [], ""
    for piece in plot.replace("? ", "?|").replace("! ", "!|").replace(". ", ".|").split("|"):
        current = piece.strip()
        if len(current) > 20:
            out.append(current)
    return out


def generated_rows(n: int, embed, seed: int = 0, cache: Path | None = None):
    """n generated films with vectors (normalised mean of their sentences' real embeddings). `cache` keeps
    the sentence vectors between runs (they only depend on the bundled plots and the embedder)."""
    import numpy as np

    from retrieval.movies import load_bundled

    films = load_bundled()
    pools = [sentences_of(f.plot) for f in films]
    unique = sorted({s for pool in pools for s in pool})
    t0 = time.perf_counter()
    if cache is not None and cache.exists():
        vectors = np.load(cache)
        print(f"  read {len(vectors)} sentence vectors from {cache}")
    else:
        vectors = np.asarray(embed(unique), dtype=np.float32)
        print(f"  embedded {len(unique)} distinct sentences in {time.perf_counter() - t0:.1f} s")
        if cache is not None:
            np.save(cache, vectors)
    assert len(vectors) == len(unique)
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


def ms(xs: list[float]) -> tuple[float, float]:
    p50, p95 = p50_p95(xs)
    return p50 * 1e3, p95 * 1e3


# ---- 1. ingest ---------------------------------------------------------------------------------


def time_ingest(tmp: Path, rounds: int) -> dict:
    """App upsert vs raw encode on the same plots, alternating, each app round into a fresh table."""
    from retrieval.movies import load_bundled
    from retrieval.embedder import load_sentence_model
    from retrieval.store import MovieStore, embedding_function

    films = load_bundled()
    texts = [f.plot for f in films]
    model = load_sentence_model(embedding_function().name)
    app_s, raw_s = [], []
    for i in range(rounds):
        t0 = time.perf_counter()
        report = MovieStore(tmp / f"ingest-{i}").upsert(films)
        t1 = time.perf_counter()
        model.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
        t2 = time.perf_counter()
        assert report.embedded == len(films)
        app_s.append(t1 - t0)
        raw_s.append(t2 - t1)
        print(f"  round {i + 1}: app {len(films) / app_s[-1]:5.1f} plots/s, raw encode {len(films) / raw_s[-1]:5.1f} "
              f"plots/s, ratio {raw_s[-1] / app_s[-1]:.3f}", flush=True)
    ratios = [r / a for a, r in zip(app_s, raw_s)]
    return {"plots": len(films), "rounds": rounds, "app_plots_per_s": [len(films) / s for s in app_s],
            "raw_plots_per_s": [len(films) / s for s in raw_s], "ratio_per_round": ratios,
            "ratio_median": statistics.median(ratios), "ratio_pooled": sum(raw_s) / sum(app_s)}


def profile_ingest(tmp: Path) -> None:
    """Where one app ingest spends its time (cumulative seconds, top entries)."""
    import cProfile
    import io
    import pstats

    from retrieval.movies import load_bundled
    from retrieval.store import MovieStore

    store = MovieStore(tmp / "profile")
    prof = cProfile.Profile()
    prof.runcall(store.upsert, load_bundled()[:PROFILE_FILMS])
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).sort_stats("cumulative")
    total = stats.total_tt
    wanted = ("upsert", "_write", "compute_source_embeddings", "encode", "_new_or_changed", "close", "put",
              "count_rows", "create_table")
    print(f"  one ingest of {PROFILE_FILMS} bundled films: {total:.2f} s on this thread (the writer thread's "
          "commits overlap and are not in it)")
    for (file, _, name), (_, _, _, cum, _) in sorted(stats.stats.items(), key=lambda kv: -kv[1][3]):
        if name in wanted and ("retrieval" in file or "sentence_transformers" in file or "lancedb" in file):
            print(f"    {cum:7.2f} s  {cum / total:6.1%}  {name} ({Path(file).name})")


# ---- 2. query latency --------------------------------------------------------------------------


def time_queries(store, repeats: int) -> dict:
    """Per query and filter, interleaved: app cold, raw cold, app warm, raw warm."""
    import numpy as np

    from retrieval.search import ANN_EF, SearchFilters, search
    from retrieval.embedder import load_sentence_model, query_vectors

    table = store.table()
    known = store.info().genres
    model = load_sentence_model(store.embedder_name())

    def raw(query_vector, sql):
        builder = table.search(query_vector).distance_type("cosine").ef(ANN_EF).where(sql, prefilter=True)
        return builder.limit(5).select(COLUMNS).to_list()

    out = {k: [] for k in ("app_cold", "raw_cold", "app_warm", "raw_warm")}
    mismatches = 0
    for _ in range(repeats):
        for query in QUERIES:
            for kwargs, sql in FILTERS:
                query_vectors.clear()
                t0 = time.perf_counter()
                cold = search(table, query, SearchFilters.parse(top_k=5, known_genres=known, **kwargs))
                t1 = time.perf_counter()
                vector = model.encode(query, convert_to_numpy=True, normalize_embeddings=True)
                raw_cold = raw(vector, sql)
                t2 = time.perf_counter()
                warm = search(table, query, SearchFilters.parse(top_k=5, known_genres=known, **kwargs))
                t3 = time.perf_counter()
                raw(np.asarray(vector), sql)
                t4 = time.perf_counter()
                out["app_cold"].append(t1 - t0)
                out["raw_cold"].append(t2 - t1)
                out["app_warm"].append(t3 - t2)
                out["raw_warm"].append(t4 - t3)
                ids = [r["id"] for r in raw_cold]
                mismatches += ([h.id for h in cold] != ids) + ([h.id for h in warm] != ids)
    result = {"samples": len(out["app_cold"]), "result_mismatches": mismatches}
    for key, xs in out.items():
        result[f"{key}_p50_ms"], result[f"{key}_p95_ms"] = ms(xs)
    for kind in ("cold", "warm"):
        for p in ("p50", "p95"):
            result[f"ratio_{kind}_{p}"] = result[f"app_{kind}_{p}_ms"] / result[f"raw_{kind}_{p}_ms"]
    return result


# ---- 3. ANN crossover --------------------------------------------------------------------------


def ann_point(table, query_vectors_: list, repeats: int, build_s: float) -> dict:
    """Brute force vs the index on one table, interleaved; recall = top-k overlap with brute force."""
    from retrieval.search import ANN_EF

    def run(vector, sql, k, mode):
        builder = table.search(vector).distance_type("cosine").where(sql, prefilter=True)
        if mode == "brute":
            builder = builder.bypass_vector_index()
        elif mode == "ann_app_ef":
            builder = builder.ef(ANN_EF)
        return builder.limit(k).select(["id", "_distance"]).to_list()

    lat = {m: [] for m in ("brute", "ann_default_ef", "ann_app_ef")}
    recall = {(m, k): [] for m in ("ann_default_ef", "ann_app_ef") for k in (5, 10)}
    for _ in range(repeats):
        for vector in query_vectors_:
            for _, sql in FILTERS:
                truth = {}
                for mode in lat:
                    t0 = time.perf_counter()
                    rows = run(vector, sql, 10, mode)
                    lat[mode].append(time.perf_counter() - t0)
                    ids = [r["id"] for r in rows]
                    if mode == "brute":
                        truth = {5: set(ids[:5]), 10: set(ids)}
                    else:
                        for k in (5, 10):
                            recall[(mode, k)].append(len(truth[k] & set(ids[:k])) / max(1, len(truth[k])))
    point = {"rows": table.count_rows(), "index_build_s": build_s}
    for mode, xs in lat.items():
        point[f"{mode}_p50_ms"], point[f"{mode}_p95_ms"] = ms(xs)
    for (mode, k), xs in recall.items():
        point[f"{mode}_recall@{k}"] = sum(xs) / len(xs)
    return point


def print_ann(points: list[dict]) -> None:
    print(f"  {'rows':>7}{'build':>8}{'brute p50':>11}{'p95':>8}{'ANN p50':>10}{'p95':>8}{'speed-up p50':>14}"
          f"{'recall@5':>10}{'recall@10':>11}{'default-ef r@10':>17}")
    for p in points:
        print(f"  {p['rows']:7d}{p['index_build_s']:7.1f}s{p['brute_p50_ms']:9.1f}ms{p['brute_p95_ms']:6.1f}ms"
              f"{p['ann_app_ef_p50_ms']:8.1f}ms{p['ann_app_ef_p95_ms']:6.1f}ms"
              f"{p['brute_p50_ms'] / p['ann_app_ef_p50_ms']:13.2f}x{p['ann_app_ef_recall@5']:10.3f}"
              f"{p['ann_app_ef_recall@10']:11.3f}{p['ann_default_ef_recall@10']:17.3f}")


def build_table(db, name: str, rows: list[dict], schema):
    import pyarrow as pa

    table = db.create_table(name, schema=schema)
    for start in range(0, len(rows), 10_000):
        table.add(pa.Table.from_pylist(rows[start:start + 10_000], schema=table.schema))
    table.optimize()
    return table


def timed_index(table) -> float:
    from retrieval.store import ensure_vector_index

    t0 = time.perf_counter()
    assert ensure_vector_index(table, min_rows=0)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=5, help="passes over 8 queries x 3 filters per table")
    ap.add_argument("--ingest-rounds", type=int, default=2, help="app/raw ingest pairs")
    ap.add_argument("--sizes", default="2000,5000,10000,20000", help="ANN crossover sizes below --rows")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ap.add_argument("--skip-ingest", action="store_true", help="only the query and ANN sections")
    ap.add_argument("--sentence-cache", type=Path, help=".npy file keeping the sentence vectors between runs")
    a = ap.parse_args()

    import torch

    from retrieval.movies import load_bundled
    from retrieval.store import ANN_MIN_ROWS, MovieStore, embedding_function, movie_schema

    tmp = Path(scratch("rag-bench-"))
    func = embedding_function()
    func.ndims()  # load the embedder before any timing
    print(f"torch threads {torch.get_num_threads()} (both paths, same process); ANN_MIN_ROWS {ANN_MIN_ROWS}")

    print(f"1. ingest: bundled films, app MovieStore.upsert vs raw model.encode on the same plots, "
          f"{a.ingest_rounds} interleaved pairs (ratio = app plots/s / raw plots/s)")
    if a.skip_ingest:
        ingest = {}
        MovieStore(tmp / "ingest-0").upsert(load_bundled())  # the bundled table section 3 searches
    else:
        ingest = time_ingest(tmp, a.ingest_rounds)
        print(f"  median ratio {ingest['ratio_median']:.3f}, pooled {ingest['ratio_pooled']:.3f} (target >= 0.9)")
        profile_ingest(tmp)

    print(f"2. generated table: {a.rows} rows; the app's index rule builds its ANN index")
    rows = generated_rows(a.rows, func.compute_source_embeddings, cache=a.sentence_cache)
    big = MovieStore(tmp / "big")
    t0 = time.perf_counter()
    build_table(big.db(), big.table_name, rows, movie_schema(func))
    print(f"  wrote {a.rows} pre-embedded rows in {time.perf_counter() - t0:.1f} s")
    big_build_s = timed_index(big.table())
    print(f"  built the IVF_HNSW_SQ index in {big_build_s:.1f} s")

    print(f"3. query latency, {a.repeats} x {len(QUERIES)} queries x {len(FILTERS)} filters (all filtered), "
          "top-5, app path vs raw LanceDB, interleaved on the same table")
    bundled = MovieStore(tmp / "ingest-0")
    results = {}
    for name, store in (("bundled (330)", bundled), (f"generated ({a.rows})", big)):
        time_queries(store, 1)  # warm-up
        results[name] = time_queries(store, a.repeats)
    print(f"  {'table':20}{'':6}{'app p50':>9}{'app p95':>9}{'raw p50':>9}{'raw p95':>9}{'ratio p50':>11}"
          f"{'ratio p95':>11}")
    for name, r in results.items():
        for kind in ("cold", "warm"):
            print(f"  {name:20}{kind:6}{r[f'app_{kind}_p50_ms']:7.1f}ms{r[f'app_{kind}_p95_ms']:7.1f}ms"
                  f"{r[f'raw_{kind}_p50_ms']:7.1f}ms{r[f'raw_{kind}_p95_ms']:7.1f}ms"
                  f"{r[f'ratio_{kind}_p50']:11.3f}{r[f'ratio_{kind}_p95']:11.3f}")
        print(f"  {'':26}results differing from raw: {r['result_mismatches']} of {2 * r['samples']}")

    print("4. ANN crossover: IVF_HNSW_SQ (cosine) vs brute force, interleaved, filtered, precomputed query "
          "vectors; recall = overlap with brute force's top-k")
    vectors = [func.compute_query_embeddings(q)[0] for q in QUERIES]
    points = []
    for n in sorted(int(x) for x in a.sizes.split(",") if x and int(x) < a.rows):
        table = build_table(big.db(), f"size{n}", rows[:n], movie_schema(func))
        build_s = timed_index(table)
        points.append(ann_point(table, vectors, max(2, a.repeats // 2), build_s))
        print_ann(points[-1:])
    points.append(ann_point(big.table(), vectors, max(2, a.repeats // 2), big_build_s))
    print_ann(points[-1:])

    if a.json:
        a.json.write_text(json.dumps({"torch_threads": torch.get_num_threads(), "ann_min_rows": ANN_MIN_ROWS,
                                      "ingest": ingest, "queries": results, "ann": points}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
