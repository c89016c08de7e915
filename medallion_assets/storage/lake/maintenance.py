"""Keeping lake tables in shape through Iceberg's Spark procedures, off the pipelines' path:

- `compact`: `rewrite_data_files`, binpack (small files into files of the target size) or sort (rewritten in
  the table's sort order);
- `expire`: `expire_snapshots` older than a moment, keeping at least the last N (a branch a run staged keeps
  its own retention);
- `drop_branch`: a branch dropped with the snapshots only it held, their files deleted (`expire_snapshots` of
  those snapshots alone);
- `remove_orphans`: `remove_orphan_files` older than a moment (files no snapshot references: left by a crashed
  write; never younger than a day, since a running write's files are not referenced yet).

Each returns what the procedure reported, as plain numbers, for the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.errors import AnalysisException, IllegalArgumentException
from pyspark.sql import Row, SparkSession

from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.metadata import branch_only_snapshots
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables


class LakeMaintenanceError(RuntimeError):
    """A maintenance procedure the table refuses: names the table and the procedure."""


def _report(row: Row | None) -> dict[str, int]:
    return {key: int(value) for key, value in (row.asDict() if row else {}).items() if value is not None}


def _timestamp(moment: datetime) -> str:
    return f"TIMESTAMP '{moment.strftime('%Y-%m-%d %H:%M:%S.%f')}'"


@dataclass
class LakeMaintenance:
    """Iceberg's maintenance procedures on the lake's tables through one Spark session."""

    spark: SparkSession
    lake: Lake

    def _tables(self) -> LakeTables:
        """The lake's tables, its catalogs (re)registered on the session: it may have served another lake
        since."""
        return LakeTables(self.spark, self.lake)

    def exists(self, table: TableRef) -> bool:
        return self._tables().exists(table)

    def _call(self, table: TableRef, procedure: str, arguments: str) -> list[Row]:
        self._tables()
        try:
            return self.spark.sql(
                f"CALL `{table.catalog}`.system.{procedure}(table => '{table.in_catalog}'{arguments})"
            ).collect()
        except (AnalysisException, IllegalArgumentException) as error:
            raise LakeMaintenanceError(f"lake table {table}: {procedure} refused: {error}") from None

    def compact(
        self, table: TableRef, strategy: str = "binpack", target_file_size_bytes: int | None = None
    ) -> dict[str, int]:
        """Rewrite small files (binpack), or rewrite in the table's sort order (sort). Reports files rewritten
        and added, and bytes rewritten."""
        if strategy not in ("binpack", "sort"):
            raise ValueError(f"compaction strategy {strategy!r}: binpack or sort")
        # Any two small files are worth one: Iceberg's default waits for five.
        options = {"min-input-files": "2"}
        if target_file_size_bytes:
            options["target-file-size-bytes"] = str(int(target_file_size_bytes))
        pairs = ", ".join(f"'{key}', '{value}'" for key, value in options.items())
        rows = self._call(table, "rewrite_data_files", f", strategy => '{strategy}', options => map({pairs})")
        return _report(rows[0] if rows else None)

    def expire(self, table: TableRef, older_than: datetime, retain_last: int) -> dict[str, int]:
        """Expire snapshots older than `older_than` (UTC), keeping at least the last `retain_last`; reports
        the files deleted of each kind."""
        rows = self._call(
            table,
            "expire_snapshots",
            f", older_than => {_timestamp(older_than)}, retain_last => {int(retain_last)}",
        )
        return _report(rows[0] if rows else None)

    def drop_branch(self, table: TableRef, branch: str) -> dict[str, int]:
        """Drop `branch` and expire the snapshots no other branch or tag holds, deleting the files only they
        reference; reports the files deleted of each kind. Expiry older than the epoch, so that no other
        snapshot of the table's history goes with them."""
        only = branch_only_snapshots(self.lake, table, branch)
        self._tables().drop_branch(table, branch)
        if not only:
            return {}
        ids = ", ".join(str(int(s)) for s in only)
        epoch = datetime(1970, 1, 2, tzinfo=UTC)
        rows = self._call(
            table, "expire_snapshots", f", older_than => {_timestamp(epoch)}, snapshot_ids => array({ids})"
        )
        return _report(rows[0] if rows else None)

    def remove_orphans(self, table: TableRef, older_than: datetime) -> dict[str, int]:
        """Delete files under the table's location no snapshot references, older than `older_than` (UTC)."""
        rows = self._call(table, "remove_orphan_files", f", older_than => {_timestamp(older_than)}")
        return {"orphan_files_removed": len(rows)}

    def data_files(self, table: TableRef) -> int:
        """How many data files the table's current version has."""
        self._tables()
        return int(self.spark.table(f"{table.sql}.`files`").count())

    def snapshot_count(self, table: TableRef) -> int:
        self._tables()
        return int(self.spark.table(f"{table.sql}.`snapshots`").count())
