"""Benchmark: a type 2 dimension kept by Medallion's change feed against a hand-written MERGE (issue 24).

A dimension of `--keys` customers (10,000,000 by default) is built as Medallion builds one: a bronze table of
change events (one insert per key, sequence 1), and a silver stage with `cdc` and `scd_type: 2` that makes
the history (validity columns `__valid_from`, `__valid_to`, `__is_current`). Then `--batches` batches each
change 1% of the keys: most update a tracked column (`tier`), a few (2% of the batch) delete their key. Each
batch is appended to bronze (untimed), then applied twice in the same Spark session:

- Medallion: the silver stage, run by StageRunner, which must take its incremental path (details["mode"]
  == "incremental", else the benchmark fails). Timed: `run_stage` whole, as an asset would run it: the
  plan, the read of bronze's new rows, the keys' events, the history of those keys, their rows replaced on
  the run's branch (1% of keys touch every data file, so the table is written whole in one commit; see
  `LakeTables.stage_replacing`), the rules (the three history checks of a type 2 table among them) and the
  publish.
- By hand: the SCD2 a data engineer writes with Iceberg's `MERGE INTO` on a table of the same columns
  (format-version 2 and Iceberg's default copy-on-write, like the lake's tables): one MERGE whose source is
  the batch twice over (the classic `merge_key` trick), which closes the current version of each changed or
  deleted key and inserts the new versions, in one commit. Timed: the read of the batch from bronze
  (Iceberg's incremental read of the appended snapshot) and the MERGE.

The two tables are compared after the first build and after every batch: row count, current rows, and an
order-free checksum (sum of xxhash64) of every row and of the current rows over all their columns, validity
columns included (both take a version's bounds from the events' sequence, so they coincide exactly); any
difference fails the benchmark and shows some differing rows.

The batches alternate which side runs first. Prints batch, seconds of each side and their ratio, and the
median ratio (goal <= 1.3). `--profile` adds where Medallion's time goes: its parts, timed by wrapping the
engine's methods, and every Spark job of the batch (from Spark's REST API).

    python bench/cdc.py --keys 1000000            # 1M keys, 3 batches of 10,000 changes
    python bench/cdc.py                           # the issue's size: 10M keys
    python bench/cdc.py --keys 100000 --batches 2 --profile
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import tempfile
import time
import traceback
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, DataFrameWriterV2, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.catalog import Catalog
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from medallion_assets.catalog.models import Cdc, Source, Stage, Target  # noqa: E402
from medallion_assets.catalog.snapshot import CatalogSnapshot  # noqa: E402
from medallion_assets.catalog.store import CatalogStore  # noqa: E402
from medallion_assets.control.steering.throttles import CatalogThrottles  # noqa: E402
from medallion_assets.engine.ingest import bronze_schema  # noqa: E402
from medallion_assets.engine.spark import spark_session  # noqa: E402
from medallion_assets.engine.stage import StageOutcome, StageRunner, merge, replace  # noqa: E402
from medallion_assets.engine.stage import runner as stage_runner  # noqa: E402
from medallion_assets.recovery.routes import CatalogRoutes  # noqa: E402
from medallion_assets.storage.lake.layout import TableRef, table_of  # noqa: E402
from medallion_assets.storage.lake.root import Lake  # noqa: E402
from medallion_assets.storage.lake.tables import LakeTables  # noqa: E402

COLUMNS = {
    "customer_id": "bigint",
    "seq": "bigint",
    "op": "string",
    "name": "string",
    "city": "string",
    "tier": "string",
}
SOURCE = Source(
    source_id="customers_cdc", s3_path="s3://unused/customers/", file_format="jsonl", columns=COLUMNS
)
DIMENSION = Target(
    target_id="silver_customers",
    layer="silver",
    columns=COLUMNS,
    keys=["customer_id"],
    cdc=Cdc(sequence_by="seq", apply_as_deletes="op = 'D'", except_columns=["op"]),
    scd_type=2,
)
# The hand-written table: the silver table's columns, validity columns named as Medallion names them.
HANDWRITTEN = TableRef("lake", "handwritten", "customers")
ROW = ["customer_id", "seq", "name", "city", "tier", "__valid_from", "__valid_to", "__is_current"]
TRACKED = ["name", "city", "tier"]
CITIES = ["Lisbon", "Porto", "Braga", "Faro", "Coimbra", "Evora", "Aveiro"]
TIERS = ["bronze", "silver", "gold"]
CHANGED_SHARE, DELETE_SHARE = 0.01, 0.02
FIRST_INGEST = datetime(2026, 11, 1, tzinfo=UTC)

# The SCD2 a data engineer writes with MERGE INTO: each event once with its key as `merge_key` (closes the
# key's current version when the event deletes it or changes a tracked column; inserts a key without a current
# version), and each changing update once more with a null `merge_key`, which matches nothing and so inserts
# the key's new version. One statement, one commit.
SAME_TRACKED = " AND ".join(f"c.{column} <=> b.{column}" for column in TRACKED)
MERGE = f"""
MERGE INTO {HANDWRITTEN.sql} t
USING (
  SELECT b.customer_id AS merge_key, b.* FROM cdc_batch b
  UNION ALL
  SELECT CAST(NULL AS BIGINT) AS merge_key, b.*
  FROM cdc_batch b JOIN {HANDWRITTEN.sql} c ON c.customer_id = b.customer_id AND c.__is_current
  WHERE b.op <> 'D' AND NOT ({SAME_TRACKED})
) s
ON t.customer_id = s.merge_key AND t.__is_current
WHEN MATCHED AND (s.op = 'D' OR NOT ({SAME_TRACKED.replace("c.", "t.").replace("b.", "s.")})) THEN
  UPDATE SET t.__valid_to = s.seq, t.__is_current = false
