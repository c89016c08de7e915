"""Benchmark: the seed pipeline user_events_etl through Medallion against hand-written PySpark scripts.

`--rows` raw events are written once, before any timing, with `write_sample_data` to an S3 API server on
loopback (moto's server mode). Then, `--repeats` times, alternating which side goes first:

(a) Medallion: the seed catalog loaded into a fresh SQLite catalog (untimed), then, timed,
    `build_definitions(...)` + `run_pipeline(...)` on an ephemeral DagsterInstance, into a fresh lake and
    a fresh DuckDB warehouse: a fresh catalog means empty bookmarks, so every run ingests every object;
(b) hand-written: boto3 downloads the objects; Spark reads the JSON lines (PERMISSIVE, corrupt records to a
    quarantine table) and appends them to a bronze Iceberg table; reads it, casts event_ts to timestamp (rows
    that fail to quarantine), drops duplicate event_ids and writes the silver table; aggregates events and
    distinct users per day into the gold table, and replaces the table in DuckDB with it. The same Iceberg
    runtime, in a JDBC catalog of its own. Its bronze keeps the source file but not the line number, and its
    silver keeps an arbitrary copy of a duplicate (they are exact copies), where Medallion keeps the first;
(c) hand-written parquet: the same script on plain parquet folders, as Medallion's lake was before it became
    Iceberg tables: the figure against "today's parquet lake".

All run in this process on one Spark session, created before timing with spark.driver.memory=2g. All must
load the same gold rows, equal to what the generator says survives (asserted). Prints the medians, the ratio
Medallion / hand-written Iceberg (goal <= 1.1) and / hand-written parquet, and a per-stage breakdown:
Medallion's stage durations come from its audit_log, the framework's share is the rest of its time, and the
rules' scans of written data (all of bronze's rules; in silver and gold only rules an observation during the
write cannot compute, which the seed has none of: its unique rules are on the targets' dedupe keys) are
re-measured after each run on the tables the stages wrote.

    python bench/end_to_end.py                 # 5,000,000 events, 3 repeats
    python bench/end_to_end.py --quick         # 100,000 events, 2 repeats
    python bench/end_to_end.py --rows 2000000 --cluster   # both sides on a standalone cluster on loopback
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

import boto3
import duckdb
from dagster import DagsterInstance
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from medallion_assets import config
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.definitions import build_definitions
from medallion_assets.engine.spark import spark_session
from medallion_assets.engine.validation import evaluate_rules, reads_written_data
from medallion_assets.loading import validate_files
from medallion_assets.local_s3 import local_s3
from medallion_assets.runner import run_pipeline
from medallion_assets.sample_data import SampleSummary, write_sample_data
from medallion_assets.storage.lake.catalogs import LakeCatalog
from medallion_assets.storage.lake.layout import table_of
from medallion_assets.storage.lake.tables import LakeTables

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.spark_servers import standalone_cluster  # noqa: E402

SEED = Path(__file__).resolve().parents[1] / "metadata_seed"
BUCKET = "medallion-raw"  # the seed's sources live under s3://medallion-raw/
PREFIX = "user_events/"
PIPELINE = "user_events_etl"
GOLD_TABLE = "analytics.daily_user_events"
STAGES = ("bronze_ingest", "silver_clean", "gold_daily_aggregate")
CORRUPT = "_corrupt_record"
RAW_SCHEMA = (
    f"event_id string, user_id string, event_type string, event_ts string, value double, {CORRUPT} string"
)
DRIVER_MEMORY = "2g"
WARM_UP_ROWS = 10_000
SIDES = ("medallion", "hand-written", "hand-written parquet")


def gold_rows(duckdb_file: Path) -> list[tuple]:
    with duckdb.connect(str(duckdb_file), read_only=True) as connection:
        return connection.execute(f"SELECT * FROM {GOLD_TABLE} ORDER BY 1").fetchall()


def run_medallion(spark: SparkSession, workdir: Path) -> dict:
    """One timed Medallion run from an empty catalog, lake and warehouse; returns times, gold and audit
    rows."""
    catalog_url = f"sqlite:///{workdir / 'catalog.db'}"
    warehouse_file = workdir / "warehouse.duckdb"
    lake_root = str(workdir / "lake")
    store = CatalogStore(catalog_url)
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    # Disposed of here, in this thread: an in-memory instance left to the garbage collector is closed in
    # whichever thread collects it, and its SQLite connections refuse that with a traceback.
    with DagsterInstance.ephemeral() as instance:
        start = time.perf_counter()
        defs = build_definitions(catalog_url, lake_root, f"duckdb:///{warehouse_file}")
        report = run_pipeline(defs, store.snapshot(), store, PIPELINE, instance)
        total = time.perf_counter() - start
    assert report.status == "success", report

    audit = {entry["stage_name"]: entry for entry in store.audit_entries(event="stage", status="success")}
    return {
        "total": total,
        "stages": {name: audit[name]["duration_sec"] for name in STAGES},
        "validation": validation_seconds(spark, store, lake_root),
        "quarantined": {name: audit[name]["rows_quarantined"] for name in STAGES},
        "gold": gold_rows(warehouse_file),
    }


def validation_seconds(spark: SparkSession, store: CatalogStore, lake_root: str) -> dict[str, float]:
    """What each stage spends scanning its written data for rules, re-measured on the same files.

    Bronze evaluates its rules on the whole written dataset; silver and gold observe theirs during the write,
    which costs little, and read the written data back only for the rules an observation cannot compute.
    """
    snapshot = store.snapshot()
    lake = LakeTables(spark, lake_root)
    seconds = {}
    for stage in snapshot.stages(PIPELINE):
        target = snapshot.targets[stage.target_id]
        rules = [
            rule
            for rule in snapshot.rule_sets[stage.validation_set_id].check_def
            if target.layer == "bronze" or reads_written_data(rule, target.keys)
        ]
        start = time.perf_counter()
        if rules:
            evaluate_rules(lake.read(table_of(target)), rules)
        seconds[stage.stage_name] = time.perf_counter() - start
    return seconds


class HandWrittenLake:
    """Where the hand-written script keeps its layers: Iceberg tables in a JDBC catalog of its own, configured
    as the lake configures its catalogs (`LakeCatalog`, so both sides use the same catalog settings), or
    parquet folders."""

    def __init__(self, spark: SparkSession, workdir: Path, iceberg: bool):
        self.spark, self.folder, self.iceberg = spark, workdir / "lake", iceberg
        # A catalog name per run: Spark keeps a catalog it has loaded for the session's lifetime.
        self.catalog = f"hand_{uuid.uuid4().hex[:8]}"
        if iceberg:
            catalog = LakeCatalog(self.catalog, f"sqlite:///{workdir}/catalog.db", str(self.folder))
            for key, value in catalog.spark_conf().items():
                spark.conf.set(key, value)
            for namespace in ("bronze", "silver", "gold", "quarantine"):
                spark.sql(f"CREATE NAMESPACE {self.catalog}.{namespace}")

    def write(self, frame, name: str, by_day: str | None = None) -> None:
        """Create table `name` of `frame`'s rows: an Iceberg one partitioned by the day of column `by_day`
        when given, as the seed's silver is (`lake_table.partition_by: [days(event_ts)]`); parquet as the
        lake was before Iceberg (unpartitioned)."""
        if self.iceberg:
            writer = frame.writeTo(f"{self.catalog}.{name}")
            (writer.partitionedBy(F.days(by_day)) if by_day else writer).create()
        else:
            frame.write.parquet(str(self.folder / name))

    def read(self, name: str):
        return (
            self.spark.table(f"{self.catalog}.{name}")
            if self.iceberg
            else self.spark.read.parquet(str(self.folder / name))
        )


def run_hand_written(spark: SparkSession, workdir: Path, iceberg: bool = True) -> dict:
    """The same pipeline as a data engineer would write it by hand, timed stage by stage."""
    s3 = boto3.client("s3")
    raw, warehouse_file = workdir / "raw", workdir / "warehouse.duckdb"
    raw.mkdir()
    lake = HandWrittenLake(spark, workdir, iceberg)
    stages = {}

    start = time.perf_counter()
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX)
    for key in [item["Key"] for page in pages for item in page.get("Contents", [])]:
        s3.download_file(BUCKET, key, str(raw / Path(key).name))
    # Spark refuses a query of the corrupt-record column alone on a raw JSON scan unless the scan is cached.
    events = (
        spark.read.schema(RAW_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(str(raw))
        .withColumn("_source_file", F.col("_metadata.file_path"))
        .withColumn("_ingested_at", F.current_timestamp())
        .cache()
    )
    lake.write(events.where(F.col(CORRUPT).isNull()).drop(CORRUPT), "bronze.user_events")
    lake.write(events.where(F.col(CORRUPT).isNotNull()).select("_source_file", CORRUPT), "quarantine.bronze")
    events.unpersist()
    stages["bronze_ingest"] = time.perf_counter() - start

    start = time.perf_counter()
    bronze = lake.read("bronze.user_events")
    event_ts = F.col("event_ts").try_cast("timestamp")
    bad_ts = F.col("event_ts").isNotNull() & event_ts.isNull()
    lake.write(bronze.where(bad_ts), "quarantine.silver")
    lake.write(
        bronze.where(~bad_ts)
        .withColumn("event_ts", event_ts)
        .drop("_source_file", "_ingested_at")
        .dropDuplicates(["event_id"]),
        "silver.user_events",
        by_day="event_ts",
    )
    stages["silver_clean"] = time.perf_counter() - start

    start = time.perf_counter()
    lake.write(
        lake.read("silver.user_events")
        .groupBy(F.to_date("event_ts").alias("event_date"))
        .agg(F.count("*").alias("total_events"), F.countDistinct("user_id").alias("unique_users")),
        "gold.daily_user_events",
    )
    batch = lake.read("gold.daily_user_events").toArrow()
    with duckdb.connect(str(warehouse_file)) as connection:
        connection.register("batch", batch)
        connection.execute("CREATE SCHEMA IF NOT EXISTS analytics")
        connection.execute(f"CREATE OR REPLACE TABLE {GOLD_TABLE} AS SELECT * FROM batch")
    stages["gold_daily_aggregate"] = time.perf_counter() - start

    quarantined = {
        "bronze_ingest": lake.read("quarantine.bronze").count(),
        "silver_clean": lake.read("quarantine.silver").count(),
        "gold_daily_aggregate": 0,
    }
    return {
        "total": sum(stages.values()),
        "stages": stages,
        "quarantined": quarantined,
        "gold": gold_rows(warehouse_file),
    }


def run_side(spark: SparkSession, side: str, scratch: str, summary: SampleSummary) -> dict:
    """One run of one side in a folder of its own, checked against what the generator wrote."""
    with tempfile.TemporaryDirectory(dir=scratch) as workdir:
        if side == "medallion":
            result = run_medallion(spark, Path(workdir))
        else:
            result = run_hand_written(spark, Path(workdir), iceberg=side == "hand-written")
    spark.catalog.clearCache()
    check(result, summary, side)
    return result


def check(result: dict, summary: SampleSummary, side: str) -> None:
    """Each side kept, quarantined and deduplicated exactly what the generator says it wrote."""
    expected_quarantine = {
        "bronze_ingest": summary.malformed_events,
        "silver_clean": summary.bad_timestamp_events,
        "gold_daily_aggregate": 0,
    }
    assert result["quarantined"] == expected_quarantine, (side, result["quarantined"], expected_quarantine)
    survivors = (
        summary.event_lines
        - summary.malformed_events
        - summary.bad_timestamp_events
        - summary.duplicate_events
    )
    assert sum(row[1] for row in result["gold"]) == survivors, (side, result["gold"], survivors)


def median_of(results: list[dict], *path: str) -> float:
    values = []
    for result in results:
        for name in path:
            result = result[name]
        values.append(result)
    return statistics.median(values)


def report(medallion: list[dict], hand: list[dict], parquet: list[dict]) -> None:
    m_total, h_total, p_total = (median_of(side, "total") for side in (medallion, hand, parquet))
    print(
        f"\nMedallion:              median {m_total:7.2f} s  runs {[round(r['total'], 2) for r in medallion]}"
    )
    print(f"hand-written (Iceberg): median {h_total:7.2f} s  runs {[round(r['total'], 2) for r in hand]}")
    print(f"hand-written (parquet): median {p_total:7.2f} s  runs {[round(r['total'], 2) for r in parquet]}")
    print(f"ratio Medallion / hand-written Iceberg: {m_total / h_total:.2f}  (goal <= 1.1)")
    print(f"ratio Medallion / hand-written parquet: {m_total / p_total:.2f}")
    # The runs of a repeat are neighbours in time, so their ratio is less exposed to the machine's drift.
    paired = [m["total"] / h["total"] for m, h in zip(medallion, hand)]
    print(f"per-repeat ratios {[round(r, 2) for r in paired]}, median {statistics.median(paired):.2f}\n")
    print(f"{'stage (medians, s)':<26}{'Medallion':>10}{'rule scans':>16}{'hand-written':>14}{'gap':>8}")
    for name in STAGES:
        m, h = median_of(medallion, "stages", name), median_of(hand, "stages", name)
        rules = median_of(medallion, "validation", name)
        print(f"{name:<26}{m:>10.2f}{rules:>16.2f}{h:>14.2f}{m - h:>8.2f}")
    framework = statistics.median(r["total"] - sum(r["stages"].values()) for r in medallion)
    print(f"{'framework (Dagster, defs)':<26}{framework:>10.2f}{'':>16}{'':>14}{framework:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="--quick: 100,000 events, 2 repeats"
    )
    parser.add_argument("--rows", type=int, default=5_000_000, help="raw events (default 5,000,000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each side (default 3)")
    parser.add_argument("--quick", action="store_true", help="a small run to check that everything works")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="both sides on a Spark standalone cluster (a master and a 2-core worker) on loopback",
    )
    args = parser.parse_args()
    rows, repeats = (100_000, 2) if args.quick else (args.rows, args.repeats)

    with (
        local_s3(buckets=(BUCKET,)),
        tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch,
        standalone_cluster(Path(scratch), {}) if args.cluster else nullcontext((None, None)) as (master, _),
    ):
        if master:  # started after the S3 server, so that its executors see its endpoint and credentials
            # The cluster is on this machine: its executors' Python workers run this interpreter.
            os.environ.update(SPARK_MASTER=master, PYSPARK_PYTHON=sys.executable)
        spark = spark_session({"spark.driver.memory": DRIVER_MEMORY}, "medallion-bench")
        print(
            f"Spark {spark.version}, master {config.spark_remote() or config.spark_master()}, "
            f"driver memory {DRIVER_MEMORY}"
        )
        # The first Spark jobs in a JVM and the first Dagster run in a process are slower (class loading,
        # JIT, lazy imports): one untimed run of each side on a small sample, whose objects the full
        # sample then replaces (same names), so neither side pays for it.
        warm_up = write_sample_data(f"s3://{BUCKET}", WARM_UP_ROWS)
        for side in SIDES:
            run_side(spark, side, scratch, warm_up)

        start = time.perf_counter()
        summary = write_sample_data(f"s3://{BUCKET}", rows)
        objects = sum(f"/{PREFIX}" in url for url in summary.objects)
        print(f"wrote {rows:,} events in {objects} objects in {time.perf_counter() - start:.1f} s (untimed)")

        results: dict[str, list[dict]] = {side: [] for side in SIDES}
        for repeat in range(repeats):
            for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
                result = run_side(spark, side, scratch, summary)
                results[side].append(result)
                print(
                    f"repeat {repeat + 1} {side:<12} {result['total']:7.2f} s  "
                    + "  ".join(f"{name} {seconds:.2f}" for name, seconds in result["stages"].items())
                )
            gold = {side: results[side][-1]["gold"] for side in SIDES}
            assert len({repr(rows) for rows in gold.values()}) == 1, (
                f"the sides loaded other gold rows: {gold}"
            )
    medallion, hand, parquet = (results[side] for side in SIDES)
    print(
        f"\n{rows:,} events; every side loaded the same {len(hand[0]['gold'])} gold rows: "
        + ", ".join(f"{day} {events}/{users}" for day, events, users in hand[0]["gold"])
    )
    report(medallion, hand, parquet)


if __name__ == "__main__":
    main()
