"""Benchmark: a code-location load of Medallion's Definitions from a generated catalog, against hand-written
specs.

For each size N (datasets, i.e. asset keys), a catalog of N/4 pipelines is generated, each shaped like the
seed's user_events_etl: a raw JSONL source, bronze → silver → gold (a warehouse target with SQL), one rule set
per stage (1, 3 and 3 rules). The rows are pydantic models from `catalog/models/`, upserted with
`CatalogStore` into a temporary SQLite catalog (untimed). Then, `--repeats` times, alternating the order:

(a) Medallion: `build_definitions(catalog_url, lake_root, warehouse_url)`;
(b) the baseline, AssetSpec: N hand-written `dagster.AssetSpec`s with the same keys, deps and groups, and
    `Definitions(assets=specs)`;
(c) a reference, @asset: the same graph as hand-written `@asset` functions with the same asset checks and
    resources, which is what Dagster itself costs for executable assets, whoever generates them;

each followed by what Dagster does when it loads a code location: the code server resolves the Definitions
into a repository and loads every definition in it (`Definitions.validate_loadable`, which does exactly that
plus a partitions check), then the webserver fetches the repository snapshot (`RepositorySnap.from_def` with
deferred job snapshots, serialized). Each phase is timed; the ratios are on the sums. All sides are checked to
produce the same asset graph (keys, deps, groups), and (a) and (c) the same asset checks. One extra run of (a)
times the steps `build_definitions` is made of (catalog migrate and read, asset factory, Definitions) one by
one.

    python bench/definitions.py                      # 1k, 2k, 5k, 10k datasets, 3 repeats
    python bench/definitions.py --quick              # 200 and 400 datasets, 2 repeats

With `--locations PER`, the catalog's pipelines are split into domains of PER datasets, one code location each
(`medallion_assets/locations.py`, as `medallion workspace` lays them out), and per size it reports: one
domain's load (the same phases, median over three domains: first, middle, last), a run worker's start (a new
Python process that imports Medallion and rebuilds its domain's Definitions as `dagster api execute_run` does
before the first step; wall time until it is ready, its exit not counted, and its CPU time), once with the
load data the code server gave Dagster (the catalog snapshot) and once without it (reading the catalog again),
and the same graph as one `multi_asset` per pipeline (can_subset, same checks), the shape Dagster's
integrations use for large graphs; all against the whole catalog as one location, in the same run.
bench/queue_throughput.py measures the start of real run workers, launched by the daemon.

    python bench/definitions.py --locations 1000 --sizes 1000 10000 --repeats 2
"""

# No `from __future__ import annotations`: Dagster reads the @asset reference's parameter annotations as
# types.
import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial

from dagster import (
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    Definitions,
    MaterializeResult,
    asset,
    in_process_executor,
    multi_asset,
    serialize_value,
)

from medallion_assets.assets import build_assets
from medallion_assets.catalog.models import (
    Pipeline,
    RetryPolicy,
    Rule,
    Source,
    Stage,
    Target,
    ValidationRuleSet,
)
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.dagster_compat import ReconstructableRepository, RepositorySnap
from medallion_assets.definitions import build_definitions
from medallion_assets.resources import CatalogResource, LakeResource, SparkResource, WarehouseResource
from medallion_assets.storage.lake.root import Lake

LAYERS = ("raw", "bronze", "silver", "gold")
DATASETS_PER_PIPELINE = len(LAYERS)
RAW_COLUMNS = {
    "event_id": "string",
    "user_id": "string",
    "event_type": "string",
    "event_ts": "string",
    "value": "double",
}
SILVER_COLUMNS = {**RAW_COLUMNS, "event_ts": "timestamp"}
GOLD_COLUMNS = {"event_date": "date", "total_events": "bigint", "unique_users": "bigint"}
GOLD_SQL = (
    "SELECT event_ts::DATE AS event_date, COUNT(*) AS total_events, COUNT(DISTINCT user_id) AS unique_users "
    "FROM {silver} GROUP BY 1"
)
STAGE_RULES = {
    "bronze": [Rule(type="row_count", min=1)],
    "silver": [
        Rule(type="not_null", column="event_id"),
        Rule(type="unique", column="event_id"),
        Rule(type="accepted_values", column="event_type", values=["view", "click", "purchase", "signup"]),
    ],
    "gold": [
        Rule(type="row_count", min=1),
        Rule(type="unique", column="event_date"),
        Rule(type="not_null", column="event_date"),
    ],
}
PHASES = ("build", "resolve", "snapshot")
SIDES = ("medallion", "AssetSpec", "@asset")


