"""The hand-written PySpark + Iceberg scripts that the benchmarks measure Medallion against.

They use neither Dagster nor Medallion's engine: only the session settings (`spark_session`, so that both
sides run on the same Spark configuration) and the lake's catalog registration come from Medallion.

`bench/end_to_end.py` and `bench/incremental.py` call them in their own Spark session; run as a process,
as a user runs a script, they print their result as one JSON line (Spark start included in the process):

    python bench/hand_written.py full WORKDIR [--parquet]    # s3://medallion-raw/user_events/ to gold
    python bench/hand_written.py batch FOLDER LAKE_ROOT DAY  # one batch, FOLDER/day-DAY.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

import boto3
import duckdb
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from medallion_assets.engine.spark import spark_session  # noqa: E402
from medallion_assets.storage.lake.catalogs import LakeCatalog  # noqa: E402
from medallion_assets.storage.lake.root import Lake  # noqa: E402
from medallion_assets.storage.lake.tables import LakeTables  # noqa: E402

BUCKET = "medallion-raw"  # the seed's sources live under s3://medallion-raw/
PREFIX = "user_events/"
GOLD_TABLE = "analytics.daily_user_events"
CORRUPT = "_corrupt_record"
RAW_SCHEMA = (
    f"event_id string, user_id string, event_type string, event_ts string, value double, {CORRUPT} string"
)


def gold_rows(duckdb_file: Path) -> list[tuple]:
    with duckdb.connect(str(duckdb_file), read_only=True) as connection:
        return connection.execute(f"SELECT * FROM {GOLD_TABLE} ORDER BY 1").fetchall()


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


def day_file(folder: Path, day: int) -> Path:
    return folder / f"day-{day:03d}.jsonl"


def land_day(folder: Path, day: int, lines: list[str]) -> None:
    """Day `day`'s events as the incremental script reads them: one local JSON lines file."""
    day_file(folder, day).write_text("\n".join(lines) + "\n")


class HandWritten:
    """The same work per batch as a lean PySpark + Iceberg script would do it, in the same Spark session and
    lake catalog (tables `lake.handwritten.*`): the day's raw events appended to a bronze table; typed and
    deduplicated, merged into silver (kept by day) with `MERGE INTO`, inserting the events it lacks (late
    ones land on their day; a copy finds its event, searched only from the batch's first day on); gold's
    SQL recomputed for the days the batch touched, overwriting those days. It reads the day's objects from
    local files written beforehand (Medallion reads them from the S3 API), and loads no warehouse. Its tables
    are created when absent, so that a process of its own can merge each batch into them."""

    BRONZE, SILVER, GOLD = "lake.handwritten.bronze", "lake.handwritten.silver", "lake.handwritten.gold"
    RAW = "event_id string, user_id string, event_type string, event_ts string, value double"

    def __init__(self, spark: SparkSession, folder: Path, lake_root: str):
        self.spark, self.folder = spark, folder
        LakeTables(spark, Lake.resolve(lake_root))  # registers the lake's catalog on the session
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.handwritten")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {self.BRONZE} ({self.RAW}, _day int) USING iceberg")
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.SILVER} (event_id string, user_id string, event_type string, "
            "event_ts timestamp, value double) USING iceberg PARTITIONED BY (days(event_ts)) "
            "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read')"
        )
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.GOLD} (event_date date, total_events bigint, "
            "unique_users bigint) USING iceberg PARTITIONED BY (event_date)"
        )

    def land(self, day: int, lines: list[str]) -> None:
        land_day(self.folder, day, lines)

    def run(self, day: int) -> float:
        """One batch, timed."""
        spark, start = self.spark, time.perf_counter()
        raw = spark.read.schema(self.RAW).json(str(day_file(self.folder, day)))
        raw.withColumn("_day", F.lit(day)).writeTo(self.BRONZE).append()
        batch = (
            spark.table(self.BRONZE)
            .where(F.col("_day") == day)
            .withColumn("event_ts", F.to_timestamp("event_ts"))
            .drop("_day")
            .dropDuplicates(["event_id"])
        )
        batch.createOrReplaceTempView("handwritten_batch")
        days = sorted(r[0] for r in batch.select(F.to_date("event_ts")).distinct().collect())
        since = f"TIMESTAMP '{days[0]}'"
        spark.sql(
            f"MERGE INTO {self.SILVER} t USING handwritten_batch s "
            f"ON t.event_id = s.event_id AND t.event_ts >= {since} WHEN NOT MATCHED THEN INSERT *"
        )
        touched = ", ".join(f"DATE '{d}'" for d in days)
        spark.sql(
            "SELECT CAST(event_ts AS DATE) AS event_date, COUNT(*) AS total_events, "
            f"COUNT(DISTINCT user_id) AS unique_users FROM {self.SILVER} "
            f"WHERE event_ts >= {since} AND CAST(event_ts AS DATE) IN ({touched}) GROUP BY 1"
        ).writeTo(self.GOLD).overwritePartitions()
        return time.perf_counter() - start

    def gold(self) -> list[tuple]:
        return [tuple(row) for row in self.spark.sql(f"SELECT * FROM {self.GOLD} ORDER BY 1").collect()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    full = commands.add_parser("full", help="user_events_etl from the raw objects into a lake in WORKDIR")
    full.add_argument("workdir", type=Path)
    full.add_argument("--parquet", action="store_true", help="plain parquet folders instead of Iceberg")
    batch = commands.add_parser("batch", help="one day's batch merged into the tables in LAKE_ROOT")
    batch.add_argument("folder", type=Path)
    batch.add_argument("lake_root")
    batch.add_argument("day", type=int)
    args = parser.parse_args()

    spark = spark_session(app_name="hand-written")
    if args.command == "full":
        result = run_hand_written(spark, args.workdir, iceberg=not args.parquet)
    else:
        script = HandWritten(spark, args.folder, args.lake_root)
        result = {"total": script.run(args.day), "gold": script.gold()}
    spark.stop()
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
