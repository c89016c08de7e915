"""Lake table maintenance as catalog rows: which `table_maintenance` row applies to a dataset (its own, else
`default`), the check of those rows at catalog load, and running it (compaction, snapshot expiry, orphan-file
removal), each dataset audited (`audit_log` event `maintenance`) with what every procedure reported.

The schedules that run it come from the same rows (sensors/maintenance.py); `medallion lake maintain` runs it
now. Spark is imported only when maintenance runs: the checks run in `medallion catalog validate`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from medallion_assets.catalog.models import LakeTable, Row, TableMaintenance
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.steering.throttles import target_system
from medallion_assets.naming import pool_name
from medallion_assets.storage.lake.layout import table_of
from medallion_assets.storage.lake.root import Lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from medallion_assets.storage.lake.layout import TableRef
    from medallion_assets.storage.lake.maintenance import LakeMaintenance

DEFAULT = "default"
_NICKNAMES = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
# Each cron field's range, and the names it may use instead of numbers.
_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
    ("day of week", 0, 7, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")),
)
_ITEM = re.compile(r"^(\*|\w+(?:-\w+)?)(?:/(\d+))?$")


def cron_problem(cron: str) -> str | None:
    """Why `cron` is not a five-field cron expression (or one of @daily, @hourly, …), or None."""
    if cron.strip().lower() in _NICKNAMES:
        return None
    fields = cron.split()
    if len(fields) != 5:
        return f"cron expression {cron!r} has {len(fields)} field(s), not 5 (minute hour day month weekday)"
    for text, (name, low, high, names) in zip(fields, _FIELDS):
        for item in text.split(","):
            match = _ITEM.match(item)
            if not match or match.group(2) == "0":
                return f"cron expression {cron!r}: {name} {item!r} is not a value, range or step"
            if match.group(1) == "*":
                continue
            for bound in match.group(1).split("-"):
                value = names.index(bound.upper()) + low if bound.upper() in names else None
                if value is None and not bound.isdigit():
                    return f"cron expression {cron!r}: {name} {bound!r} is not a number"
                if not low <= (value if value is not None else int(bound)) <= high:
                    return f"cron expression {cron!r}: {name} {bound} is outside {low}-{high}"
    return None


def policies(snapshot: CatalogSnapshot) -> dict[str, TableMaintenance]:
    """The `table_maintenance` rows, by dataset (`default` among them)."""
    rows = snapshot.rows_of("table_maintenance", TableMaintenance).values()
    return {row.dataset: row for row in rows}


def policy_for(snapshot: CatalogSnapshot, dataset: str) -> TableMaintenance | None:
    """The row that applies to a dataset: its own, else `default`; None when neither exists."""
    rows = policies(snapshot)
    return rows.get(dataset) or rows.get(DEFAULT)


def maintained(snapshot: CatalogSnapshot) -> dict[str, TableMaintenance]:
    """Every lake dataset whose applicable row is enabled, with that row."""
    found = {}
    for dataset in sorted(snapshot.targets):
        policy = policy_for(snapshot, dataset)
        if policy is not None and policy.enabled:
            found[dataset] = policy
    return found


def maintenance_pool(snapshot: CatalogSnapshot, dataset: str) -> str:
    """The pool a dataset's maintenance claims: its target system's (a lake-only target's is `lake`)."""
    target = snapshot.targets[dataset]
    system = target_system(target) if target.kind == "warehouse" else target.system or "lake"
    return pool_name("target", system)


def check_maintenance(snapshot: CatalogSnapshot) -> Iterator[tuple[str, Row, str, str]]:
    """A load check (loading.CHECKS): rows for a dataset that is neither `default` nor a lake target, sort
    compaction of a table without a sort order, and schedules that are no cron expression."""
    for row in policies(snapshot).values():
        target = snapshot.targets.get(row.dataset)
        if row.dataset != DEFAULT and target is None:
            message = f"{row.dataset!r} is neither `default` nor a lake target of the catalog"
            yield "table_maintenance", row, "dataset", message
        sort_by = (target.lake_table or LakeTable()).sort_by if target else None
        if target is not None and row.compaction == "sort" and not sort_by:
            message = f"sort compaction needs a sort order: {row.dataset} has no lake_table.sort_by"
            yield "table_maintenance", row, "compaction", message
        problem = cron_problem(row.schedule)
        if problem:
            yield "table_maintenance", row, "schedule", problem


@dataclass
class MaintenanceReport:
    dataset: str
    table: str
    status: str  # success | failed | skipped
    reported: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def chosen_policies(snapshot: CatalogSnapshot, datasets: list[str] | None) -> dict[str, TableMaintenance]:
    """The row each of `datasets` (every maintained one by default) is maintained by; ValueError for a dataset
    that is not a target, or has no row (nor a default)."""
    if datasets is None:
        return maintained(snapshot)
    chosen = {}
    for dataset in datasets:
        if dataset not in snapshot.targets:
            raise ValueError(f"unknown dataset {dataset!r}: no target of the catalog has it")
        policy = policy_for(snapshot, dataset)
        if policy is None:
            raise ValueError(f"{dataset} has no table_maintenance row, and there is no `default` row")
        chosen[dataset] = policy
    return chosen


def run_maintenance(
    spark: SparkSession,
    store: CatalogStore,
    lake: Lake,
    datasets: list[str] | None = None,
    *,
    now: datetime | None = None,
    run_id: str | None = None,
) -> list[MaintenanceReport]:
    """Maintain `datasets` (every maintained one by default) as their rows say; one audit row each.

    A dataset named explicitly is maintained by its row even when that row is disabled; one without any row
    (nor a default) is refused. A table not written yet is skipped. One table's failure is reported and
    audited, and the others still run."""
    from medallion_assets.storage.lake.maintenance import LakeMaintenance

    snapshot = store.snapshot()
    chosen = chosen_policies(snapshot, datasets)
    now = now or datetime.now(UTC)
    maintenance = LakeMaintenance(spark, lake)
    reports = []
    for dataset, policy in chosen.items():
        table = table_of(snapshot.targets[dataset])
        started = time.perf_counter()
        report = MaintenanceReport(dataset, str(table), "success")
        if not maintenance.exists(table):
            report.status = "skipped"
            report.reported = {"reason": "the table has not been written yet"}
        else:
            try:
                report.reported = _maintain(maintenance, table, policy, now)
            except Exception as error:  # noqa: BLE001 — audited, and the other tables still run
                report.status, report.error = "failed", f"{type(error).__name__}: {error}"
        producer = snapshot.stage_producing(dataset)
        store.record_audit(
            run_id=run_id,
            pipeline_id=producer.pipeline_id if producer else None,
            stage_name=producer.stage_name if producer else None,
            dataset=dataset,
            event="maintenance",
            status=report.status,
            error=report.error,
            duration_sec=time.perf_counter() - started,
            details={"table": str(table), "policy": policy.dataset, **report.reported},
        )
        reports.append(report)
    return reports


def _maintain(
    lake: LakeMaintenance, table: TableRef, policy: TableMaintenance, now: datetime
) -> dict[str, Any]:
    reported: dict[str, Any] = {"data_files_before": lake.data_files(table)}
    if policy.compaction != "none":
        reported["compaction"] = {
            "strategy": policy.compaction,
            **lake.compact(table, policy.compaction, policy.target_file_size_bytes),
        }
    reported["data_files_after"] = lake.data_files(table)
    reported["expiry"] = {
        "older_than": (now - timedelta(days=policy.expire_after_days)).isoformat(),
        "retain_last": policy.keep_snapshots,
        **lake.expire(table, now - timedelta(days=policy.expire_after_days), policy.keep_snapshots),
    }
    if policy.remove_orphans_after_days is not None:
        older_than = now - timedelta(days=policy.remove_orphans_after_days)
        reported["orphans"] = {"older_than": older_than.isoformat(), **lake.remove_orphans(table, older_than)}
    reported["snapshots_left"] = lake.snapshot_count(table)
    return reported
