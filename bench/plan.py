"""Benchmark: `medallion plan` on the seed catalog and on a generated catalog of 1,000 stages with one change.

Each catalog is loaded into a temporary SQLite catalog (untimed). The generated one is bench/definitions.py's:
pipelines shaped like the seed's user_events_etl (bronze → silver → gold with SQL, a rule set per stage),
334 of them, 1,002 stages; its change is one gold stage's SQL (a filter added: breaking). `--repeats` times:

(a) in process, what the command does once Python has started, in two parts: read the catalog and validate
    the files (what `catalog validate` does), then the plan itself;
(b) the command as a user runs it, `medallion plan DIR` in a new process: its wall time, of which the
    imports, its CPU time (user and system: what it costs on a shared machine whatever the load), and whether
    pyspark was imported at all (without it no JVM can start).

Medians are reported. The goals (issue 33): the seed ≤ 1 s, 1,000 stages with one change ≤ 3 s, no JVM.

With `--environments`, instead, a preview and its apply (issue 34), on the seed's orders_etl run once
(untimed) over `--events` sample events (a fifth as many orders) on an S3 API server on loopback, in one Spark
session. Each repeat changes its gold stage (a filter `amount >= N`, N new each time: breaking) and times:

(c) the preview in process (what `medallion plan DIR --env NAME` does after the plan): the stage run in the
    environment, its load into the environment's warehouse schema, and the diff against main;
(d) the bytes the preview wrote per lake table of the pipeline: the `added-files-size` of each environment
    branch's snapshot (a table without a branch wrote none);
(e) apply after the preview with main unmoved (the files loaded untimed first): the lake's fast-forward and
    the warehouse taking the environment's table, with the Spark jobs it ran (none reads data);
(f) the same stage alone with the same new definition, in full, as a run does it: the baseline of (c).

The goals: (c) ≤ 1.2 × (f); (e) ≤ 2 s per table, no Spark job reading the lake table to publish it.

    python bench/plan.py              # 5 repeats
    python bench/plan.py --repeats 2
    python bench/plan.py --environments --repeats 3 --events 100000
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.definitions import GOLD_SQL, catalog_rows  # noqa: E402
from medallion_assets.catalog.store import CatalogStore  # noqa: E402
from medallion_assets.change.plan import plan_files  # noqa: E402
from medallion_assets.loading import validate_files  # noqa: E402
from medallion_assets.storage.lake.root import Lake  # noqa: E402

SEED = REPO / "metadata_seed"
STAGES = 1_000


def generated_catalog(folder: Path, changed: bool) -> Path:
    """The generated catalog as one YAML file; `changed`: pipeline 7's gold SQL filters its rows."""
    rows = catalog_rows(-(-STAGES // 3))
    if changed:
        gold = next(s for s in rows["stages"] if s.pipeline_id == "p00007" and s.stage_order == 3)
        gold.transform_sql = GOLD_SQL.format(silver=gold.input_id).replace(
            " GROUP BY", " WHERE value > 0 GROUP BY"
        )
    folder.mkdir(parents=True)
    tables = {
        table: [row.model_dump(mode="json", exclude_defaults=True) for row in found]
        for table, found in rows.items()
    }
    (folder / "catalog.yaml").write_text(yaml.safe_dump(tables, sort_keys=False))
    return folder


def loaded_catalog(url: str, folder: Path) -> CatalogStore:
    store = CatalogStore(url)
    store.migrate()
    from medallion_assets.catalog.snapshot import CatalogSnapshot

    store.upsert(validate_files(CatalogSnapshot(), [folder]).rows)
    return store


# The command in a new process, saying on its last line of stderr how long its imports took (the CLI's and
# those the plan command makes when invoked: the CLI imports a sub-command only when it runs) and whether
# pyspark was imported.
COMMAND = """
import atexit, json, sys, time
start = time.perf_counter()
from medallion_assets.cli import main
import medallion_assets.cli.plan, medallion_assets.change.plan, medallion_assets.loading
imported = time.perf_counter() - start
said = lambda: json.dumps({"imports": imported, "pyspark": "pyspark" in sys.modules})
atexit.register(lambda: print(said(), file=sys.stderr))
main(["plan", sys.argv[1]])
"""


def time_in_process(store: CatalogStore, folder: Path, lake: Lake) -> tuple[float, float]:
    """Seconds to read and validate, and to plan."""
    start = time.perf_counter()
    stored = store.snapshot()
    loaded = validate_files(stored, [folder])
    validated = time.perf_counter()
    plan = plan_files(stored, loaded, lake)
    planned = time.perf_counter()
    assert plan.rows, "the benchmark's change must show in the plan"
    return validated - start, planned - validated


def time_command(env: dict[str, str], folder: Path) -> tuple[float, float, bool, float]:
    """Wall seconds of the command, of which imports, whether it imported pyspark, and its CPU seconds (user
    and system: on a shared machine, what the command costs whatever the load)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, str(folder)], env=env, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 1, done.stderr
    said = json.loads(done.stderr.strip().splitlines()[-1])
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return elapsed, said["imports"], said["pyspark"], cpu


def measure(name: str, stored_folder: Path, planned_folder: Path, work: Path, repeats: int) -> None:
    url = f"sqlite:///{work / name.replace(' ', '_')}.db"
    lake = str(work / "lake")
    store = loaded_catalog(url, stored_folder)
    env = {**os.environ, "MEDALLION_CATALOG_URL": url, "MEDALLION_LAKE_URL": lake, "PYTHONPATH": str(REPO)}
    in_process = [time_in_process(store, planned_folder, Lake.resolve(lake)) for _ in range(repeats)]
    command = [time_command(env, planned_folder) for _ in range(repeats)]
    stages = len(store.snapshot().stages())
    validate, plan = (statistics.median(t[part] for t in in_process) for part in (0, 1))
    wall, imports, cpu = (statistics.median(c[part] for c in command) for part in (0, 1, 3))
    print(
        f"{name:<22} {stages:>6,} stages  read+validate {validate:6.3f} s  plan {plan:6.3f} s  |  "
        f"command {wall:6.3f} s (imports {imports:6.3f} s, CPU {cpu:6.3f} s)  "
        f"pyspark imported: {any(c[2] for c in command)}"
    )


def gold_changed(folder: Path, minimum: int) -> Path:
    """The seed with orders_etl's gold stage keeping orders of `minimum` or more."""
    shutil.copytree(SEED, folder)
    orders = folder / "orders_etl.yaml"
    grouped = "      FROM silver_orders\n      GROUP BY 1, 2\n"
    assert orders.read_text().count(grouped) == 1
    orders.write_text(
        orders.read_text().replace(
            grouped, grouped.replace("GROUP", f"WHERE amount >= {minimum}\n      GROUP")
        )
    )
    return folder


def measure_environments(work: Path, repeats: int, events: int) -> None:
    """(c) to (f) of the docstring, printed per repeat and as medians."""
    from dagster import DagsterInstance

    from medallion_assets.catalog.loader import merged_snapshot
    from medallion_assets.change.apply import apply_environment
    from medallion_assets.change.preview import (
        EnvironmentRunner,
        PreviewLedger,
        environment_snapshot,
        environments,
        preview,
    )
    from medallion_assets.control.steering.throttles import CatalogThrottles
    from medallion_assets.definitions import build_definitions
    from medallion_assets.engine.refresh import FullRefresh
    from medallion_assets.engine.spark import spark_session
    from medallion_assets.engine.stage import StageRunner
    from medallion_assets.local_s3 import local_s3
    from medallion_assets.recovery.routes import CatalogRoutes
    from medallion_assets.runner import run_pipeline
    from medallion_assets.sample_data import write_sample_data
    from medallion_assets.storage.lake.layout import table_of
    from medallion_assets.storage.lake.metadata import load_table, snapshot_total
    from medallion_assets.storage.warehouse import warehouse_from_url

    url, lake, warehouse_url = (
        f"sqlite:///{work}/env.db",
        Lake.resolve(work / "env_lake"),
        f"duckdb:///{work}/env.duckdb",
    )
    with local_s3(buckets=("medallion-raw",)):
        write_sample_data("s3://medallion-raw", events)
        spark = spark_session({}, "medallion-bench")
        store = loaded_catalog(url, SEED)
        with DagsterInstance.ephemeral() as instance:
            ran = run_pipeline(
                build_definitions(url, lake.root, warehouse_url),
                store.snapshot(),
                store,
                "orders_etl",
                instance,
            )
        assert ran.status == "success", ran
    tracker = spark.sparkContext.statusTracker()
    figures = []
    for repeat in range(repeats):
        env, stored = f"bench{repeat}", store.snapshot()
        files = validate_files(stored, [gold_changed(work / env, 100 + repeat)])
        new = merged_snapshot(stored, files)
        warehouse = warehouse_from_url(warehouse_url)
        services = {"throttle": CatalogThrottles(store), "recovery": CatalogRoutes(store, new)}
        in_env = environment_snapshot(new, env)
        runner = EnvironmentRunner(spark, in_env, PreviewLedger(store), lake, warehouse, **services, env=env)
        start = time.perf_counter()
        [diff] = preview(runner, plan_files(stored, files, lake)).tables
        previewed = time.perf_counter() - start
        written = {
            str(table_of(t)): 0
            for t in new.targets.values()
            if t.layer != "bronze" and load_table(lake, table_of(t))
        }
        for branch in environments(lake, new)[env]:
            added = snapshot_total(lake, branch.table, branch.snapshot_id, "added-files-size")
            written[str(branch.table)] = added or 0

        store.upsert(files.rows)
        publisher = StageRunner(spark, store.snapshot(), store, lake, warehouse, **services)
        spark.sparkContext.setJobGroup(env, "apply")
        start = time.perf_counter()
        [applied] = apply_environment(publisher, env)
        applying = time.perf_counter() - start
        jobs = len(tracker.getJobIdsForGroup(env))
        spark.sparkContext.setJobGroup("baseline", "the stage alone")
        assert applied.how == "fast-forwarded", applied

        alone = StageRunner(
            spark,
            store.snapshot(),
            store,
            lake,
            warehouse,
            **services,
            full_refresh=FullRefresh(starts=None, asked_by="bench/plan.py"),
        )
        stage = alone.snapshot.stage_producing(diff.dataset)
        assert stage is not None
        start = time.perf_counter()
        assert alone.run_stage(stage).snapshot_id is not None
        baseline = time.perf_counter() - start
        warehouse.close()
        figures.append((previewed, baseline, applying, jobs))
        shown = ", ".join(f"{table} {size:,} B" for table, size in sorted(written.items()))
        print(
            f"repeat {repeat}: preview {previewed:6.2f} s, the stage alone {baseline:6.2f} s "
            f"(ratio {previewed / baseline:4.2f}); apply {applying:5.2f} s for 1 table, {jobs} Spark job(s); "
            f"written by the preview: {shown}"
        )
    previewed, baseline, applying = (statistics.median(f[i] for f in figures) for i in range(3))
    print(
        f"medians of {repeats}, {events:,} events: preview {previewed:.2f} s, "
        f"the stage alone {baseline:.2f} s, ratio {previewed / baseline:.2f} (goal ≤ 1.2); "
        f"apply {applying:.2f} s per table (goal ≤ 2 s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--environments", action="store_true", help="preview and apply, (c) to (f)")
    parser.add_argument("--events", type=int, default=100_000, help="sample events for --environments")
    args = parser.parse_args()
    if args.environments:
        with tempfile.TemporaryDirectory() as temporary:
            measure_environments(Path(temporary), args.repeats, args.events)
        return
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        changed_seed = work / "seed_changed"
        shutil.copytree(SEED, changed_seed)
        events = changed_seed / "user_events_etl.yaml"
        events.write_text(
            events.read_text().replace(
                "FROM silver_user_events\n", "FROM silver_user_events WHERE value > 0\n"
            )
        )
        measure("seed, one change", SEED, changed_seed, work, args.repeats)
        measure(
            "generated, one change",
            generated_catalog(work / "generated", changed=False),
            generated_catalog(work / "generated_changed", changed=True),
            work,
            args.repeats,
        )


if __name__ == "__main__":
    main()
