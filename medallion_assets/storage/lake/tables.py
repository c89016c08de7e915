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

import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.errors import AnalysisException, IllegalArgumentException
from pyspark.sql import DataFrame, DataFrameWriterV2, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from medallion_assets.catalog.models import LakeTable
from medallion_assets.errors import LakeCommitConflict, LakeSchemaDrift
from medallion_assets.redaction import scrub
from medallion_assets.storage.lake.catalogs import LakeCatalog, LakeCatalogError
from medallion_assets.storage.lake.layout import (
    TableRef,
    partition_clause,
    properties_clause,
    sort_clause,
)
from medallion_assets.storage.lake.metadata import (
    BATCH_PROPERTY,
    RUN_PROPERTY,
    SnapshotInfo,
    batch_snapshots,
    branch_head,
    current_records,
    current_snapshot_id,
    dropped_columns,
    parent_snapshot_id,
    snapshot_rows,
    snapshot_total,
    snapshots_by_id,
)
from medallion_assets.storage.lake.root import Lake

# How long a branch a run staged and did not publish (its checks failed) is kept for inspection.
STAGED_BRANCH_RETENTION_DAYS = 7
# How the JDBC, Glue and REST clients say that their catalog's server cannot be reached.
_UNREACHABLE = re.compile(
    r"Connection refused|Failed to connect[^\n]*|UnknownHostException[^\n]*"
    r"|Unable to execute HTTP request[^\n]*|connect timed out|No route to host"
)
# The columns Iceberg's changelog view adds to a table's own.
_CHANGELOG_COLUMNS = ("_change_type", "_change_ordinal", "_commit_snapshot_id")
# What a snapshot summary says a commit changed in the files; a commit with none of them changed no row.
_FILE_CHANGES = (
    "added-data-files",
    "deleted-data-files",
    "added-delete-files",
    "removed-delete-files",
    "added-dvs",
    "removed-dvs",
)
# The operation of a snapshot that rewrites files without changing the table's rows (compaction).
_REWRITE = "replace"
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

    The lake's catalogs are registered on the session when first used (a catalog is a plain runtime
    setting), so one session can serve lakes of different roots one after another: a test suite, a benchmark.
    """

    spark: SparkSession
    lake: Lake

    def __post_init__(self) -> None:
        for catalog in self.lake.catalogs.values():
            _register(self.spark, catalog)

    def exists(self, table: TableRef) -> bool:
        """Whether the table exists: every write and read of a table asks this first, so a catalog that does
        not answer is reported here, once, naming its setting (and never with a JVM's stack trace)."""
        try:
            return bool(self.spark.catalog.tableExists(str(table)))
        except Exception as error:
            unreachable = _UNREACHABLE.search(str(error))
            if not unreachable:
                raise
            catalog = self.lake.catalog(table.catalog)
            raise LakeCatalogError(
                f"{catalog.setting}={catalog.shown}: the lake catalog does not answer "
                f"({scrub(unreachable.group(0))}); nothing was written"
            ) from None

    def read(
        self, table: TableRef, *, branch: str | None = None, snapshot_id: int | None = None
    ) -> DataFrame:
        """The table's rows: `main`, a branch, or the version a snapshot holds (time travel)."""
        if snapshot_id is not None:
            return self.spark.sql(f"SELECT * FROM {table.sql} VERSION AS OF {int(snapshot_id)}")
        return self.spark.table(table.branch(branch) if branch else table.sql)

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
            raise _drift(table, missing)
        return frame.select(*[F.col(f"`{column.name}`").cast(column.dataType) for column in schema.fields])

    def appended_between(self, table: TableRef, start: int, end: int | None) -> str | None:
        """Why the rows added after snapshot `start` up to `end` cannot be read as appends alone, or None when
        they can: `start` must still be in the table's history, an ancestor of `end`, and every snapshot
        after it an append, or a compaction, which changes no row (Iceberg's incremental read takes the files
        each append added, whatever rewrote them since; a delete, an overwrite or a rollback makes the history
        not append-only)."""

        def not_an_append(snapshot: SnapshotInfo) -> str | None:
            if snapshot.operation in ("append", _REWRITE):
                return None
            return f"snapshot {snapshot.snapshot_id} is a {snapshot.operation}, not an append"

        return self._history_between(table, start, end, not_an_append)

    def rewritten_between(self, table: TableRef, start: int, end: int | None) -> str | None:
        """Why the table's rows at `end` may differ from those at snapshot `start`, or None when they cannot:
        `start` must be an ancestor of `end`, and every snapshot after it a rewrite of files that changes no
        row (`replace`: compaction by `rewrite_data_files`, rewritten manifests or delete files). Nothing is
        read at `start`: it may have expired, as long as the snapshots after it have not (the first names it
        as its parent)."""

        def changes_rows(snapshot: SnapshotInfo) -> str | None:
            if snapshot.operation == _REWRITE:
                return None
            return f"snapshot {snapshot.snapshot_id} changed rows ({snapshot.operation})"

        return self._history_between(table, start, end, changes_rows, start_read=False)

    def changed_between(self, table: TableRef, start: int, end: int | None) -> str | None:
        """Why the rows changed after snapshot `start` up to `end` cannot be read from Iceberg's changelog
        (`changelog`), or None when they can: `start` must still be in the table's history and an ancestor of
        `end`, and no snapshot from `start` on may hold delete files (a merge-on-read table), which Iceberg's
        changelog scan does not read."""

        def holds_delete_files(snapshot: SnapshotInfo) -> str | None:
            if int(snapshot.summary.get("total-delete-files", "0")) == 0:
                return None
            return (
                f"snapshot {snapshot.snapshot_id} holds delete files, which Iceberg's changelog cannot read"
            )

        return self._history_between(table, start, end, holds_delete_files, including_start=True)

    def _history_between(
        self,
        table: TableRef,
        start: int,
        end: int | None,
        refusal: Callable[[SnapshotInfo], str | None],
        including_start: bool = False,
        start_read: bool = True,
    ) -> str | None:
        """Why the snapshots after `start` up to `end` cannot be read as a line of changes: `start` expired
        (when the caller reads from it, `start_read`) or not an ancestor of `end` (a rollback), or the first
        `refusal` of one of them (of `start` too with `including_start`); None when they can."""
        if end is None:
            return "the table has no current snapshot"
        snapshots = snapshots_by_id(self.lake, table)
        if start_read and start != end and start not in snapshots:
            return f"snapshot {start} is no longer in the table's history (expired)"
        current: int | None = end
        while current is not None and current != start:
            if current not in snapshots:
                return f"the history between snapshots {start} and {end} is expired"
            refused = refusal(snapshots[current])
            if refused:
                return refused
            current = snapshots[current].parent_id
        if current is None:
            return f"snapshot {start} is not an ancestor of the current one (a rollback)"
        return refusal(snapshots[start]) if including_start and start in snapshots else None

    def read_appended(self, table: TableRef, start: int, end: int | None) -> DataFrame:
        """The rows appended after snapshot `start` up to `end` (Iceberg's incremental read), which
        `appended_between` said are appends only."""
        if end is None or start == end:
            return self.read(table, snapshot_id=start).limit(0)
        return (
            self.spark.read.format("iceberg")
            .option("start-snapshot-id", str(int(start)))
            .option("end-snapshot-id", str(int(end)))
            .load(str(table))
        )

    def rows_appended(self, table: TableRef, start: int, end: int) -> int:
        """How many rows `read_appended(table, start, end)` reads: the records the appends after snapshot
        `start` up to `end` added, from their summaries (no data file read). `appended_between` must have
        said that those snapshots are appends (or compactions, which the read skips)."""
        snapshots = snapshots_by_id(self.lake, table)
        rows, current = 0, end
        while current != start:
            snapshot = snapshots[current]
            if snapshot.operation == "append":
                rows += int(snapshot.summary.get("added-records", "0"))
            assert snapshot.parent_id is not None, f"snapshot {start} is an ancestor of {end}"
            current = snapshot.parent_id
        return rows

    @contextmanager
    def changelog(self, table: TableRef, start: int, end: int) -> Iterator[DataFrame]:
        """The rows the table's commits after snapshot `start` up to `end` changed, both their images: each
        deleted row as it was and each inserted row as it is (Iceberg's `create_changelog_view`, which leaves
        out the rows a copy-on-write commit only carried over). `changed_between` says whether it can be read.
        The frame reads a view that is dropped on leaving: act on it inside."""
        view = "medallion_changes_" + uuid.uuid4().hex
        self.spark.sql(
            f"CALL `{table.catalog}`.system.create_changelog_view(table => '{table.in_catalog}', "
            f"options => map('start-snapshot-id', '{int(start)}', 'end-snapshot-id', '{int(end)}'), "
            f"changelog_view => '{view}')"
        )
        try:
            yield self.spark.table(view).drop(*_CHANGELOG_COLUMNS)
        finally:
            self.spark.catalog.dropTempView(view)

    def ensure(self, table: TableRef, schema: StructType, layout: LakeTable | None) -> None:
        """Create the table (and its namespace) when it does not exist, laid out as the catalog says; add the
        columns of `schema` it lacks. Concurrent creators are safe: IF NOT EXISTS."""
        layout = layout or LakeTable()
        if not self.exists(table):
            self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{table.catalog}`.`{table.namespace}`")
            properties = properties_clause({**_DEFAULT_PROPERTIES, **layout.properties})
            self.spark.sql(
                f"CREATE TABLE IF NOT EXISTS {table.sql} ({_column_list(schema)}) USING iceberg"
                f"{partition_clause(layout)} TBLPROPERTIES ({properties})"
            )
            order = sort_clause(layout)
            if order:
                self.spark.sql(f"ALTER TABLE {table.sql} {order}")
            return
        present = set(self.spark.table(table.sql).columns)
        added = StructType([column for column in schema.fields if column.name not in present])
        if not added.fields:
            return
        # A column the catalog has just gained is added; one the table had and lost was dropped by someone
        # else, and adding it back would hide its old values.
        dropped = dropped_columns(self.lake, table, added.fieldNames())
        if dropped:
            raise _drift(table, dropped)
        self.spark.sql(f"ALTER TABLE {table.sql} ADD COLUMNS ({_column_list(added)})")

    def append(self, table: TableRef, frame: DataFrame, batch_id: str) -> None:
        """Append `frame` as one snapshot, tagged with `batch_id`."""
        writer = self._in_table_order(table, frame).writeTo(table.sql)
        writer.option(f"snapshot-property.{BATCH_PROPERTY}", batch_id).append()

    def _in_table_order(self, table: TableRef, frame: DataFrame) -> DataFrame:
        """`frame`'s columns in the order the table has them (Iceberg matches a write's columns by position
        and refuses one out of order), columns the table has yet to gain last."""
        present = [c for c in self.spark.table(table.sql).columns if c in frame.columns]
        ordered = present + [c for c in frame.columns if c not in present]
        return frame if ordered == frame.columns else frame.select(*[F.col(f"`{c}`") for c in ordered])

    def batch_rows(self, table: TableRef, batch_id: str) -> DataFrame:
        """The rows one appended batch added to the table: Iceberg's incremental read of its snapshot."""
        snapshot_id = self.batch_snapshots(table, [batch_id])[batch_id]
        parent = parent_snapshot_id(self.lake, table, snapshot_id)
        if parent is None:
            return self.read(table, snapshot_id=snapshot_id)
        reader = self.spark.read.format("iceberg").option("start-snapshot-id", str(parent))
        return reader.option("end-snapshot-id", str(snapshot_id)).load(str(table))

    def batch_snapshots(self, table: TableRef, batch_ids: list[str]) -> dict[str, int]:
        """Which of `batch_ids` the table holds a snapshot of: batch id → snapshot id (from its metadata,
        without a Spark job)."""
        return batch_snapshots(self.lake, table, batch_ids, BATCH_PROPERTY)

    def stage(
        self, table: TableRef, frame: DataFrame, run_id: str, *, from_snapshot: int | None = None
    ) -> str:
        """Write `frame` as the table's whole new content on the run's branch; returns the branch. With
        `from_snapshot`, the branch starts at that snapshot instead of `main`: `publish` refuses it when
        `main` has moved since, so a content made from that snapshot never hides a version published after
        it."""
        branch = self._branch(table, run_id, from_snapshot)
        self._staged_writer(table, branch, frame, run_id).overwrite(F.lit(True))
        return branch

    def _staged_writer(
        self, table: TableRef, branch: str, frame: DataFrame, run_id: str
    ) -> DataFrameWriterV2:
        """A write of `frame` to the run's branch, tagged with the run, the table gaining `frame`'s new
        columns."""
        return (
            self._in_table_order(table, frame)
            .writeTo(table.branch(branch))
            .option(f"snapshot-property.{RUN_PROPERTY}", run_id)
            .option("mergeSchema", "true")
        )

    def _branch(self, table: TableRef, run_id: str, from_snapshot: int | None = None) -> str:
        """The run's branch of the table, made afresh at `main` (or at `from_snapshot`); returns its name."""
        branch = branch_name(run_id)
        at = f" AS OF VERSION {int(from_snapshot)}" if from_snapshot is not None else ""
        self.spark.sql(
            f"ALTER TABLE {table.sql} CREATE OR REPLACE BRANCH `{branch}`{at} "
            f"RETAIN {STAGED_BRANCH_RETENTION_DAYS} DAYS"
        )
        return branch

    def stage_replacing(
        self,
        table: TableRef,
        keys: DataFrame | None,
        rows: DataFrame,
        key_columns: list[str],
        run_id: str,
        within: str | None = None,
        partitions: bool = False,
    ) -> str:
        """On the run's branch, replace the rows of the keys in `keys` by `rows` (a merge on the keys,
        compared column by column, nulls equal): the table's other rows are untouched, and rows of keys not
        in `keys` are added. Returns the branch.
        `within`, a SQL condition every row of those keys meets, limits the files the delete reads. Without
        `keys`, every row `within` holds is replaced (a day of gold recomputed whole); with `partitions`,
        `within` selects whole partitions, overwritten by `rows` in one commit (Iceberg's overwrite by
        filter: their files dropped, no other file read or rewritten).

        Written as a delete of the keys' rows and an append of their new rows, both on the branch, which
        `publish` makes one change of `main`. Not `MERGE INTO`: Iceberg 1.11 on Spark 4.1 cannot resolve a
        merge's columns in a table that accepts any schema, as lake tables do (recomputes may add columns).
        When every data file holds a row of those keys (changes spread over the whole table), the delete
        would rewrite every file: the table's other rows and `rows` are then written as its whole new
        content instead, one write and one commit, without the delete's search for the files it rewrites.
        `rows` must not read this table's current version lazily: read it at a snapshot."""
        if keys is None:
            assert within is not None, "rows replaced without keys are those a condition holds of"
            if not partitions:
                return self._delete_and_append(table, within, rows, run_id)
            branch = self._branch(table, run_id)
            self._staged_writer(table, branch, rows, run_id).overwrite(F.expr(within))
            return branch
        if keys.isEmpty():  # no row to delete: `rows` are added, no file searched or rewritten
            return self._delete_and_append(table, None, rows, run_id)
        view = "medallion_replaced_keys_" + branch_name(run_id)
        keys.select(*[F.col(f"`{k}`") for k in key_columns]).createOrReplaceTempView(view)
        of_keys = "EXISTS (SELECT 1 FROM `{view}` k WHERE {on})".format(
            view=view, on=" AND ".join(f"t.`{k}` <=> k.`{k}`" for k in key_columns)
        )
        try:
            snapshot_id = self.current_snapshot(table)
            if (
                within is None
                and snapshot_id is not None
                and self._every_file_holds(table, snapshot_id, of_keys)
            ):
                others = self.spark.sql(
                    f"SELECT * FROM {table.sql} VERSION AS OF {snapshot_id} t WHERE NOT {of_keys}"
                )
                whole = others.unionByName(rows, allowMissingColumns=True)
                return self.stage(table, whole, run_id, from_snapshot=snapshot_id)
            return self._delete_and_append(
                table, f"({within}) AND {of_keys}" if within else of_keys, rows, run_id
            )
        finally:
            self.spark.catalog.dropTempView(view)

    def _delete_and_append(self, table: TableRef, condition: str | None, rows: DataFrame, run_id: str) -> str:
        """On the run's branch, made at `main`, delete the rows (`t`) that `condition` holds of (None:
        none), then append `rows`; returns the branch."""
        branch = self._branch(table, run_id)
        if condition is not None:
            self.spark.sql(f"DELETE FROM {table.branch(branch)} t WHERE {condition}")
            # A delete that matched no row still commits a snapshot, an `overwrite` of no file: the branch is
            # made again where it was made, so that what is published is the append alone, which a reader of
            # the table's history (gold's plan) can tell holds only new rows. Not at `main`, which another
            # writer may have moved since: publishing must still refuse that.
            head = branch_head(self.lake, table, branch)
            if (
                head is not None
                and head.parent_id is not None
                and not any(int(head.summary.get(k, "0")) for k in _FILE_CHANGES)
            ):
                self._branch(table, run_id, from_snapshot=head.parent_id)
        self._staged_writer(table, branch, rows, run_id).append()
        return branch

    def rows_staged(self, table: TableRef, branch: str, run_id: str) -> int | None:
        """How many rows the append of `stage_replacing` (its last commit on `branch`, tagged with the run)
        added, from the commit's summary; None when the branch's last commit is another (the table written
        whole, which holds its other rows too)."""
        head = branch_head(self.lake, table, branch)
        if head is None or head.operation != "append" or head.summary.get(RUN_PROPERTY) != run_id:
            return None
        return int(head.summary.get("added-records", "0"))

    def _every_file_holds(self, table: TableRef, snapshot_id: int, of_keys: str) -> bool:
        """Whether each data file of the table at `snapshot_id` holds a row that `of_keys` (a condition on
        its rows, `t`) holds of: the data files counted from the snapshot's summary, those holding such a
        row by a scan of the key columns alone."""
        files = self.data_files(table, snapshot_id)
        if not files:
            return False
        # One set of names merged, not count(DISTINCT): that takes two shuffles (each an adaptive stage, a
        # Spark job of its own) where this takes one; the set is at most the table's data files.
        holding = self.spark.sql(
            f"SELECT size(collect_set(t._file)) FROM {table.sql} VERSION AS OF {snapshot_id} t "
            f"WHERE {of_keys}"
        ).first()
        return holding is not None and holding[0] == files

    def publish(self, table: TableRef, branch: str) -> int:
        """Fast-forward `main` to the staged branch and drop the branch; returns the snapshot now current.

        Refused (LakeCommitConflict) when `main` moved since the branch was made: another run published in
        between, and fast-forwarding would lose its version."""
        snapshot_id = self.fast_forward(table, branch)
        self.drop_branch(table, branch)
        return snapshot_id

    def drop_branch(self, table: TableRef, branch: str) -> None:
        """Drop `branch`, if there, and nothing else: its snapshots stay while another ref holds them, and
        expire with the table's maintenance when none does (LakeMaintenance.drop_branch deletes them now)."""
        self.spark.sql(f"ALTER TABLE {table.sql} DROP BRANCH IF EXISTS `{branch}`")

    def fast_forward(self, table: TableRef, branch: str) -> int:
        """Fast-forward `main` to `branch`, which is kept; returns the snapshot now current. Nothing to do
        when `main` is there already; LakeCommitConflict as `publish`."""
        try:
            result = self.spark.sql(
                f"CALL `{table.catalog}`.system.fast_forward('{table.in_catalog}', 'main', '{branch}')"
            ).collect()
        except (IllegalArgumentException, AnalysisException) as error:
            if "not an ancestor" not in str(error):
                raise
            raise LakeCommitConflict(
                f"lake table {table}: another run published a new version while this run staged its own on "
                f"branch {branch}; run it again to build on that version"
            ) from None
        return int(result[0].updated_ref)

    def has_snapshot(self, table: TableRef, snapshot_id: int) -> bool:
        """Whether the table's history still holds `snapshot_id` (not expired), from its metadata."""
        return snapshot_id in snapshots_by_id(self.lake, table)

    def total_rows(self, table: TableRef, snapshot_id: int) -> int | None:
        """The rows the table holds at `snapshot_id`, from the snapshot's summary (metadata, no Spark job);
        None when the summary cannot tell (metadata.live_records)."""
        return snapshot_rows(self.lake, table, snapshot_id)

    def data_files(self, table: TableRef, snapshot_id: int) -> int | None:
        """The data files the table holds at `snapshot_id`, from the snapshot's summary."""
        return snapshot_total(self.lake, table, snapshot_id, "total-data-files")

    def holds_no_rows(self, table: TableRef) -> bool:
        """Whether the table exists and its current version holds no rows (from its metadata, read once)."""
        return current_records(self.lake, table) == 0

    def current_snapshot(self, table: TableRef) -> int | None:
        """The snapshot `main` is at (from the table's metadata, without a Spark job)."""
        return current_snapshot_id(self.lake, table)

    def stage_quarantine(self, table: TableRef, frame: DataFrame, run_id: str, *, replace: bool) -> str:
        """Write a run's rejects to the run's branch of the quarantine `table`: added to its rows, or, with
        `replace` (a dataset recomputed whole), as its whole content. Returns the branch, which the stage
        publishes with its own (`publish`), so that rejects reach `main` only with the rows they were taken
        from, and a run whose checks failed, run again, adds them once."""
        self.ensure(table, frame.schema, None)
        branch = self._branch(table, run_id)
        writer = self._staged_writer(table, branch, frame, run_id)
        if replace:
            writer.overwrite(F.lit(True))
        else:
            writer.append()
        return branch


def _register(spark: SparkSession, catalog: LakeCatalog) -> None:
    """Make `catalog` the session's catalog of its name. A session that gave the name to another lake's
    catalog forgets its catalogs first (Spark keeps a catalog it loaded until told to): the JDBC catalog
    stores tables under the catalog's name, so the name must stay the lake's own, whichever lake came
    first."""
    wanted = catalog.spark_conf()
    prefix = f"spark.sql.catalog.{catalog.name}"
    present = {
        key: value for key, value in spark.conf.getAll.items() if key.split(".", 4)[:4] == prefix.split(".")
    }
    if present == wanted:
        return
    if present:
        jvm_session = getattr(spark, "_jsparkSession", None)  # none through Spark Connect
        if jvm_session is None:
            raise LakeCatalogError(
                f"this Spark Connect session already serves another lake as catalog {catalog.name!r}; "
                "use a session per lake"
            )
        # Spark's own reset of the session's catalogs; PySpark has no call for it.
        jvm_session.sessionState().catalogManager().reset()
    # Settings of the name's previous catalog that this one lacks (a Glue endpoint, another file IO) go too.
    for key in present.keys() - wanted.keys():
        spark.conf.unset(key)
    for key, value in wanted.items():
        spark.conf.set(key, value)


def _drift(table: TableRef, missing: list[str]) -> LakeSchemaDrift:
    return LakeSchemaDrift(
        f"lake table {table} lacks column(s) {', '.join(missing)} that the catalog declares: it was "
        "changed outside Medallion; add them back (ALTER TABLE … ADD COLUMNS) or rebuild the table"
    )


def _column_list(schema: StructType) -> str:
    return ", ".join(
        f"`{field.name.replace('`', '``')}` {field.dataType.simpleString()}" for field in schema.fields
    )