WHEN NOT MATCHED AND s.op <> 'D' THEN
  INSERT (customer_id, seq, name, city, tier, __valid_from, __valid_to, __is_current)
  VALUES (s.customer_id, s.seq, s.name, s.city, s.tier, s.seq, NULL, true)
"""


class Dimension:
    """A catalog (bronze change feed, its ingest stage, the SCD2 silver stage), a lake, and the hand-written
    table beside Medallion's, in one Spark session."""

    def __init__(self, spark: SparkSession, root: Path):
        self.spark, self.root = spark, root
        self.store = CatalogStore(f"sqlite:///{root}/catalog.db")
        self.store.migrate()
        self.snapshot = CatalogSnapshot()
        self.snapshot.add("sources", SOURCE)
        self.snapshot.add("targets", Target(target_id="bronze_customers", layer="bronze"))
        self.snapshot.add("targets", DIMENSION)
        ingest = Stage(
            pipeline_id="customers",
            stage_order=1,
            stage_name="ingest",
            input_id="customers_cdc",
            target_id="bronze_customers",
        )
        self.snapshot.add("stages", ingest)
        self.stage = Stage(
            pipeline_id="customers",
            stage_order=2,
            stage_name="build_customers",
            input_id="bronze_customers",
            target_id="silver_customers",
        )
        self.snapshot.add("stages", self.stage)
        self.lake = LakeTables(spark, Lake.resolve(root / "lake"))
        self.bronze = table_of(self.snapshot.targets["bronze_customers"])
        self.silver = table_of(DIMENSION)
        self.bronze_schema = bronze_schema(SOURCE)
        schema = spark.createDataFrame([], self.bronze_schema).schema
        self.lake.ensure(self.bronze, schema, None)

    def append(self, events: DataFrame, batch: int) -> tuple[int | None, int]:
        """One bronze batch (untimed); returns bronze's snapshots before and after it."""
        before = self.lake.current_snapshot(self.bronze)
        self.lake.append(self.bronze, events, f"batch{batch}")
        after = self.lake.current_snapshot(self.bronze)
        assert after is not None and after != before
        return before, after

    def medallion(self) -> tuple[float, StageOutcome]:
        """The silver stage, timed whole, as the asset runs it."""
        runner = StageRunner(
            self.spark,
            self.snapshot,
            self.store,
            self.lake.lake,
            None,
            throttle=CatalogThrottles(self.store),
            recovery=CatalogRoutes(self.store, self.snapshot),
        )
        start = time.perf_counter()
        outcome = runner.run_stage(self.stage)
        seconds = time.perf_counter() - start
        failed = [o.message for o in outcome.rule_outcomes if not o.passed]
        assert not failed and outcome.snapshot_id is not None, f"Medallion's checks failed: {failed}"
        return seconds, outcome

    def create_handwritten(self, initial: DataFrame) -> None:
        """The hand-written table, loaded with one version per key from the initial inserts (untimed)."""
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {HANDWRITTEN.catalog}.{HANDWRITTEN.namespace}")
        self.spark.sql(
            f"CREATE TABLE {HANDWRITTEN.sql} (customer_id bigint, seq bigint, name string, city string, "
            "tier string, __valid_from bigint, __valid_to bigint, __is_current boolean) USING iceberg "
            "TBLPROPERTIES ('format-version' = '2')"
        )
        first = initial.where("op <> 'D'").select(
            "customer_id",
            "seq",
            "name",
            "city",
            "tier",
            F.col("seq").alias("__valid_from"),
            F.lit(None).cast("bigint").alias("__valid_to"),
            F.lit(True).alias("__is_current"),
        )
        first.writeTo(HANDWRITTEN.sql).append()

    def merge(self, before: int, after: int) -> float:
        """The hand-written SCD2 of one batch, timed: its read from bronze and the MERGE."""
        start = time.perf_counter()
        batch = (
            self.spark.read.format("iceberg")
            .option("start-snapshot-id", str(before))
            .option("end-snapshot-id", str(after))
            .load(str(self.bronze))
        )
        batch.select(*COLUMNS).createOrReplaceTempView("cdc_batch")
        self.spark.sql(MERGE)
        seconds = time.perf_counter() - start
        self.spark.catalog.dropTempView("cdc_batch")
        return seconds

    def compare(self, when: str) -> dict[str, int]:
        """Fail unless both tables hold the same rows (by count and checksum); returns the figures."""
        medallion, handwritten = self.lake.read(self.silver).select(*ROW), self.spark.table(HANDWRITTEN.sql)
        sides = {"medallion": checksum(medallion), "handwritten": checksum(handwritten.select(*ROW))}
        if sides["medallion"] != sides["handwritten"]:
            only_medallion = medallion.exceptAll(handwritten.select(*ROW)).limit(5).collect()
            only_handwritten = handwritten.select(*ROW).exceptAll(medallion).limit(5).collect()
            raise AssertionError(
                f"{when}: the tables differ: {sides}\n  only in Medallion's: {only_medallion}\n"
                f"  only in the hand-written: {only_handwritten}"
            )
        return sides["medallion"]


