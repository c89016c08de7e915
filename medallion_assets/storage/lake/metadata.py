"""What the Dagster process and the command line know of a lake table without a JVM: its current snapshot,
location, schema and history, read through pyiceberg from the same catalog Spark writes to."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from medallion_assets.storage.lake.catalogs import LakeCatalogError
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.root import Lake

# pyiceberg is imported when a table's metadata is first read, not with this module: `medallion plan` and
# `catalog validate` import it and, on most catalogs, read none (see catalogs.py).
if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

# The totals of a snapshot's summary that say it holds delete files (merge-on-read writes).
_DELETE_TOTALS = ("total-position-deletes", "total-equality-deletes")
# What Medallion writes into the summary of each snapshot it commits: the ingested batch, the run.
BATCH_PROPERTY = "medallion.batch-id"
RUN_PROPERTY = "medallion.run-id"


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    parent_id: int | None
    committed_at: datetime
    operation: str
    summary: dict[str, str]


@dataclass(frozen=True)
class TableInfo:
    table: TableRef
    location: str
    current_snapshot_id: int | None
    columns: dict[str, str]
    branches: dict[str, int]
    history: list[SnapshotInfo]  # the snapshots main went through, oldest first

    def snapshot(self, snapshot_id: int) -> SnapshotInfo | None:
        return next((s for s in self.history if s.snapshot_id == snapshot_id), None)


def load_table(lake: Lake, table: TableRef) -> Table | None:
    """pyiceberg's table, or None when it does not exist (yet); a catalog that cannot be read is named."""
    from pyiceberg.exceptions import NoSuchTableError

    catalog = lake.catalog(table.catalog)
    try:
        return catalog.metadata().load_table((table.namespace, table.name))
    except NoSuchTableError:
        return None
    except Exception as error:  # any failure to reach the catalog: name the setting, not a driver's trace
        raise LakeCatalogError(
            f"{catalog.setting}={catalog.shown}: the lake catalog cannot be read: {error}"
        ) from None


@dataclass
class LoadedTables:
    """Tables' metadata as one piece of work reads it: each table loaded once (`load_table`), and again
    only after the caller says it committed to it (`committed`)."""

    lake: Lake
    loaded: dict[TableRef, Table | None] = field(default_factory=dict)

    def __call__(self, table: TableRef) -> Table | None:
        if table not in self.loaded:
            self.loaded[table] = load_table(self.lake, table)
        return self.loaded[table]

    def current(self, table: TableRef) -> int | None:
        """The snapshot `main` is at; None without the table or a snapshot."""
        return main_snapshot_id(self(table))

    def committed(self, table: TableRef) -> None:
        self.loaded.pop(table, None)


def current_snapshot_id(lake: Lake, table: TableRef) -> int | None:
    """The snapshot `main` of the table is at; None for a table that does not exist or holds none yet."""
    return main_snapshot_id(load_table(lake, table))


def main_snapshot_id(loaded: Table | None) -> int | None:
    """The snapshot `main` of a loaded table is at; None without the table or a snapshot."""
    current = loaded.current_snapshot() if loaded else None
    return current.snapshot_id if current else None


def parent_snapshot_id(lake: Lake, table: TableRef, snapshot_id: int) -> int | None:
    """The snapshot `snapshot_id` was committed on top of; None for a table's first."""
    loaded = load_table(lake, table)
    snapshot = loaded.snapshot_by_id(snapshot_id) if loaded else None
    return snapshot.parent_snapshot_id if snapshot else None


def batch_snapshots(lake: Lake, table: TableRef, batch_ids: list[str], key: str) -> dict[str, int]:
    """Which of `batch_ids` the table holds a snapshot of, by the snapshot summary's `key`: id → snapshot."""
    loaded = load_table(lake, table) if batch_ids else None
    if loaded is None:
        return {}
    found = {}
    for snapshot in loaded.metadata.snapshots:
        batch = snapshot.summary.additional_properties.get(key) if snapshot.summary else None
        if batch in batch_ids:
            found[batch] = snapshot.snapshot_id
    return found


def table_info(lake: Lake, table: TableRef) -> TableInfo | None:
    """The table's metadata, or None when the table does not exist (yet)."""
    loaded = load_table(lake, table)
    if loaded is None:
        return None
    metadata = loaded.metadata
    snapshots = {s.snapshot_id: s for s in metadata.snapshots}
    current = loaded.current_snapshot()
    history = []
    for entry in metadata.snapshot_log:
        snapshot = snapshots.get(entry.snapshot_id)
        if snapshot is None:  # expired
            continue
        history.append(_snapshot_info(snapshot))
    return TableInfo(
        table,
        loaded.location(),
        current.snapshot_id if current else None,
        {field.name: str(field.field_type) for field in loaded.schema().fields},
        {name: ref.snapshot_id for name, ref in metadata.refs.items() if name != "main"},
        history,
    )