def catalog_rows(pipelines: int) -> dict[str, list]:
    """`pipelines` pipelines shaped like user_events_etl, with a rule set per stage."""
    rows: dict[str, list] = {
        "retry_policies": [RetryPolicy(retry_id="std_retry", max_retries=3, backoff_sec=30)],
        "pipelines": [],
        "sources": [],
        "targets": [],
        "validation_rules": [],
        "stages": [],
    }
    for n in range(pipelines):
        p = f"p{n:05d}"
        raw, bronze, silver, gold = f"{p}_raw", f"bronze_{p}_events", f"silver_{p}_events", f"gold_{p}_daily"
        rows["pipelines"].append(Pipeline(pipeline_id=p, owner="team:bench", default_retry_id="std_retry"))
        rows["sources"].append(
            Source(source_id=raw, s3_path=f"s3://bench-raw/{p}/", file_format="jsonl", columns=RAW_COLUMNS)
        )
        rows["targets"] += [
            Target(target_id=bronze, layer="bronze"),
            Target(target_id=silver, layer="silver", columns=SILVER_COLUMNS, keys=["event_id"]),
            Target(
                target_id=gold,
                layer="gold",
                kind="warehouse",
                location=f"analytics.{p}_daily",
                columns=GOLD_COLUMNS,
                keys=["event_date"],
            ),
        ]
        rows["validation_rules"] += [
            ValidationRuleSet(rule_set_id=f"{target}_rules", check_def=STAGE_RULES[layer])
            for layer, target in (("bronze", bronze), ("silver", silver), ("gold", gold))
        ]
        rows["stages"] += [
            Stage(
                pipeline_id=p,
                stage_order=1,
                stage_name="bronze_ingest",
                input_id=raw,
                target_id=bronze,
                validation_set_id=f"{bronze}_rules",
            ),
            Stage(
                pipeline_id=p,
                stage_order=2,
                stage_name="silver_clean",
                input_id=bronze,
                target_id=silver,
                validation_set_id=f"{silver}_rules",
            ),
            Stage(
                pipeline_id=p,
                stage_order=3,
                stage_name="gold_daily_aggregate",
                input_id=silver,
                target_id=gold,
                validation_set_id=f"{gold}_rules",
                sql_dialect="redshift",
                transform_sql=GOLD_SQL.format(silver=silver),
            ),
        ]
    return rows


def pipeline_keys(n: int) -> dict[str, AssetKey]:
    """The keys the factory gives pipeline `n`'s datasets: [layer, target id without its layer prefix]."""
    p = f"p{n:05d}"
    return {
        "raw": AssetKey(["raw", f"{p}_raw"]),
        "bronze": AssetKey(["bronze", f"{p}_events"]),
        "silver": AssetKey(["silver", f"{p}_events"]),
        "gold": AssetKey(["gold", f"{p}_daily"]),
    }


def hand_written_specs(pipelines: int) -> list[AssetSpec]:
    """The baseline: the same keys, deps and groups as plain specs, as an engineer would write them."""
    specs = []
    for n in range(pipelines):
        keys = pipeline_keys(n)
        specs += [
            AssetSpec(keys[layer], deps=[keys[LAYERS[i - 1]]] if i else [], group_name=f"p{n:05d}")
            for i, layer in enumerate(LAYERS)
        ]
    return specs


def hand_written_assets(pipelines: int) -> list[AssetSpec | AssetsDefinition]:
    """A reference: the same graph as executable assets written by hand, with the same checks and resources.

    Only loading is measured, so the bodies never run; what Dagster pays per asset is in the decorator.
    """
    assets: list[AssetSpec | AssetsDefinition] = []
    for n in range(pipelines):
        keys = pipeline_keys(n)
        assets.append(AssetSpec(keys["raw"], group_name=f"p{n:05d}"))
        for upstream, layer in zip(LAYERS, LAYERS[1:]):

            @asset(
                key=keys[layer],
                deps=[keys[upstream]],
                group_name=f"p{n:05d}",
                check_specs=[
                    AssetCheckSpec(rule.name, asset=keys[layer], blocking=True) for rule in STAGE_RULES[layer]
                ],
            )
            def stage(
                context: AssetExecutionContext,
                spark: SparkResource,
                lake: LakeResource,
                warehouse: WarehouseResource,
                catalog: CatalogResource,
            ) -> MaterializeResult:
                raise NotImplementedError

            assets.append(stage)
    return assets