def checksum(frame: DataFrame) -> dict[str, int]:
    """Rows, current rows, and the sums of a 64-bit hash of every row and of the current rows."""
    row_hash = F.xxhash64(*[F.col(c) for c in ROW]).cast("decimal(38,0)")
    current = F.col("__is_current")
    figures = frame.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(current, 1)).alias("current"),
        F.coalesce(F.sum(row_hash), F.lit(0)).alias("hash"),
        F.coalesce(F.sum(F.when(current, row_hash)), F.lit(0)).alias("current_hash"),
    ).collect()[0]
    return {name: int(figures[name]) for name in ("rows", "current", "hash", "current_hash")}


def name_of(key: Column) -> Column:
    return F.format_string("customer %d", key)


def city_of(key: Column) -> Column:
    return F.element_at(F.array(*map(F.lit, CITIES)), (key % len(CITIES) + 1).cast("int"))


def initial_events(spark: SparkSession, keys: int) -> DataFrame:
    """One insert event per key, sequence 1, as bronze holds them."""
    key = F.col("id")
    return spark.range(keys).select(
        F.lit("initial").alias("_source_file"),
        key.alias("_source_line"),
        key.alias("customer_id"),
        F.lit(1).cast("bigint").alias("seq"),
        F.lit("I").alias("op"),
        name_of(key).alias("name"),
        city_of(key).alias("city"),
        F.element_at(F.array(*map(F.lit, TIERS)), F.pmod(F.xxhash64(key), F.lit(3)).cast("int") + 1).alias(
            "tier"
        ),
        F.lit(FIRST_INGEST).alias("_ingested_at"),
    )


