"""A lake table's history without a JVM: which snapshots it has, which came before which, and moving its
`main` back to one of them (rollback), through pyiceberg against the same catalog Spark writes to.

Rollback is a metadata commit only: no data file is written or removed, so it is as cheap from the Dagster
process or the command line as from a Spark job, and the version rolled away from stays in the history
(until expiry) to roll forward to again.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from medallion_assets.errors import LakeCommitConflict
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.metadata import load_table


class LakeHistoryError(RuntimeError):
    """A table or snapshot that is not there: names which."""


def _load(lake_root: str, table: TableRef) -> Table:
    loaded = load_table(lake_root, table)
    if loaded is None:
        raise LakeHistoryError(f"lake table {table} does not exist (yet)")
    return loaded


def snapshots(lake_root: str, table: TableRef) -> set[int]:
    """Every snapshot the table still has (on any branch; expired ones are gone)."""
    return {snapshot.snapshot_id for snapshot in _load(lake_root, table).metadata.snapshots}


def lineage(lake_root: str, table: TableRef, snapshot_id: int) -> list[int]:
    """`snapshot_id` and the snapshots it was built on (its ancestors), newest first."""
    loaded = _load(lake_root, table)
    snapshot = loaded.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise LakeHistoryError(f"lake table {table} has no snapshot {snapshot_id}")
    return [s.snapshot_id for s in ancestors_of(snapshot, loaded.metadata)]


def rows_at(lake_root: str, table: TableRef, snapshot_id: int) -> pa.Table:
    """The rows the table holds at `snapshot_id`, read by pyiceberg (no JVM)."""
    return _load(lake_root, table).scan(snapshot_id=snapshot_id).to_arrow()


def set_current(lake_root: str, table: TableRef, snapshot_id: int) -> int | None:
    """Point `main` at `snapshot_id` (one commit); returns the snapshot it pointed at before.

    A concurrent commit to the table makes the catalog refuse this one (LakeCommitConflict): nothing was
    changed, and the caller may look again and retry."""
    loaded = _load(lake_root, table)
    if loaded.snapshot_by_id(snapshot_id) is None:
        raise LakeHistoryError(f"lake table {table} has no snapshot {snapshot_id}")
    previous = loaded.current_snapshot()
    try:
        loaded.manage_snapshots().set_current_snapshot(snapshot_id=snapshot_id).commit()
    except CommitFailedException as error:
        raise LakeCommitConflict(
            f"lake table {table} changed while it was being set to snapshot {snapshot_id}: {error}"
        ) from None
    return previous.snapshot_id if previous else None
