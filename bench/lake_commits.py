"""Benchmark: what the lake's commits cost.

1. Write-audit-publish against a direct overwrite, at `--rows` rows (2,000,000 by default): a silver-like
   stage (deduplicate by key, observe its rules' counts during the write, scan the written rows for the rest)
   written (a) straight to the table's `main` with one overwrite commit, and (b) as Medallion writes it: to
   a branch named after the run, rules judged on the branch, `main` fast-forwarded, the branch dropped.
   Alternating, `--repeats` times each; the ratio of medians (b)/(a) is the WAP overhead (goal <= 1.1).
2. Reading a table's current snapshot in the Dagster process through pyiceberg, without a JVM: median over
   `--reads` reads of a table with 1 snapshot and of one with `--snapshots` (1,000 by default; goal < 100 ms),
   the history made with pyiceberg appends.

    python bench/lake_commits.py                  # 2,000,000 rows, 3 repeats; 1,000 snapshots
    python bench/lake_commits.py --quick          # 100,000 rows, 2 repeats; 100 snapshots
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from medallion_assets.catalog.models import Rule
from medallion_assets.engine.spark import spark_session
from medallion_assets.engine.transform import deduplicate
from medallion_assets.engine.validation import observe_rules
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.metadata import table_info
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables

RULES = [
    Rule(type="not_null", column="event_id"),
    Rule(type="unique", column="event_id"),
    Rule(type="accepted_values", column="event_type", values=["view", "click", "purchase", "signup"]),
    Rule(type="range", column="value", min=0, severity="warn"),
]


def events(spark: SparkSession, rows: int) -> DataFrame:
    """`rows` events with 2% duplicate ids, as silver receives them from bronze."""
    ids = F.format_string("e%010d", (F.col("id") * 49 / 50).cast("bigint"))
    kinds = F.element_at(
        F.array(*[F.lit(k) for k in ("view", "click", "purchase", "signup")]),
        (F.col("id") % 4 + 1).cast("int"),
    )
    return spark.range(rows).select(
        ids.alias("event_id"),
        F.format_string("u%06d", F.col("id") % 5000).alias("user_id"),
        kinds.alias("event_type"),
        (F.lit(1_790_000_000) + F.col("id")).cast("timestamp").alias("event_ts"),
        (F.col("id") % 100).cast("double").alias("value"),
    )


def silver_stage(lake: LakeTables, table: TableRef, frame: DataFrame, wap: bool) -> float:
    """One silver write, timed: (wap) staged, audited on the branch and published; else straight to main."""
    start = time.perf_counter()
    observed, judge, written_rows = observe_rules(
        deduplicate(frame, ["event_id"], "event_ts"), RULES, unique_on=["event_id"]
    )
    lake.ensure(table, observed.schema, None)
    if wap:
        branch = lake.stage(table, observed, uuid.uuid4().hex)
        outcomes = judge(lake.read(table, branch=branch))
        if not any(not o.passed and o.rule.severity == "error" for o in outcomes):
            lake.publish(table, branch)
    else:
        observed.writeTo(table.sql).overwrite(F.lit(True))
        outcomes = judge(lake.read(table))
    assert written_rows() > 0 and all(o.passed for o in outcomes), outcomes
    return time.perf_counter() - start


def commit_overhead(spark: SparkSession, root: str, rows: int, repeats: int) -> None:
    lake = LakeTables(spark, Lake.resolve(root))
    frame = events(spark, rows).cache()
    frame.count()
    table = TableRef("lake", "silver", "events")
    silver_stage(lake, table, frame, wap=True)  # warm-up: JIT, class loading, the table's creation
    times: dict[bool, list[float]] = {True: [], False: []}
    for repeat in range(repeats):
        for wap in (True, False) if repeat % 2 == 0 else (False, True):
            times[wap].append(silver_stage(lake, table, frame, wap))
    wap, direct = statistics.median(times[True]), statistics.median(times[False])
    print(f"{rows:,} rows, {repeats} repeats each")
    print(f"  direct overwrite of main: median {direct:.2f} s  runs {[round(t, 2) for t in times[False]]}")
    print(f"  write-audit-publish:      median {wap:.2f} s  runs {[round(t, 2) for t in times[True]]}")
    print(f"  ratio WAP / direct: {wap / direct:.2f}  (goal <= 1.1)")


def metadata_reads(root: str, snapshots: int, reads: int) -> None:
    lake = Lake.resolve(root)
    catalog = lake.catalog("lake").metadata()
    catalog.create_namespace_if_not_exists("history")
    batch = pa.table({"id": pa.array([1], pa.int64())})
    medians = {}
    for count in (1, snapshots):
        name = f"history.t{count}"
        table = catalog.create_table(name, schema=batch.schema)
        start = time.perf_counter()
        for _ in range(count):
            table.append(batch)
        made = time.perf_counter() - start
        ref = TableRef("lake", "history", f"t{count}")
        seconds = []
        for _ in range(reads):
            start = time.perf_counter()
            info = table_info(lake, ref)
            seconds.append(time.perf_counter() - start)
            assert info is not None and len(info.history) == count
        medians[count] = statistics.median(seconds)
        print(
            f"  {count:>5} snapshot(s) (made in {made:.1f} s): current snapshot and history read in "
            f"median {medians[count] * 1000:.1f} ms over {reads} reads"
        )
    print(
        f"  ratio {snapshots} / 1 snapshot: {medians[snapshots] / medians[1]:.2f}  (goal < 100 ms absolute)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--snapshots", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="100,000 rows, 2 repeats, 100 snapshots")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats, args.snapshots = 100_000, 2, 100
    with tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch:
        spark = spark_session({"spark.driver.memory": "2g"}, "medallion-bench")
        print(f"Spark {spark.version}; lake in {scratch}")
        commit_overhead(spark, str(Path(scratch) / "lake"), args.rows, args.repeats)
        metadata_reads(str(Path(scratch) / "history"), args.snapshots, args.reads)


if __name__ == "__main__":
    sys.exit(main())
