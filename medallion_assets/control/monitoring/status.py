"""One screen of truth per pipeline: its last run, freshness against its SLA, DQ rate, open volume anomalies,
the kill switches in force and the scheduling profile — read from the catalog and the audit log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from medallion_assets.catalog.schema import audit_log
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.monitoring.sla import freshness
from medallion_assets.control.steering.flags import disabled_reason, read_control_state
from medallion_assets.control.steering.scheduling import SchedulingPolicy

RUN_EVENTS = ("stage", "volume_anomaly")


@dataclass(frozen=True)
class WarehouseVersions:
    """Which lake version of a dataset its warehouse `table` holds (`held`), and the lake's `current` one,
    made by `operation` (publish, append, rollback)."""

    table: str
    held: int
    current: int
    operation: str

    def agree(self) -> bool:
        return self.held == self.current

    def __str__(self) -> str:
        if self.agree():
            return f"warehouse table {self.table} holds lake snapshot {self.held}, the lake's current version"
        return (
            f"warehouse table {self.table} holds lake snapshot {self.held}; the lake's current version is "
            f"snapshot {self.current} ({self.operation})"
        )


def _last_runs(store: CatalogStore) -> dict[str, list[dict[str, Any]]]:
    """Pipeline → the audit entries (stages and anomalies) of its most recent run."""
    query = (
        select(audit_log)
        .where(audit_log.c.event.in_(RUN_EVENTS), audit_log.c.run_id.is_not(None))
        .order_by(audit_log.c.audit_id)
    )
    latest: dict[str, list[dict[str, Any]]] = {}
    with store.engine.connect() as connection:
        for entry in connection.execute(query).mappings():
            entries = latest.setdefault(entry["pipeline_id"], [])
            if entries and entries[-1]["run_id"] != entry["run_id"]:
                entries.clear()
            entries.append(dict(entry))
    return latest


def _run_summary(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    stages = [e for e in entries if e["event"] == "stage"]
    if not stages:
        return None
    statuses = {e["status"] for e in stages}
    status = "failed" if "failed" in statuses else "halted" if "halted" in statuses else "success"
    rates = {e["stage_name"]: (e["details"] or {}).get("dq_rate") for e in stages if e["status"] == "success"}
    return {
        "run_id": stages[-1]["run_id"],
        "status": status,
        "at": str(stages[-1]["created_at"]),
        "dq_rate": {stage: rate for stage, rate in rates.items() if rate is not None},
        "errors": [f"{e['stage_name']}: {e['error']}" for e in stages if e["error"]],
        "anomalies": [f"{e['stage_name']}: {e['error']}" for e in entries if e["event"] == "volume_anomaly"],
    }


def pipeline_status(
    store: CatalogStore, snapshot: CatalogSnapshot | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """The report `medallion status` prints, as plain data."""
    snapshot = snapshot or store.snapshot()
    now = now or datetime.now(UTC)
    policy, state, runs = (
        SchedulingPolicy.from_snapshot(snapshot),
        read_control_state(store),
        _last_runs(store),
    )
    verdicts: dict[str, list[dict[str, Any]]] = {}
    for verdict in freshness(snapshot, store, now):
        verdicts.setdefault(verdict.pipeline_id, []).append(
            {
                "dataset": verdict.dataset,
                "state": verdict.state,
                "lag_sec": verdict.lag_sec,
                "explanation": verdict.explanation,
            }
        )
    for stage in snapshot.stages():
        behind = warehouse_behind(store, snapshot, stage.target_id)
        if behind:
            verdicts.setdefault(stage.pipeline_id, []).append(
                {"dataset": stage.target_id, "state": "stale", "lag_sec": None, "explanation": behind}
            )
    pipelines: dict[str, dict[str, Any]] = {}
    for pipeline_id in sorted(snapshot.pipelines):
        reasons = {
            reason
            for stage in snapshot.stages(pipeline_id)
            if (reason := disabled_reason(snapshot, state, stage)) is not None
        }
        pipelines[pipeline_id] = {
            "last_run": _run_summary(runs.get(pipeline_id, [])),
            "freshness": verdicts.get(pipeline_id, []),
            "kill_switches": sorted(reasons),
            "profile": policy.profile_of(pipeline_id),
        }
    return {"at": now.isoformat(), "default_profile": policy.default_profile, "pipelines": pipelines}


def warehouse_versions(
    store: CatalogStore, snapshot: CatalogSnapshot, dataset: str
) -> WarehouseVersions | None:
    """The lake version of `dataset` its warehouse table holds, and the lake's current one; None when the
    dataset loads into no warehouse or was never loaded."""
    target = snapshot.targets[dataset]
    table = target.warehouse_table() if target.kind == "warehouse" else None
    commits, loads = store.lake_commits(dataset), store.audit_entries(dataset=dataset, event="warehouse_load")
    if table is None or not commits or not loads:
        return None
    return WarehouseVersions(
        table,
        int(loads[-1]["details"]["snapshot_id"]),
        int(commits[-1]["snapshot_id"]),
        commits[-1]["operation"],
    )


def warehouse_behind(store: CatalogStore, snapshot: CatalogSnapshot, dataset: str) -> str | None:
    """Why the warehouse table of `dataset` does not hold its lake's current version (a rollback whose
    reload failed, or a load that did not finish), naming both versions; None when they agree, or when the
    dataset loads into no warehouse or was never loaded."""
    versions = warehouse_versions(store, snapshot, dataset)
    return None if versions is None or versions.agree() else str(versions)


def render(report: dict[str, Any]) -> list[str]:
    """The report as lines for a terminal."""
    lines = [f"profile in force by default: {report['default_profile']}   ({report['at']})"]
    for pipeline_id, p in report["pipelines"].items():
        run = p["last_run"]
        head = f"{pipeline_id}  [{p['profile']}]  last run: " + (
            f"{run['status']} {run['at']} ({run['run_id']})" if run else "never"
        )
        lines.append(head)
        for reason in p["kill_switches"]:
            lines.append(f"  KILL SWITCH  {reason}")
        for f in p["freshness"]:
            lines.append(f"  {f['state'].upper():<7} {f['dataset']}: {f['explanation']}")
        if run:
            for stage, rate in run["dq_rate"].items():
                lines.append(f"  DQ      {stage}: {rate:.2%}")
            for anomaly in run["anomalies"]:
                lines.append(f"  ANOMALY {anomaly}")
            for error in run["errors"]:
                lines.append(f"  ERROR   {error}")
    return lines
