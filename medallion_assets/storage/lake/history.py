"""A lake table's history without a JVM: which snapshots it has, which came before which, what each was
built from (`medallion lake history`), and moving its `main` back to one of them (rollback), through pyiceberg
against the same catalog Spark writes to.

Rollback is a metadata commit only: no data file is written or removed, so it is as cheap from the Dagster
process or the command line as from a Spark job, and the version rolled away from stays in the history
(until expiry) to roll forward to again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from medallion_assets.errors import LakeCommitConflict
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.metadata import BATCH_PROPERTY, RUN_PROPERTY, load_table
from medallion_assets.storage.lake.root import Lake

# pyiceberg and pyarrow are imported by the functions that read a table: the catalog's checks import this
# module through the healing actions, and `medallion plan` reads no history (see catalogs.py).
if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

MAIN = "main"


class LakeHistoryError(RuntimeError):
    """A table or snapshot that is not there: names which."""


def _load(lake: Lake, table: TableRef) -> Table:
    loaded = load_table(lake, table)
    if loaded is None:
        raise LakeHistoryError(f"lake table {table} does not exist (yet)")
    return loaded


def snapshots(lake: Lake, table: TableRef) -> set[int]:
    """Every snapshot the table still has (on any branch; expired ones are gone)."""
    return {snapshot.snapshot_id for snapshot in _load(lake, table).metadata.snapshots}


def lineage(lake: Lake, table: TableRef, snapshot_id: int) -> list[int]:
    """`snapshot_id` and the snapshots it was built on (its ancestors), newest first."""
    from pyiceberg.table.snapshots import ancestors_of

    loaded = _load(lake, table)
    snapshot = loaded.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise LakeHistoryError(f"lake table {table} has no snapshot {snapshot_id}")
    return [s.snapshot_id for s in ancestors_of(snapshot, loaded.metadata)]


def rows_at(lake: Lake, table: TableRef, snapshot_id: int) -> pa.Table:
    """The rows the table holds at `snapshot_id`, read by pyiceberg (no JVM)."""
    return _load(lake, table).scan(snapshot_id=snapshot_id).to_arrow()


def set_current(lake: Lake, table: TableRef, snapshot_id: int) -> int | None:
    """Point `main` at `snapshot_id` (one commit); returns the snapshot it pointed at before.

    A concurrent commit to the table makes the catalog refuse this one (LakeCommitConflict): nothing was
    changed, and the caller may look again and retry."""
    from pyiceberg.exceptions import CommitFailedException

    loaded = _load(lake, table)
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


@dataclass(frozen=True)
class Version:
    """One snapshot of a table, as `medallion lake history` lists it."""

    snapshot_id: int
    parent_id: int | None
    committed_at: datetime
    operation: str  # Iceberg's: append, overwrite, delete, replace
    run_id: str | None  # the run that wrote it
    batch_id: str | None  # the ingested batch it appended (bronze)
    rows: int | None  # the rows the table holds at this snapshot
    built_from: dict[str, int]  # input dataset → the snapshot of it this version was built from
    refs: list[str]  # the branches and tags at this snapshot, `main` among them
    on_main: bool  # main's current version or one it was built on; False: rolled away from, or staged


@dataclass(frozen=True)
class TableHistory:
    table: str
    main: int | None  # the snapshot `main` is at
    refs: dict[str, int]  # every branch and tag → its snapshot
    versions: list[Version]  # newest first

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "main": self.main,
            "refs": self.refs,
            "versions": [{**v.__dict__, "committed_at": v.committed_at.isoformat()} for v in self.versions],
        }


def table_history(lake: Lake, table: TableRef, commits: Iterable[Mapping[str, Any]]) -> TableHistory:
    """Every snapshot the table still has, newest first, with its branches and tags. `commits` are the
    versions Medallion recorded committing (the catalog's `lake_commits` rows of the dataset): they say which
    run made a snapshot and from which snapshot of each input."""
    from pyiceberg.table.snapshots import ancestors_of

    loaded = _load(lake, table)
    metadata = loaded.metadata
    made = {int(c["snapshot_id"]): c for c in commits if c["operation"] != "rollback"}
    refs = {name: ref.snapshot_id for name, ref in sorted(metadata.refs.items())}
    current = loaded.current_snapshot()
    on_main = {s.snapshot_id for s in ancestors_of(current, metadata)} if current else set()
    versions = []
    for snapshot in sorted(metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0)):
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        commit = made.get(snapshot.snapshot_id, {})
        rows = summary.get("total-records")
        versions.append(
            Version(
                snapshot.snapshot_id,
                snapshot.parent_snapshot_id,
                datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC),
                snapshot.summary.operation.value if snapshot.summary else "",
                commit.get("run_id") or summary.get(RUN_PROPERTY),
                summary.get(BATCH_PROPERTY),
                int(rows) if rows is not None else None,
                {dataset: int(version) for dataset, version in (commit.get("inputs") or {}).items()},
                [name for name, at in refs.items() if at == snapshot.snapshot_id],
                snapshot.snapshot_id in on_main,
            )
        )
    return TableHistory(str(table), refs.get(MAIN), refs, versions[::-1])