def multi_asset_per_pipeline(pipelines: int) -> list[AssetSpec | AssetsDefinition]:
    """The same graph and checks as one subsettable multi_asset per pipeline (bodies never run)."""
    assets: list[AssetSpec | AssetsDefinition] = []
    for n in range(pipelines):
        keys, group = pipeline_keys(n), f"p{n:05d}"
        specs = [
            AssetSpec(keys[layer], deps=[keys[upstream]], group_name=group)
            for upstream, layer in zip(LAYERS, LAYERS[1:])
        ]
        checks = [
            AssetCheckSpec(rule.name, asset=keys[layer], blocking=True)
            for layer in LAYERS[1:]
            for rule in STAGE_RULES[layer]
        ]

        @multi_asset(
            name=f"{group}_stages",
            specs=specs,
            check_specs=checks,
            can_subset=True,
            required_resource_keys={"spark", "lake", "warehouse", "catalog"},
        )
        def stages(context: AssetExecutionContext):
            raise NotImplementedError

        assets += [AssetSpec(keys["raw"], group_name=group), stages]
    return assets


# A run worker's start, as `dagster api execute_run` does it: rebuild the run's code location, given the load
# data Dagster stored with the run (argv[2], a file), or without it (as before the catalog snapshot was kept
# there).
WORKER_START = """
import sys, time
from dagster import deserialize_value
from medallion_assets.dagster_compat import ReconstructableRepository
start = time.perf_counter()
load_data = deserialize_value(open(sys.argv[2]).read()) if len(sys.argv) > 2 else None
repository = ReconstructableRepository.for_module(
    "medallion_assets.locations", sys.argv[1]
).with_repository_load_data(load_data).get_definition()
repository.load_all_definitions()
print(time.perf_counter() - start, time.process_time(), flush=True)
"""


def code_server_load_data(domain: str, folder: str) -> str:
    """The file holding a domain location's load data, as its code server hands it to Dagster for every
    run."""
    repository = ReconstructableRepository.for_module("medallion_assets.locations", domain).get_definition()
    path = f"{folder}/{domain}.load_data"
    with open(path, "w") as file:
        file.write(serialize_value(repository.repository_load_data))
    return path


def run_worker_start(domain: str, load_data: str | None) -> tuple[float, float, float]:
    """(wall seconds from starting a new process until it has imported Medallion and rebuilt one domain's
    Definitions, of which the rebuild, and the CPU seconds the process spent until then), with the code
    server's load data or without it. The clock stops when the process says it is ready, as a run worker then
    goes on to its first step: the interpreter's exit, which takes a second of its own, is no part of a start.
    The start is one thread's work, so on a core of its own its wall time is its CPU time: the figure to
    read when the machine is shared."""
    start = time.perf_counter()
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER_START, domain, *([load_data] if load_data else [])],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    rebuild, cpu = worker.stdout.readline().split()
    ready = time.perf_counter() - start
    if worker.wait() != 0:
        raise SystemExit(f"the run worker's rebuild of {domain} failed")
    return ready, float(rebuild), float(cpu)