def dropped_columns(lake: Lake, table: TableRef, names: list[str]) -> list[str]:
    """Which of `names`, absent from the table now, some earlier schema of it had: columns someone dropped."""
    loaded = load_table(lake, table)
    if loaded is None:
        return []
    earlier = {field.name for schema in loaded.schemas().values() for field in schema.fields}
    return [name for name in names if name in earlier]


def snapshots_by_id(lake: Lake, table: TableRef) -> dict[int, SnapshotInfo]:
    """Every snapshot the table still has, by id: its parent, its operation (append, overwrite, …) and its
    summary."""
    loaded = load_table(lake, table)
    if loaded is None:
        return {}
    return {s.snapshot_id: _snapshot_info(s) for s in loaded.metadata.snapshots}


def snapshot_total(lake: Lake, table: TableRef, snapshot_id: int, total: str) -> int | None:
    """A total the snapshot's summary keeps of the table at `snapshot_id` (`total-records`,
    `total-data-files`, …)."""
    value = snapshot_summary(lake, table, snapshot_id).get(total)
    return int(value) if value is not None else None


def snapshot_summary(lake: Lake, table: TableRef, snapshot_id: int) -> dict[str, str]:
    """The summary of the table's snapshot `snapshot_id` (empty without the table or the snapshot)."""
    loaded = load_table(lake, table)
    snapshot = loaded.snapshot_by_id(snapshot_id) if loaded else None
    return _summary(snapshot)


def snapshot_rows(lake: Lake, table: TableRef, snapshot_id: int) -> int | None:
    """The rows the table holds at `snapshot_id`, from its snapshot's summary (`live_records`)."""
    return live_records(snapshot_summary(lake, table, snapshot_id))


def live_records(summary: dict[str, str]) -> int | None:
    """The rows a snapshot's summary vouches for: its `total-records`, unless it holds delete files (a
    merge-on-read table), whose deleted rows those records still count; None when it cannot tell."""
    if any(int(summary.get(deletes, "0")) for deletes in _DELETE_TOTALS):
        return None
    records = summary.get("total-records")
    return int(records) if records is not None else None


def _summary(snapshot: Snapshot | None) -> dict[str, str]:
    summary = snapshot.summary if snapshot else None
    return {k: str(v) for k, v in summary.additional_properties.items()} if summary else {}


def branch_head(lake: Lake, table: TableRef, branch: str) -> SnapshotInfo | None:
    """The snapshot `branch` of the table is at; None without the table or the branch."""
    loaded = load_table(lake, table)
    snapshot = loaded.snapshot_by_name(branch) if loaded else None
    return _snapshot_info(snapshot) if snapshot else None


def branch_only_snapshots(lake: Lake, table: TableRef, branch: str) -> list[int]:
    """The snapshots `branch` went through that no other branch or tag holds: what dropping it leaves to
    expire. Empty without the table or the branch."""
    from pyiceberg.table.snapshots import ancestors_of

    loaded = load_table(lake, table)
    refs = loaded.refs() if loaded else {}
    if loaded is None or branch not in refs:
        return []

    def lineage(snapshot_id: int) -> list[int]:
        return [s.snapshot_id for s in ancestors_of(loaded.snapshot_by_id(snapshot_id), loaded.metadata)]

    held = {s for name, ref in refs.items() if name != branch for s in lineage(ref.snapshot_id)}
    return [s for s in lineage(refs[branch].snapshot_id) if s not in held]


def _snapshot_info(snapshot: Snapshot) -> SnapshotInfo:
    summary = snapshot.summary
    return SnapshotInfo(
        snapshot.snapshot_id,
        snapshot.parent_snapshot_id,
        datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC),
        summary.operation.value if summary else "",
        {k: str(v) for k, v in (summary.additional_properties if summary else {}).items()},
    )


def current_records(lake: Lake, table: TableRef) -> int | None:
    """How many rows main holds now, from its snapshot's summary (no data file is read, `live_records`):
    none for a table created without a snapshot yet; None for a table that does not exist, or lives in an
    embedded catalog not created yet (which reading would create)."""
    url = lake.catalog(table.catalog).url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return None
    loaded = load_table(lake, table)
    if loaded is None:
        return None
    current = loaded.current_snapshot()
    return live_records(_summary(current)) if current else 0