def batch_events(
    spark: SparkSession, rng: random.Random, keys: int, deleted: set[int], batch: int
) -> DataFrame:
    """Batch `batch`'s events: 1% of the live keys, each once; 2% of them deleted, the others' tier updated
    (to a value no earlier version had). Sequence `batch + 1`, ingested a minute after the previous batch."""
    changing = max(int(keys * CHANGED_SHARE), 1)
    chosen: list[int] = []
    while len(chosen) < changing:
        chosen += [k for k in rng.sample(range(keys), changing - len(chosen)) if k not in deleted]
        chosen = list(dict.fromkeys(chosen))
    deletes = set(rng.sample(chosen, max(int(changing * DELETE_SHARE), 1)))
    deleted |= deletes
    ops = ["D" if k in deletes else "U" for k in chosen]
    picked = spark.createDataFrame(pa.table({"customer_id": pa.array(chosen, pa.int64()), "op": ops}))
    key, delete = F.col("customer_id"), F.col("op") == "D"
    return picked.select(
        F.lit(f"batch{batch}").alias("_source_file"),
        F.monotonically_increasing_id().alias("_source_line"),
        key,
        F.lit(batch + 1).cast("bigint").alias("seq"),
        "op",
        F.when(~delete, name_of(key)).alias("name"),
        F.when(~delete, city_of(key)).alias("city"),
        F.when(~delete, F.lit(f"tier-{batch}")).alias("tier"),
        F.lit(FIRST_INGEST + timedelta(minutes=batch)).alias("_ingested_at"),
    )