def bench_locations(datasets: int, per_location: int, repeats: int) -> dict:
    """One domain's load and a run worker's start, against the whole catalog and one multi_asset per
    pipeline."""
    pipelines, per_domain = datasets // DATASETS_PER_PIPELINE, per_location // DATASETS_PER_PIPELINE
    with tempfile.TemporaryDirectory(prefix="medallion-bench-locations-") as folder:
        catalog_url, lake_root, warehouse_url = (
            f"sqlite:///{folder}/catalog.db",
            f"{folder}/lake",
            f"duckdb:///{folder}/w.duckdb",
        )
        rows = catalog_rows(pipelines)
        rows["pipelines"] = [
            p.model_copy(update={"domain": f"d{i // per_domain:03d}"})
            for i, p in enumerate(rows["pipelines"])
        ]
        domains = sorted({p.domain for p in rows["pipelines"]})
        sampled = sorted({domains[0], domains[len(domains) // 2], domains[-1]})
        store = CatalogStore(catalog_url)
        store.migrate()
        store.upsert(rows)
        resources = {
            "spark": SparkResource(),
            "lake": LakeResource(root=lake_root),
            "warehouse": WarehouseResource(url=warehouse_url),
            "catalog": CatalogResource(url=catalog_url),
        }
        sides = {
            "whole catalog": lambda: build_definitions(catalog_url, lake_root, warehouse_url),
            "multi_asset/pipeline": lambda: Definitions(
                assets=multi_asset_per_pipeline(pipelines), resources=resources, executor=in_process_executor
            ),
        }
        os.environ.update(
            {
                "MEDALLION_CATALOG_URL": catalog_url,
                "MEDALLION_LAKE_URL": lake_root,
                "MEDALLION_WAREHOUSE_URL": warehouse_url,
            }
        )
        load_data = {domain: code_server_load_data(domain, folder) for domain in sampled}
        workers = {"run worker, snapshot": load_data.get, "run worker, catalog": lambda domain: None}
        totals: dict[str, list[float]] = {
            "one domain": [],
            **{f"{w}{part}": [] for w in workers for part in ("", " (rebuild)", " (CPU)")},
            **{side: [] for side in sides},
        }
        shapes = {}
        for _ in range(repeats):
            for domain in sampled:
                seconds, _, _ = code_location_load(
                    partial(build_definitions, catalog_url, lake_root, warehouse_url, domain=domain)
                )
                totals["one domain"].append(sum(seconds.values()))
                for worker, data in workers.items():
                    wall, rebuild, cpu = run_worker_start(domain, data(domain))
                    totals[worker].append(wall)
                    totals[f"{worker} (rebuild)"].append(rebuild)
                    totals[f"{worker} (CPU)"].append(cpu)
            for side, make in sides.items():
                seconds, shapes[side], _ = code_location_load(make)
                totals[side].append(sum(seconds.values()))
        assert shapes["whole catalog"] == shapes["multi_asset/pipeline"], (
            "the multi_asset side built another graph"
        )
    return {
        "locations": len(domains),
        "medians": {side: statistics.median(t) for side, t in totals.items()},
        "max": {side: max(t) for side, t in totals.items()},
    }


def main_locations(sizes: list[int], per_location: int, repeats: int) -> None:
    results = {}
    for datasets in sizes:
        results[datasets] = result = bench_locations(datasets, per_location, repeats)
        print(
            f"\n{datasets:,} datasets in {result['locations']} location(s) of {per_location:,}; "
            f"seconds, median (max) of {repeats} x 3 domains / {repeats} whole loads:"
        )
        for side, median in result["medians"].items():
            print(f"  {side:<32}{median:>8.2f}  ({result['max'][side]:.2f})")
        print(
            f"  one domain / whole catalog: {median_ratio(result, 'one domain', 'whole catalog'):.2f};  "
            "one domain / multi_asset per pipeline: "
            f"{median_ratio(result, 'one domain', 'multi_asset/pipeline'):.2f};  run worker, snapshot / "
            f"catalog: {median_ratio(result, 'run worker, snapshot', 'run worker, catalog'):.2f}"
        )
    first, last = min(sizes), max(sizes)
    if first != last:
        growth = ", ".join(
            f"{side} {results[last]['medians'][side] / results[first]['medians'][side]:.1f}x"
            for side in results[first]["medians"]
        )
        print(f"\nscaling {first:,} → {last:,} datasets ({last / first:.0f}x more): {growth}")


def median_ratio(result: dict, side: str, baseline: str) -> float:
    return result["medians"][side] / result["medians"][baseline]


def code_location_load(make_defs: Callable[[], Definitions]) -> tuple[dict[str, float], set[tuple], set]:
    """Seconds per phase of loading `make_defs()` as Dagster loads a code location; its asset graph and
    checks."""
    # Every load starts from the same heap: garbage left by the previous load would otherwise slow down the
    # collector's passes during this one, and charge one side for the other's garbage.
    gc.collect()
    seconds = {}
    start = time.perf_counter()
    defs = make_defs()
    seconds["build"] = time.perf_counter() - start
    start = time.perf_counter()
    Definitions.validate_loadable(defs)
    seconds["resolve"] = time.perf_counter() - start
    start = time.perf_counter()
    serialize_value(RepositorySnap.from_def(defs.get_repository_def(), defer_snapshots=True))
    seconds["snapshot"] = time.perf_counter() - start
    return seconds, graph_shape(defs), check_keys(defs)


def graph_shape(defs: Definitions) -> set[tuple]:
    graph = defs.get_repository_def().asset_graph
    return {
        (key, frozenset(graph.get(key).parent_keys), graph.get(key).group_name)
        for key in graph.get_all_asset_keys()
    }


def check_keys(defs: Definitions) -> set:
    return set(defs.get_repository_def().asset_graph.asset_check_keys)


def build_breakdown(catalog_url: str, lake_root: str, warehouse_url: str) -> dict[str, float]:
    """The steps of `build_definitions` (medallion_assets/definitions.py), timed one by one."""
    gc.collect()
    seconds = {}
    start = time.perf_counter()
    store = CatalogStore(catalog_url)
    store.migrate()
    seconds["catalog migrate"] = time.perf_counter() - start
    start = time.perf_counter()
    snapshot = store.snapshot()
    seconds["catalog read"] = time.perf_counter() - start
    start = time.perf_counter()
    assets = build_assets(snapshot, Lake.resolve(lake_root))
    seconds["asset factory"] = time.perf_counter() - start
    start = time.perf_counter()
    Definitions(assets=assets)
    seconds["Definitions()"] = time.perf_counter() - start
    return seconds


def bench_size(datasets: int, repeats: int) -> dict:
    pipelines = datasets // DATASETS_PER_PIPELINE
    with tempfile.TemporaryDirectory(prefix="medallion-bench-defs-") as folder:
        catalog_url, lake_root, warehouse_url = (
            f"sqlite:///{folder}/catalog.db",
            f"{folder}/lake",
            f"duckdb:///{folder}/w.duckdb",
        )
        store = CatalogStore(catalog_url)
        store.migrate()
        store.upsert(catalog_rows(pipelines))
        resources = {
            "spark": SparkResource(),
            "lake": LakeResource(root=lake_root),
            "warehouse": WarehouseResource(url=warehouse_url),
            "catalog": CatalogResource(url=catalog_url),
        }
        sides = {
            "medallion": lambda: build_definitions(catalog_url, lake_root, warehouse_url),
            "AssetSpec": lambda: Definitions(assets=hand_written_specs(pipelines)),
            "@asset": lambda: Definitions(
                assets=hand_written_assets(pipelines), resources=resources, executor=in_process_executor
            ),
        }
        runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
        shapes, checks = {}, {}
        for repeat in range(repeats):
            for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
                seconds, shapes[side], checks[side] = code_location_load(sides[side])
                runs[side].append(seconds)
        assert shapes["medallion"] == shapes["AssetSpec"] == shapes["@asset"], (
            "the sides built other asset graphs"
        )
        assert len(shapes["medallion"]) == datasets, (len(shapes["medallion"]), datasets)
        assert checks["medallion"] == checks["@asset"], "the @asset reference has other asset checks"
        breakdown = build_breakdown(catalog_url, lake_root, warehouse_url)
    medians = {
        side: {phase: statistics.median(run[phase] for run in side_runs) for phase in PHASES}
        for side, side_runs in runs.items()
    }
    totals = {
        side: statistics.median(sum(run.values()) for run in side_runs) for side, side_runs in runs.items()
    }
    return {"medians": medians, "totals": totals, "breakdown": breakdown}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="--quick: 200 and 400 datasets"
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1000, 2000, 5000, 10000],
        help="datasets per catalog, multiples of 4 (default 1000 2000 5000 10000)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="loads of each side per size (default 3)")
    parser.add_argument("--quick", action="store_true", help="a small run to check that everything works")
    parser.add_argument("--locations", type=int, metavar="PER", help="datasets per domain code location")
    args = parser.parse_args()
    sizes, repeats = ([200, 400], 2) if args.quick else (args.sizes, args.repeats)
    if args.locations:
        bench_size(DATASETS_PER_PIPELINE, 1)  # imports and first-call caches, untimed
        main_locations(sizes, args.locations, repeats)
        return

    # Imports and first-call caches (pydantic, Dagster, SQLAlchemy, alembic) are paid once per process:
    # untimed.
    bench_size(DATASETS_PER_PIPELINE, 1)
    results = {}
    for datasets in sizes:
        results[datasets] = result = bench_size(datasets, repeats)
        m, h = result["medians"], result["totals"]
        print(
            f"\n{datasets:,} datasets ({datasets // DATASETS_PER_PIPELINE:,} pipelines), medians of "
            f"{repeats}:"
        )
        print(f"  {'':<14}" + "".join(f"{phase:>10}" for phase in PHASES) + f"{'total':>10}")
        for side in SIDES:
            print(
                f"  {side:<14}"
                + "".join(f"{m[side][phase]:>10.2f}" for phase in PHASES)
                + f"{h[side]:>10.2f}"
            )
        print(
            f"  ratio Medallion / AssetSpec: {h['medallion'] / h['AssetSpec']:.2f}  (goal <= 2 at 10k);  "
            f"Medallion / @asset: {h['medallion'] / h['@asset']:.2f}"
        )
        print(
            "  Medallion build, step by step (one run): "
            + ", ".join(f"{step} {seconds:.2f}" for step, seconds in result["breakdown"].items())
        )
    first, last = min(sizes), max(sizes)
    if first != last:
        growth = ", ".join(
            f"{side} {results[last]['totals'][side] / results[first]['totals'][side]:.1f}x" for side in SIDES
        )
        print(f"\nscaling {first:,} → {last:,} datasets ({last / first:.0f}x more): {growth}")


if __name__ == "__main__":
    main()
