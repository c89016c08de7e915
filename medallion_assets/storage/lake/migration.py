"""Turning a parquet folder of the old lake layout into an Iceberg table in place: the table is created with
the files' schema and the files are added to it as they are (Iceberg's `add_files` procedure), nothing
copied or rewritten. A folder of Hive-style subfolders (bronze's `medallion_batch=<id>`) becomes one snapshot
per subfolder, oldest first, as bronze now appends one snapshot per batch.

The rows are counted before and after; a mismatch undoes the migration (the table made for it is dropped,
never purged, so the parquet files stay) and says both counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from posixpath import dirname

from pyspark.sql import SparkSession

from medallion_assets.catalog.models import LakeTable
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.errors import SourceNotFound
from medallion_assets.naming import check_identifier
from medallion_assets.storage.lake.layout import TableRef, partition_fields, table_of
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables
from medallion_assets.storage.objects import list_objects


class MigrationMismatch(RuntimeError):
    """The table's rows after adding the files differ from the folder's: nothing was kept."""


@dataclass(frozen=True)
class Migrated:
    table: str
    folder: str
    rows_before: int
    rows_after: int
    files: int
    snapshots: int
    status: str  # migrated | already


def parquet_files(folder: str) -> list[str] | None:
    """The parquet files under `folder` (its partition subfolders included, hidden `_…`/`.…` files such as
    `_SUCCESS` left out), sorted; None when there is no such folder or it holds no parquet file."""
    try:
        objects = list_objects(folder)
    except SourceNotFound:
        return None
    base = folder.rstrip("/")

    def hidden(url: str) -> bool:
        inside = url[len(base) :] if url.startswith(base) else url.rsplit("/", 1)[-1]
        return any(part.startswith(("_", ".")) for part in inside.split("/"))

    files = [info.url for info in objects if info.url.endswith(".parquet") and not hidden(info.url)]
    return files or None


def migrate_folder(
    spark: SparkSession, lake: Lake, table: TableRef, folder: str, layout: LakeTable | None = None
) -> Migrated | None:
    """Make `table` of the parquet files under `folder`; None when there is no such folder. A table that
    already has a version is left alone (`already`): the migration may be run again."""
    files = parquet_files(folder)
    if files is None:
        return None
    tables = LakeTables(spark, lake)
    if tables.exists(table) and tables.current_snapshot(table) is not None:
        rows = int(tables.read(table).count())
        return Migrated(str(table), folder, rows, rows, 0, 0, "already")
    # Read as files, not as a folder: partition folders' names (medallion_batch=…) are no table columns.
    frame = spark.read.option("mergeSchema", "true").parquet(*files)
    rows_before, schema = int(frame.count()), frame.schema
    created = not tables.exists(table)
    # The old files are not partitioned, and add_files refuses them in a partitioned table: they are added
    # under an unpartitioned spec, which then evolves to the catalog's (Iceberg's partition evolution: old
    # files keep their spec, new writes follow the new one).
    unpartitioned = (layout or LakeTable()).model_copy(update={"partition_by": []})
    tables.ensure(table, schema, unpartitioned)
    folders = sorted({dirname(path) for path in files})
    try:
        for part in folders:
            spark.sql(
                f"CALL `{table.catalog}`.system.add_files(table => '{table.in_catalog}', "
                f"source_table => '`parquet`.`{_quoted(part)}`')"
            ).collect()
        rows_after = int(tables.read(table).count())
        if rows_after != rows_before:
            raise MigrationMismatch(
                f"{folder} → lake table {table}: {rows_before} row(s) in the parquet files, {rows_after} in "
                "the table after adding them; the table was not kept"
            )
        for partition_field in partition_fields(layout or LakeTable()):
            spark.sql(f"ALTER TABLE {table.sql} ADD PARTITION FIELD {partition_field}")
    except BaseException:
        if created:
            spark.sql(f"DROP TABLE IF EXISTS {table.sql}")  # never PURGE: the files are the user's data
        raise
    return Migrated(str(table), folder, rows_before, rows_after, len(files), len(folders), "migrated")


def migrate_lake(spark: SparkSession, lake: Lake, snapshot: CatalogSnapshot) -> list[Migrated]:
    """Every target's old folder (`<lake>/<layer>/<target_id>`) and quarantine folder
    (`<lake>/_quarantine/<target_id>`) made its Iceberg table, bronze first. Stops at the first mismatch
    (MigrationMismatch); the tables migrated before it were each checked and stay."""
    order = {"bronze": 0, "silver": 1, "gold": 2}
    done = []
    for target in sorted(snapshot.targets.values(), key=lambda t: (order.get(t.layer, 3), t.target_id)):
        table = table_of(target)
        folders = (
            (table, _old_folder(lake, target.layer, target.target_id), target.lake_table),
            (table.quarantine(), _old_folder(lake, "_quarantine", target.target_id), None),
        )
        for destination, folder, layout in folders:
            migrated = migrate_folder(spark, lake, destination, folder, layout)
            if migrated is not None:
                done.append(migrated)
    return done


def _old_folder(lake: Lake, parent: str, target_id: str) -> str:
    """Where the old layout kept a target's parquet: `<lake>/<layer>/<target_id>`, its rejects
    `<lake>/_quarantine/<target_id>`."""
    return lake.path(parent, check_identifier(target_id, "target"))


def _quoted(path: str) -> str:
    """A path inside '`…`' of a procedure argument."""
    if "`" in path or "'" in path:
        raise ValueError(f"{path}: a lake path with a quote or backquote cannot be migrated")
    return path
