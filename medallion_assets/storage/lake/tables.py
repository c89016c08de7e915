"""The lake's tables as the engine uses them: it asks for a frame and hands one over; this module decides how
that becomes an Iceberg commit.

- `append` adds one snapshot (bronze: one per ingested batch), tagged with the batch id in the snapshot's
  summary, so a crash between the commit and the ledger's record can be told from a batch never committed.
- `stage` writes a whole new version of a table to a branch named after the run (write-audit-publish): readers
  of `main` see nothing of it. The caller audits the branch (`read(..., branch=…)`), then `publish`es it, a
  fast-forward of `main`, or leaves it for inspection; a staged branch expires with its retention.
- `rollback` and `read(..., snapshot_id=…)` use the table's history.

Each write is Iceberg's optimistic commit: a table changed meanwhile by another writer refuses a publish
that would lose that writer's change (`LakeCommitConflict`, which a retry policy answers), never a silent
overwrite.
Everything goes through Spark SQL and the DataFrame API that Spark Connect supports.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from pyspark.errors import AnalysisException, IllegalArgumentException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from medallion_assets.catalog.models import LakeTable
from medallion_assets.errors import LakeCommitConflict, LakeSchemaDrift
from medallion_assets.storage.lake.catalogs import LakeCatalog, configured_catalogs, lake_catalog
from medallion_assets.storage.lake.layout import (
    TableRef,
    partition_clause,
    properties_clause,
    sort_clause,
)

BATCH_PROPERTY = "medallion.batch-id"
RUN_PROPERTY = "medallion.run-id"
# How long a branch a run staged and did not publish (its checks failed) is kept for inspection.
STAGED_BRANCH_RETENTION_DAYS = 7
# Properties every lake table has: a table's version is written whole (copy-on-write) unless the catalog says
# otherwise, and a full recompute may add columns.
_DEFAULT_PROPERTIES = {"format-version": "2", "write.spark.accept-any-schema": "true"}


@dataclass(frozen=True)
class Snapshot:
    table: str
    snapshot_id: int


def branch_name(run_id: str) -> str:
    """The branch a run stages its write in: `run_` and the run id's letters and digits."""
    return "run_" + re.sub(r"[^A-Za-z0-9]", "", run_id)[:48]