class Profile:
    """Where Medallion's time goes: seconds of each Spark action and SQL statement the engine makes, by the
    engine's line that made it (DataFrame and session methods wrapped; each action's jobs carry that line as
    their description, so Spark's REST API gives their job time too), and of some engine methods, inclusive.
    The rest of a stage's time is driver work between actions: planning, metadata reads, the ledger."""

    METHODS = {
        # The engine's functions where they are looked up when called: the plan in the runner, the merge's
        # steps in its strategy, the rules' judgement in the replacement the merge makes.
        stage_runner: ["plan_stage"],
        merge: ["build", "merge_increment", "replace_keys"],
        replace: ["judge_merge"],
        LakeTables: ["stage_replacing", "publish", "total_rows", "current_snapshot"],
    }
    ACTIONS = {
        ClassicDataFrame: ["count", "collect", "isEmpty", "first", "take", "toArrow"],
        DataFrameWriterV2: ["append", "overwrite"],
        SparkSession: ["sql", "table"],
        Catalog: ["tableExists", "dropTempView"],
    }

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self.methods: dict[str, float] = defaultdict(float)
        self.actions: dict[str, list[float]] = defaultdict(list)
        self.active = self.inside = False
        self.url = spark.sparkContext.uiWebUrl
        for owner, names in self.METHODS.items():
            for name in names:
                label = f"{owner.__name__.rsplit('.', 1)[-1]}.{name}"
                setattr(owner, name, self._method(label, getattr(owner, name)))
        for cls, names in self.ACTIONS.items():
            for name in names:
                setattr(cls, name, self._action(name, getattr(cls, name)))

    def _method(self, label: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                if self.active:
                    self.methods[label] += time.perf_counter() - start

        return timed

    def _action(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.active or self.inside:
                return method(*args, **kwargs)
            label = f"{_engine_line()} {name}"
            self.inside = True
            self.spark.sparkContext.setJobDescription(label)
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.actions[label].append(time.perf_counter() - start)
                self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
                self.inside = False

        return timed

    def jobs(self) -> list[dict[str, Any]]:
        app = self.spark.sparkContext.applicationId
        with urllib.request.urlopen(f"{self.url}/api/v1/applications/{app}/jobs") as response:
            return list(json.load(response))

    @contextmanager
    def batch(self, label: str) -> Iterator[None]:
        seen = {job["jobId"] for job in self.jobs()}
        self.methods.clear()
        self.actions.clear()
        self.active = True
        start = time.perf_counter()
        try:
            yield
        finally:
            self.active = False
        wall = time.perf_counter() - start
        job_seconds: dict[str, float] = defaultdict(float)
        job_count: dict[str, int] = defaultdict(int)
        for job in self.jobs():
            if job["jobId"] in seen:
                continue
            started, ended = (_moment(job.get(k)) for k in ("submissionTime", "completionTime"))
            key = job.get("description") or job["name"]
            job_seconds[key] += (ended - started).total_seconds() if started and ended else 0.0
            job_count[key] += 1
        print(f"    profile of Medallion's {label} ({wall:.2f} s):")
        for method, spent in sorted(self.methods.items(), key=lambda item: -item[1]):
            print(f"      {spent:7.2f} s  {method}")
        print("      actions, by the engine's line that made them (wall s; Spark jobs' s):")
        for name, seconds in sorted(self.actions.items(), key=lambda item: -sum(item[1])):
            calls = f" x{len(seconds)}" if len(seconds) > 1 else ""
            jobs = f"{job_seconds.get(name, 0.0):6.2f} s in {job_count.get(name, 0)} job(s)"
            print(f"      {sum(seconds):7.2f} s  {jobs}  {name}{calls}")
        acted = sum(sum(seconds) for seconds in self.actions.values())
        print(f"      {wall - acted:7.2f} s  outside these actions (driver: planning, metadata, ledger)")


def _engine_line() -> str:
    """The innermost frame of Medallion's engine in the current stack: file:line function."""
    for frame in reversed(traceback.extract_stack()):
        if "/medallion_assets/" in frame.filename:
            return f"{frame.filename.split('/medallion_assets/')[1]}:{frame.lineno} {frame.name}"
    return "(outside the engine)"


def _moment(text: str | None) -> datetime | None:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%Z") if text else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--profile", action="store_true", help="print where Medallion's time goes")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    conf = {"spark.driver.memory": args.driver_memory}
    if args.profile:
        conf["spark.ui.enabled"] = "true"
    with tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch:
        spark = spark_session(conf, "medallion-bench")
        profile = Profile(spark) if args.profile else None
        print(f"Spark {spark.version}; {args.keys:,} keys, {args.batches} batches of 1%, seed {args.seed}")
        dimension = Dimension(spark, Path(scratch))

        start = time.perf_counter()
        initial = initial_events(spark, args.keys)
        dimension.append(initial, 0)
        appended = time.perf_counter() - start
        seconds, outcome = dimension.medallion()
        assert outcome.details["mode"] == "full", outcome.details
        start = time.perf_counter()
        dimension.create_handwritten(initial)
        loaded = time.perf_counter() - start
        figures = dimension.compare("first build")
        print(
            f"first build (untimed for the goal): bronze {appended:.1f} s; Medallion's full build "
            f"{seconds:.1f} s; the hand-written table's load {loaded:.1f} s; equal: {figures['rows']:,} rows"
        )

        deleted: set[int] = set()
        results = []
        header = f"{'batch':>5} {'events':>8} {'Medallion (s)':>14} {'MERGE (s)':>10} {'ratio':>6}"
        print(f"\n{header}  equal after")
        for batch in range(1, args.batches + 1):
            events = batch_events(spark, rng, args.keys, deleted, batch)
            before, after = dimension.append(events, batch)
            assert before is not None
            sides: dict[str, float] = {}
            for side in ("medallion", "merge") if batch % 2 else ("merge", "medallion"):
                if side == "merge":
                    sides[side] = dimension.merge(before, after)
                    continue
                with profile.batch(f"batch {batch}") if profile else _nothing():
                    sides[side], outcome = dimension.medallion()
                if outcome.details.get("mode") != "incremental":
                    raise AssertionError(f"batch {batch}: not incremental: {outcome.details}")
            figures = dimension.compare(f"batch {batch}")
            ratio = sides["medallion"] / sides["merge"]
            results.append((batch, sides["medallion"], sides["merge"], ratio))
            print(
                f"{batch:>5} {outcome.rows_read:>8,} {sides['medallion']:>14.2f} {sides['merge']:>10.2f} "
                f"{ratio:>6.2f}  {figures['rows']:,} rows, {figures['current']:,} current"
            )
        median = statistics.median(r[3] for r in results)
        print(f"\nmedian ratio Medallion / hand-written MERGE: {median:.2f} (goal <= 1.3)")
        spark.stop()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


if __name__ == "__main__":
    main()
