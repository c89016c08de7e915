"""Putting a lake dataset back to an earlier version, and the datasets built on it with it.

The version to go back to is a snapshot of the dataset's table or a run that committed one (`lake_commits`).
Downstream datasets are judged by the version of this dataset their current version was built from (the
`inputs` Medallion recorded when it published them): built on the target version or one of its ancestors,
they stay as they are; built on a later one, the rollback is refused, naming them, unless `cascade` asks to
roll them back too, each to its latest version built on the target or earlier (refused, naming them, when
there is none). Every table moved is one metadata commit (no data is rewritten), recorded in `lake_commits`
(operation `rollback`) and in `audit_log` (event `rollback`). A moved dataset whose warehouse table serves it
is then reloaded whole from the version it was moved to, in the same call, so that the warehouse never
serves a version the lake no longer has (a `warehouse_load` audit row, as a run's load writes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from medallion_assets.catalog.models import Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.storage.lake import history
from medallion_assets.storage.lake.layout import TableRef, table_of
from medallion_assets.storage.lake.metadata import current_snapshot_id
from medallion_assets.storage.lake.root import Lake

if TYPE_CHECKING:
    from medallion_assets.storage.warehouse import Warehouse

# The operations that made a new version of a table (a rollback only points at an existing one).
_BUILT = ("append", "publish")


class RollbackRefused(Exception):
    """A rollback that cannot be done as asked: names the dataset, snapshot, run or downstream tables."""


class WarehouseNotReloaded(RollbackRefused):
    """The lake moved, and the warehouse table serving it could not be reloaded: names both versions."""


@dataclass(frozen=True)
class RolledBack:
    dataset: str
    table: str
    from_snapshot: int | None
    to_snapshot: int
    warehouse_table: str | None = None  # the warehouse table reloaded from `to_snapshot`, if one serves it
    warehouse_rows: int | None = None


def downstream_of(snapshot: CatalogSnapshot, dataset: str) -> list[str]:
    """The datasets whose stages read `dataset` directly."""
    return sorted({stage.target_id for stage in snapshot.stages() if dataset in stage.input_ids()})


def _table(snapshot: CatalogSnapshot, dataset: str) -> TableRef:
    target = snapshot.targets.get(dataset)
    if target is None:
        known = ", ".join(sorted(snapshot.targets)) or "none"
        raise RollbackRefused(
            f"unknown dataset {dataset!r}: no target of the catalog has it (known: {known})"
        )
    return table_of(target)


def _table_snapshots(lake: Lake, dataset: str, table: TableRef) -> set[int]:
    try:
        return history.snapshots(lake, table)
    except history.LakeHistoryError:
        raise RollbackRefused(f"dataset {dataset}: lake table {table} does not exist yet") from None


def resolve_version(store: CatalogStore, lake: Lake, dataset: str, to: str) -> int:
    """The snapshot `to` names: a snapshot id in the table's history, or a run that committed a version of
    the dataset (its last one)."""
    table = _table(store.snapshot(), dataset)
    present = _table_snapshots(lake, dataset, table)
    if to.strip().isdigit() and int(to) in present:
        return int(to)
    by_run = [c for c in store.lake_commits(dataset) if c["run_id"] == to and c["operation"] in _BUILT]
    if by_run:
        snapshot_id = int(by_run[-1]["snapshot_id"])
        if snapshot_id not in present:
            raise RollbackRefused(
                f"run {to} committed snapshot {snapshot_id} of {dataset}, which lake table {table} no longer "
                "has (expired by maintenance)"
            )
        return snapshot_id
    if to.strip().isdigit():
        raise RollbackRefused(
            f"snapshot {to} is not in the history of lake table {table} ({dataset}), and no run of that id "
            f"committed a version of it"
        )
    raise RollbackRefused(f"run {to} committed no version of {dataset}")


def _version_row(store: CatalogStore, dataset: str, snapshot_id: int) -> dict[str, Any] | None:
    """The latest record of `snapshot_id` becoming a version of `dataset`."""
    rows = [c for c in store.lake_commits(dataset) if c["snapshot_id"] == snapshot_id]
    return rows[-1] if rows else None


def plan(store: CatalogStore, lake: Lake, dataset: str, snapshot_id: int, cascade: bool) -> dict[str, int]:
    """Every dataset the rollback moves, to which snapshot: `dataset` first, then downstream ones (with
    `cascade`). Raises RollbackRefused naming every downstream dataset in the way."""
    snapshot = store.snapshot()
    planned: dict[str, int] = {}
    refusals: list[str] = []

    def visit(current_dataset: str, to_snapshot: int) -> None:
        planned[current_dataset] = to_snapshot
        allowed = set(history.lineage(lake, _table(snapshot, current_dataset), to_snapshot))
        for downstream in downstream_of(snapshot, current_dataset):
            if downstream in planned:
                continue
            table = _table(snapshot, downstream)
            try:
                current = current_snapshot_id(lake, table)
            except history.LakeHistoryError:
                continue  # not written yet: built on nothing
            row = _version_row(store, downstream, current) if current is not None else None
            built_on = (row or {}).get("inputs") or {}
            if current_dataset not in built_on or int(built_on[current_dataset]) in allowed:
                continue
            if not cascade:
                refusals.append(
                    f"{downstream} (its current version, snapshot {current}, was built on {current_dataset} "
                    f"snapshot {built_on[current_dataset]})"
                )
                continue
            present = history.snapshots(lake, table)
            earlier = [
                c
                for c in store.lake_commits(downstream)
                if c["snapshot_id"] in present
                and current_dataset in (c["inputs"] or {})
                and int(c["inputs"][current_dataset]) in allowed
            ]
            if not earlier:
                refusals.append(
                    f"{downstream} (no version of it built on {current_dataset} snapshot {to_snapshot} or "
                    "earlier is left to roll back to)"
                )
                continue
            visit(downstream, int(earlier[-1]["snapshot_id"]))

    visit(dataset, snapshot_id)
    if refusals:
        advice = (
            "they cannot follow it back"
            if cascade
            else "roll them back too with --cascade (the healing action: cascade: true)"
        )
        raise RollbackRefused(
            f"rollback of {dataset} to snapshot {snapshot_id} refused: downstream dataset(s) built on a "
            f"later version: {'; '.join(refusals)}; {advice}"
        )
    return planned


def rollback(
    store: CatalogStore,
    lake: Lake,
    dataset: str,
    to: str,
    *,
    cascade: bool = False,
    by: str = "cli",
    run_id: str | None = None,
    warehouse_url: str | None = None,
) -> list[RolledBack]:
    """Roll `dataset` back to `to` (a snapshot id or a run id), and with `cascade` the downstream datasets
    built on a later version; returns what moved, downstream datasets first (the order they were moved in,
    so that no reader finds a downstream table newer than what it was built from). Each moved dataset that
    loads into the warehouse (`warehouse_url`) is reloaded from its new version; without a warehouse to
    reload, such a rollback is refused before anything moves."""
    snapshot_id = resolve_version(store, lake, dataset, to)
    planned = plan(store, lake, dataset, snapshot_id, cascade)
    snapshot = store.snapshot()
    served = [moved for moved in planned if snapshot.targets[moved].kind == "warehouse"]
    if served and warehouse_url is None:
        raise RollbackRefused(
            f"rollback of {dataset} refused: the warehouse serves {', '.join(served)}, and no warehouse is "
            "configured to reload from the version rolled back to (MEDALLION_WAREHOUSE_URL)"
        )
    done = []
    for moved, to_snapshot in reversed(list(planned.items())):
        table = _table(snapshot, moved)
        previous = history.set_current(lake, table, to_snapshot)
        producer = snapshot.stage_producing(moved)
        version = _version_row(store, moved, to_snapshot)
        where = dict(
            pipeline_id=producer.pipeline_id if producer else None,
            stage_name=producer.stage_name if producer else None,
            run_id=run_id,
        )
        store.record_commit(
            dataset=moved,
            snapshot_id=to_snapshot,
            operation="rollback",
            inputs=(version or {}).get("inputs") or {},
            **where,
        )
        store.record_audit(
            dataset=moved,
            event="rollback",
            status="success",
            details={
                "table": str(table),
                "from_snapshot": previous,
                "to_snapshot": to_snapshot,
                "requested": to if moved == dataset else None,
                "cascaded_from": None if moved == dataset else dataset,
                "by": by,
            },
            **where,
        )
        done.append(RolledBack(moved, str(table), previous, to_snapshot))
    if not served:
        return done
    assert warehouse_url is not None
    # The warehouse's drivers are imported only when a rollback reloads it: checking healing rules at catalog
    # load and plan imports this module.
    from medallion_assets.storage.warehouse import WarehouseError, warehouse_from_url

    try:
        with warehouse_from_url(warehouse_url) as warehouse:
            return [
                _reload(store, lake, warehouse, snapshot.targets[m.dataset], m) if m.dataset in served else m
                for m in done
            ]
    except WarehouseError as error:
        moves = ", ".join(f"{m.dataset} to snapshot {m.to_snapshot}" for m in done)
        tables = ", ".join(str(snapshot.targets[dataset].warehouse_table()) for dataset in served)
        reason = str(error).splitlines()[0]
        raise WarehouseNotReloaded(
            f"rolled back in the lake ({moves}), but the warehouse could not be reloaded ({reason}): "
            f"{tables} may still serve the version it held, which `medallion status` shows as stale; run "
            "the rollback again once the warehouse answers"
        ) from error


def _reload(
    store: CatalogStore, lake: Lake, warehouse: Warehouse, target: Target, moved: RolledBack
) -> RolledBack:
    """Load the warehouse table of `target` whole from the version `moved` put its lake table at, and record
    the version it now holds, as a run's load does (so `medallion status` and the next run's incremental
    load know it)."""
    table = target.warehouse_table()
    assert table is not None, "a warehouse target has a location (Target checks it)"
    rows = history.rows_at(lake, table_of(target), moved.to_snapshot)
    loaded = warehouse.load(table, rows, "replace", target.keys)
    producer = store.snapshot().stage_producing(target.target_id)
    store.record_audit(
        pipeline_id=producer.pipeline_id if producer else None,
        stage_name=producer.stage_name if producer else None,
        dataset=target.target_id,
        event="warehouse_load",
        status="success",
        rows_written=loaded.rows_loaded,
        details={
            "snapshot_id": str(moved.to_snapshot),
            "table": table,
            "warehouse": repr(warehouse),  # its kind and place, never a password
            "groups_only": False,
            "by": "rollback",
        },
    )
    return RolledBack(
        moved.dataset, moved.table, moved.from_snapshot, moved.to_snapshot, table, loaded.rows_loaded
    )


def previous_version(store: CatalogStore, lake: Lake, dataset: str) -> int | None:
    """The version of `dataset` Medallion committed before its current one (an ancestor of it), or None."""
    table = _table(store.snapshot(), dataset)
    current = current_snapshot_id(lake, table)
    if current is None:
        return None
    before = set(history.lineage(lake, table, current)[1:])
    earlier = [
        c for c in store.lake_commits(dataset) if c["snapshot_id"] in before and c["operation"] in _BUILT
    ]
    return int(earlier[-1]["snapshot_id"]) if earlier else None


def current_version(store: CatalogStore, lake: Lake, dataset: str) -> dict[str, Any] | None:
    """The `lake_commits` record of the dataset's current version (None: no version, or not Medallion's)."""
    table = _table(store.snapshot(), dataset)
    try:
        current = current_snapshot_id(lake, table)
    except history.LakeHistoryError:
        return None
    return _version_row(store, dataset, current) if current is not None else None