@dataclass
class LakeTables:
    """Reads and writes of the lake's tables through one Spark session.

    The lake's catalogs are registered on the session when first used, so one session can serve lakes of
    different roots (a test suite, a benchmark): a catalog whose name the session already gives to another
    catalog is registered under a name of its own. Methods take a table by its name in the lake
    (`lake.silver.orders`) and address it by the session's name for its catalog."""

    spark: SparkSession
    lake_root: str
    _aliases: dict[str, str] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._aliases = {
            name: _registered(self.spark, catalog)
            for name, catalog in configured_catalogs(self.lake_root).items()
        }

    def bound(self, table: TableRef) -> TableRef:
        """`table` as this session names it."""
        if table.catalog not in self._aliases:
            lake_catalog(table.catalog, self.lake_root)  # raises, naming the setting to make
        return TableRef(self._aliases[table.catalog], table.namespace, table.name)

    def exists(self, table: TableRef) -> bool:
        bound = self.bound(table)
        return bool(self.spark.catalog.tableExists(f"{bound.catalog}.{bound.namespace}.{bound.name}"))

    def read(
        self, table: TableRef, *, branch: str | None = None, snapshot_id: int | None = None
    ) -> DataFrame:
        """The table's rows: `main`, a branch, or the version a snapshot holds (time travel)."""
        bound = self.bound(table)
        if snapshot_id is not None:
            return self.spark.sql(f"SELECT * FROM {bound.sql} VERSION AS OF {int(snapshot_id)}")
        return self.spark.table(bound.branch(branch) if branch else bound.sql)

    def read_columns(
        self,
        table: TableRef,
        schema: StructType,
        *,
        snapshot_id: int | None = None,
        appended_after: int | None = None,
    ) -> DataFrame:
        """The table's rows with exactly the columns of `schema`, in its order; a column the table lacks (an
        analyst dropped it) is schema drift, named, not a Spark stack trace. With `appended_after`, only the
        rows appended after that snapshot up to `snapshot_id` (see `appended_between`)."""
        frame = (
            self.read(table, snapshot_id=snapshot_id)
            if appended_after is None
            else self.read_appended(table, appended_after, snapshot_id)
        )
        missing = [column.name for column in schema.fields if column.name not in frame.columns]
        if missing:
            raise LakeSchemaDrift(
                f"lake table {table} lacks column(s) {', '.join(missing)} that the catalog declares: it was "
                "changed outside Medallion; add them back (ALTER TABLE … ADD COLUMNS) or rebuild the table"
            )
        return frame.select(*[F.col(f"`{column.name}`").cast(column.dataType) for column in schema.fields])

    def appended_between(self, table: TableRef, start: int, end: int | None) -> str | None:
        """Why the rows added after snapshot `start` up to `end` cannot be read as appends alone, or None when
        they can: `start` must still be in the table's history, an ancestor of `end`, and every snapshot
        after it an append (a rewrite, a delete or a rollback makes the history not append-only)."""
        if end is None:
            return "the table has no current snapshot"
        if start == end:
            return None
        rows = self.spark.table(f"{self.bound(table).sql}.`snapshots`").select(
            "snapshot_id", "parent_id", "operation"
        )
        snapshots = {int(r.snapshot_id): (r.parent_id, r.operation) for r in rows.collect()}
        if start not in snapshots:
            return f"snapshot {start} last read is no longer in the table's history (expired)"
        current: int | None = end
        while current is not None and current != start:
            if current not in snapshots:
                return f"the history between snapshots {start} and {end} is expired"
            parent, operation = snapshots[current]
            if operation != "append":
                return f"snapshot {current} is a {operation}, not an append"
            current = None if parent is None else int(parent)
        if current is None:
            return f"snapshot {start} last read is not an ancestor of the current one (a rollback)"
        return None

    def read_appended(self, table: TableRef, start: int, end: int | None) -> DataFrame:
        """The rows appended after snapshot `start` up to `end` (Iceberg's incremental read), which
        `appended_between` said are appends only."""
        if end is None or start == end:
            return self.read(table, snapshot_id=start).limit(0)
        return (
            self.spark.read.format("iceberg")
            .option("start-snapshot-id", str(int(start)))
            .option("end-snapshot-id", str(int(end)))
            .load(self.bound(table).sql.replace("`", ""))
        )

    def ensure(self, table: TableRef, schema: StructType, layout: LakeTable | None) -> None:
        """Create the table (and its namespace) when it does not exist, laid out as the catalog says; add the
        columns of `schema` it lacks. Concurrent creators are safe: IF NOT EXISTS."""
        layout, bound = layout or LakeTable(), self.bound(table)
        if not self.exists(table):
            self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{bound.catalog}`.`{bound.namespace}`")
            properties = properties_clause({**_DEFAULT_PROPERTIES, **layout.properties})
            self.spark.sql(
                f"CREATE TABLE IF NOT EXISTS {bound.sql} ({_column_list(schema)}) USING iceberg"
                f"{partition_clause(layout)} TBLPROPERTIES ({properties})"
            )
            order = sort_clause(layout)
            if order:
                self.spark.sql(f"ALTER TABLE {bound.sql} {order}")
            return
        present = set(self.spark.table(bound.sql).columns)
        added = StructType([column for column in schema.fields if column.name not in present])
        if added.fields:
            self.spark.sql(f"ALTER TABLE {bound.sql} ADD COLUMNS ({_column_list(added)})")

    def append(self, table: TableRef, frame: DataFrame, batch_id: str) -> None:
        """Append `frame` as one snapshot, tagged with `batch_id`."""
        writer = frame.writeTo(self.bound(table).sql)
        writer.option(f"snapshot-property.{BATCH_PROPERTY}", batch_id).append()

    def batch_snapshots(self, table: TableRef, batch_ids: list[str]) -> dict[str, int]:
        """Which of `batch_ids` the table holds a snapshot of: batch id → snapshot id."""
        if not batch_ids or not self.exists(table):
            return {}
        rows = (
            self.spark.table(f"{self.bound(table).sql}.`snapshots`")
            .select(F.col("summary").getItem(BATCH_PROPERTY).alias("batch"), "snapshot_id")
            .where(F.col("batch").isin(batch_ids))
            .collect()
        )
        return {row.batch: int(row.snapshot_id) for row in rows}

    def stage(self, table: TableRef, frame: DataFrame, run_id: str) -> str:
        """Write `frame` as the table's whole new content on the run's branch; returns the branch."""
        branch, bound = branch_name(run_id), self.bound(table)
        self.spark.sql(
            f"ALTER TABLE {bound.sql} CREATE OR REPLACE BRANCH `{branch}` "
            f"RETAIN {STAGED_BRANCH_RETENTION_DAYS} DAYS"
        )
        (
            frame.writeTo(bound.branch(branch))
            .option(f"snapshot-property.{RUN_PROPERTY}", run_id)
            .option("mergeSchema", "true")
            .overwrite(F.lit(True))
        )
        return branch

    def stage_replacing(
        self, table: TableRef, keys: DataFrame, rows: DataFrame, key_columns: list[str], run_id: str
    ) -> str:
        """On the run's branch, replace the rows of the keys in `keys` by `rows` (a merge on the keys,
        compared column by column, nulls equal): the table's other rows are untouched. Returns the branch.

        Written as a delete of the keys' rows and an append of their new rows, both on the branch, which
        `publish` makes one change of `main`. Not `MERGE INTO`: Iceberg 1.11 on Spark 4.1 cannot resolve a
        merge's columns in a table that accepts any schema, as lake tables do (recomputes may add columns).
        `rows` must not read this table's current version lazily: read it at a snapshot."""
        branch, bound = branch_name(run_id), self.bound(table)
        self.spark.sql(
            f"ALTER TABLE {bound.sql} CREATE OR REPLACE BRANCH `{branch}` "
            f"RETAIN {STAGED_BRANCH_RETENTION_DAYS} DAYS"
        )
        view = "medallion_replaced_keys_" + branch
        keys.select(*[F.col(f"`{k}`") for k in key_columns]).createOrReplaceTempView(view)
        on = " AND ".join(f"t.`{k}` <=> k.`{k}`" for k in key_columns)
        self.spark.sql(
            f"DELETE FROM {bound.branch(branch)} t WHERE EXISTS (SELECT 1 FROM `{view}` k WHERE {on})"
        )
        self.spark.catalog.dropTempView(view)
        (
            rows.writeTo(bound.branch(branch))
            .option(f"snapshot-property.{RUN_PROPERTY}", run_id)
            .option("mergeSchema", "true")
            .append()
        )
        return branch

    def publish(self, table: TableRef, branch: str) -> int:
        """Fast-forward `main` to the staged branch and drop the branch; returns the snapshot now current.

        Refused (LakeCommitConflict) when `main` moved since the branch was made: another run published in
        between, and fast-forwarding would lose its version."""
        bound = self.bound(table)
        try:
            result = self.spark.sql(
                f"CALL `{bound.catalog}`.system.fast_forward('{bound.in_catalog}', 'main', '{branch}')"
            ).collect()
        except (IllegalArgumentException, AnalysisException) as error:
            if "not an ancestor" not in str(error):
                raise
            raise LakeCommitConflict(
                f"lake table {table}: another run published a new version while this run staged its own on "
                f"branch {branch}; run it again to build on that version"
            ) from None
        self.spark.sql(f"ALTER TABLE {bound.sql} DROP BRANCH IF EXISTS `{branch}`")
        return int(result[0].updated_ref)

    def total_rows(self, table: TableRef, snapshot_id: int) -> int | None:
        """The rows the table holds at `snapshot_id`, from the snapshot's summary (metadata only)."""
        rows = (
            self.spark.table(f"{self.bound(table).sql}.`snapshots`")
            .where(F.col("snapshot_id") == F.lit(int(snapshot_id)))
            .select(F.col("summary").getItem("total-records").alias("rows"))
            .collect()
        )
        return int(rows[0].rows) if rows and rows[0].rows is not None else None

    def current_snapshot(self, table: TableRef) -> int | None:
        if not self.exists(table):
            return None
        refs = self.spark.table(f"{self.bound(table).sql}.`refs`")
        rows = refs.where("name = 'main'").select("snapshot_id").collect()
        return int(rows[0].snapshot_id) if rows else None

    def rollback(self, table: TableRef, snapshot_id: int) -> None:
        """Make `snapshot_id` the table's current version: an ancestor (rollback) or any snapshot it has."""
        bound = self.bound(table)
        self.spark.sql(
            f"CALL `{bound.catalog}`.system.set_current_snapshot("
            f"table => '{bound.in_catalog}', snapshot_id => {int(snapshot_id)})"
        ).collect()

    def append_quarantine(self, table: TableRef, frame: DataFrame) -> None:
        """The rejects of a run that processed only new rows join the dataset's quarantine, one commit."""
        self.ensure(table, frame.schema, None)
        frame.writeTo(self.bound(table).sql).option("mergeSchema", "true").append()

    def replace_quarantine(self, table: TableRef, frame: DataFrame) -> None:
        """The quarantine of a recomputed dataset: its rows are this run's rejects, one commit."""
        self.ensure(table, frame.schema, None)
        frame.writeTo(self.bound(table).sql).option("mergeSchema", "true").overwrite(F.lit(True))


def _registered(spark: SparkSession, catalog: LakeCatalog) -> str:
    """The name under which the session reaches `catalog`, registering it first when needed: its own name,
    unless the session gives that name to another catalog (then a name derived from its settings)."""
    wanted = catalog.spark_conf()
    prefix = f"spark.sql.catalog.{catalog.name}"
    present = spark.conf.get(prefix, None)
    if present is not None and all(spark.conf.get(key, None) == value for key, value in wanted.items()):
        return catalog.name
    alias = catalog.name
    if present is not None:
        digest = hashlib.sha256(repr(sorted(wanted.items())).encode()).hexdigest()[:12]
        alias = f"{catalog.name}_{digest}"
    for key, value in wanted.items():
        spark.conf.set("spark.sql.catalog." + alias + key.removeprefix(prefix), value)
    return alias


def _column_list(schema: StructType) -> str:
    return ", ".join(
        f"`{field.name.replace('`', '``')}` {field.dataType.simpleString()}" for field in schema.fields
    )
