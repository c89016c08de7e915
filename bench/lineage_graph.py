"""Benchmark: the lineage graph at 100,000 datasets: build, shortest available path, bounded path enumeration.

Two generated catalog snapshots (untimed):
- medallion-shaped: 20% raw sources, 2% replica sources, 20% bronze (one per raw source), 28% silver (a main
  bronze input and 0-2 joined ones), 20% gold (a main silver input and 0-2 joined ones), 10% marts (gold
  reading gold, 0-1 joined), plus alternates: each replica stands in for one raw source (cost 2), and 5% of
  silver datasets can be rebuilt from a raw source (cost 3);
- dense stress graph: 20 layers of equal width, each dataset reading 1-3 datasets of the layer above, 5% of
  them rebuildable from a random source; its deepest datasets have tens of thousands of ancestors.

For each, against a baseline measured in the same run:
1. build: `build_graph(snapshot)` (goal ≤ 2 s), against a plain `nx.DiGraph` built from the same edge list;
2. shortest available path: `shortest_available_path` to datasets nothing reads (the deepest), with 5% of the
   sources down (goal ≤ 50 ms per query), against `nx.shortest_path(graph, root, dataset, weight="cost")` from
   the dataset's default root, which knows nothing of availability;
3. bounded enumeration: `recovery_paths` (at most MAX_PATHS paths of at most MAX_LENGTH nodes) for the same
   datasets, next to how many paths exist, against networkx's unbounded `all_simple_paths` from every root
   ancestor (medallion shape only: on the dense graph there are far too many paths to list); then
   `all_recovery_paths` over the whole graph, and (medallion shape) `refresh_recovery_paths` into SQLite.

    python bench/lineage_graph.py                 # 100,000 datasets, 1,000 (dense: 20) queries
    python bench/lineage_graph.py --datasets 10000 --queries 200
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable

import networkx as nx

from medallion_assets.catalog.models import DatasetLineage, Pipeline, Source, Stage, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.recovery.graph import build_graph
from medallion_assets.recovery.paths import (
    MAX_LENGTH,
    MAX_PATHS,
    all_recovery_paths,
    default_path,
    recovery_paths,
    refresh_recovery_paths,
    shortest_available_path,
)

STAGES_PER_PIPELINE = 100


def generated_snapshot(datasets: int, seed: int) -> CatalogSnapshot:
    rng = random.Random(seed)
    counts = {
        name: int(datasets * share)
        for name, share in (
            ("raw", 0.20),
            ("replica", 0.02),
            ("bronze", 0.20),
            ("silver", 0.28),
            ("gold", 0.20),
            ("mart", 0.10),
        )
    }
    snapshot = CatalogSnapshot()
    ids = {layer: [f"{layer}_{i}" for i in range(count)] for layer, count in counts.items()}
    for i, source_id in enumerate(ids["raw"]):
        snapshot.add(
            "sources",
            Source(
                source_id=source_id,
                s3_path=f"s3://raw-{i % 50}/{source_id}/",
                file_format="parquet",
                columns={"id": "string"},
            ),
        )
    for i, source_id in enumerate(ids["replica"]):
        snapshot.add(
            "sources",
            Source(
                source_id=source_id,
                s3_path=f"s3://replica-{i % 10}/{source_id}/",
                file_format="parquet",
                columns={"id": "string"},
            ),
        )
    stages: list[tuple[str, list[str], str]] = [
        (raw, [], bronze) for raw, bronze in zip(ids["raw"], ids["bronze"])
    ]
    for layer, upstream_layer, max_joined in (
        ("silver", "bronze", 2),
        ("gold", "silver", 2),
        ("mart", "gold", 1),
    ):
        for target_id in ids[layer]:
            main, *joined = rng.sample(ids[upstream_layer], 1 + rng.randint(0, max_joined))
            stages.append((main, joined, target_id))
    for layer in ("bronze", "silver", "gold", "mart"):
        for target_id in ids[layer]:
            snapshot.add("targets", Target(target_id=target_id, layer="gold" if layer == "mart" else layer))
    for number, (source_id, joined, target_id) in enumerate(stages):
        pipeline_id = f"p_{number // STAGES_PER_PIPELINE}"
        if number % STAGES_PER_PIPELINE == 0:
            snapshot.add("pipelines", Pipeline(pipeline_id=pipeline_id))
        snapshot.add(
            "stages",
            Stage(
                pipeline_id=pipeline_id,
                stage_order=number % STAGES_PER_PIPELINE + 1,
                stage_name=f"make_{target_id}",
                input_id=source_id,
                inputs=joined,
                target_id=target_id,
            ),
        )
    for replica, bronze in zip(ids["replica"], rng.sample(ids["bronze"], counts["replica"])):
        snapshot.add(
            "dataset_lineage",
            DatasetLineage(
                upstream=replica,
                downstream=bronze,
                via=f"{replica}_copy",
                kind="alternate",
                cost=2,
                is_default=False,
            ),
        )
    for silver in rng.sample(ids["silver"], counts["silver"] // 20):
        snapshot.add(
            "dataset_lineage",
            DatasetLineage(
                upstream=rng.choice(ids["raw"]),
                downstream=silver,
                via=f"rebuild_{silver}",
                kind="alternate",
                cost=3,
                is_default=False,
            ),
        )
    return snapshot


def dense_snapshot(datasets: int, layers: int, seed: int) -> CatalogSnapshot:
    """A stress shape, far denser than a medallion platform: `layers` layers of equal width, each dataset
    reading one to three datasets of the layer above, and 5% of them rebuildable from a random source (cost
    3)."""
    rng = random.Random(seed)
    width = datasets // layers
    snapshot = CatalogSnapshot()
    names = [[f"d{layer}_{i}" for i in range(width)] for layer in range(layers)]
    for source_id in names[0]:
        snapshot.add(
            "sources",
            Source(
                source_id=source_id,
                s3_path=f"s3://raw/{source_id}/",
                file_format="parquet",
                columns={"id": "string"},
            ),
        )
    for layer in range(1, layers):
        pipeline_id = f"layer_{layer}"
        snapshot.add("pipelines", Pipeline(pipeline_id=pipeline_id))
        for order, target_id in enumerate(names[layer], 1):
            snapshot.add("targets", Target(target_id=target_id, layer="silver"))
            main, *joined = rng.sample(names[layer - 1], rng.randint(1, 3))
            snapshot.add(
                "stages",
                Stage(
                    pipeline_id=pipeline_id,
                    stage_order=order,
                    stage_name=f"make_{target_id}",
                    input_id=main,
                    inputs=joined,
                    target_id=target_id,
                ),
            )
    for target_id in rng.sample([n for layer in names[1:] for n in layer], datasets // 20):
        snapshot.add(
            "dataset_lineage",
            DatasetLineage(
                upstream=rng.choice(names[0]),
                downstream=target_id,
                via=f"rebuild_{target_id}",
                kind="alternate",
                cost=3,
                is_default=False,
            ),
        )
    return snapshot


def path_counts(graph: nx.DiGraph) -> dict[str, int]:
    """How many paths lead from the roots to each dataset: what an unbounded enumeration would have to
    list."""
    counts: dict[str, int] = {}
    for node in nx.topological_sort(graph):
        counts[node] = sum(counts[u] for u in graph.pred[node]) or 1
    return counts


def timed(function: Callable, *args):
    started = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - started, result


def simple_paths_from(graph: nx.DiGraph, roots: list[str], target: str) -> list[list[str]]:
    """Every simple path from each of `roots` to `target`, unbounded: the baseline enumeration."""
    return [path for root in roots for path in nx.all_simple_paths(graph, root, target)]


def ms(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return (
        f"median {statistics.median(ordered) * 1e3:.3f} ms, p95 {p95 * 1e3:.3f} ms, "
        f"max {ordered[-1] * 1e3:.3f} ms"
    )


def measure(
    title: str,
    snapshot: CatalogSnapshot,
    queries: int,
    repeats: int,
    rng: random.Random,
    unbounded_baseline: bool,
    refresh: bool,
) -> None:
    graph = build_graph(snapshot)
    edges = list(graph.edges)
    print(f"\n== {title}: {graph.number_of_nodes():,} datasets, {len(edges):,} edges")

    def plain() -> nx.DiGraph:
        baseline = nx.DiGraph()
        baseline.add_nodes_from(graph.nodes)
        baseline.add_edges_from(edges)
        return baseline

    build, baseline_build = [], []
    for _ in range(repeats):
        build.append(timed(build_graph, snapshot)[0])
        baseline_build.append(timed(plain)[0])
    print(
        f"1. build, {repeats} runs: build_graph median {statistics.median(build):.2f} s, best "
        f"{min(build):.2f} s (goal ≤ 2 s); plain nx.DiGraph from the edge list median "
        f"{statistics.median(baseline_build):.2f} s, best {min(baseline_build):.2f} s; ratio of medians "
        f"{statistics.median(build) / statistics.median(baseline_build):.1f}×"
    )

    sources = [n for n, kind in graph.nodes(data="kind") if kind == "source"]
    down = set(rng.sample(sources, len(sources) // 20))
    deepest = [n for n in graph.nodes if graph.in_degree(n) and not graph.out_degree(n)]
    chosen = rng.sample(deepest, min(queries, len(deepest)))
    ours, baseline, rerouted, missing = [], [], 0, 0
    for dataset in chosen:
        seconds, path = timed(shortest_available_path, graph, dataset, down)
        ours.append(seconds)
        default = default_path(graph, dataset)
        rerouted += path is not None and path.nodes != default.nodes
        missing += path is None
        baseline.append(timed(nx.shortest_path, graph, default.nodes[0], dataset, "cost")[0])
    print(
        f"2. shortest available path to {len(chosen)} datasets without successors, {len(down):,} of "
        f"{len(sources):,} sources down: {ms(ours)} (goal ≤ 50 ms); {rerouted} re-routed, {missing} with none"
    )
    print(
        f"   baseline nx.shortest_path(default root, dataset, weight='cost'), no availability: {ms(baseline)}"
    )

    counts = path_counts(graph)
    enumeration, found = [], []
    for dataset in chosen:
        seconds, paths = timed(recovery_paths, graph, dataset)
        enumeration.append(seconds)
        found.append(len(paths))
    existing = [counts[d] for d in chosen]
    print(
        f"3. bounded enumeration (≤ {MAX_PATHS} paths of ≤ {MAX_LENGTH} nodes), same datasets: "
        f"{ms(enumeration)}; paths listed: median {statistics.median(found):g}, max {max(found)}; paths that "
        f"exist: median {statistics.median(existing):.3g}, max {max(existing):.3g}"
    )
    if unbounded_baseline:
        unbounded = []
        for dataset in chosen:
            roots = [a for a in nx.ancestors(graph, dataset) if graph.in_degree(a) == 0]
            unbounded.append(timed(simple_paths_from, graph, roots, dataset)[0])
        print(f"   baseline nx.all_simple_paths from every root ancestor, unbounded: {ms(unbounded)}")
    else:
        print("   baseline nx.all_simple_paths: not run, it would have to list the paths that exist")
    whole, everything = timed(all_recovery_paths, graph)
    print(f"   all_recovery_paths, whole graph: {whole:.2f} s, {sum(map(len, everything.values())):,} paths")
    if refresh:
        with tempfile.TemporaryDirectory() as folder:
            store = CatalogStore(f"sqlite:///{folder}/catalog.db")
            store.migrate()
            first, changed = timed(refresh_recovery_paths, store, snapshot)
            again, unchanged = timed(refresh_recovery_paths, store, snapshot)
            store.engine.dispose()
        print(
            f"   refresh_recovery_paths into SQLite: first {first:.1f} s ({len(changed):,} datasets "
            f"written), unchanged graph {again:.1f} s ({len(unchanged)} rewritten)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--dense-queries", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    measure(
        "medallion-shaped catalog",
        generated_snapshot(args.datasets, args.seed),
        args.queries,
        args.repeats,
        rng,
        unbounded_baseline=True,
        refresh=True,
    )
    measure(
        "dense stress graph, 20 layers",
        dense_snapshot(args.datasets, 20, args.seed),
        args.dense_queries,
        args.repeats,
        rng,
        unbounded_baseline=False,
        refresh=False,
    )


if __name__ == "__main__":
    main()
