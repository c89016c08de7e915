"""What is worth telling people: events found in the audit log, and SLAs missed, as notification Messages.

Each message's key names the event itself (an audit entry, a run, one SLA miss), which makes the outbox's
dedup key: the same event seen on two ticks is one notification.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import RowMapping, func, select

from medallion_assets.catalog.schema import audit_log
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.monitoring.notifications import Message
from medallion_assets.control.monitoring.sla import freshness


def classify(entry: RowMapping) -> str | None:
    """The notification event an audit entry is, if any."""
    event, status, details = entry["event"], entry["status"], entry["details"] or {}
    if event == "stage" and status == "halted":
        return "stage_halted"
    if event == "stage" and status == "failed" and entry["rows_read"] is not None:
        return "check_failed"  # the stage ran to the end; a blocking (error) rule failed
    if event == "check" and status == "failed":
        return "check_failed"
    if event == "check" and status == "warn":
        return "check_warned"  # the run succeeded, with warnings: a warn check (data quality) failed
    if event == "healing" and status == "give_up":
        return (
            "circuit_breaker_tripped"
            if details.get("action") == "trip_circuit_breaker"
            else "healing_gave_up"
        )
    if event == "volume_anomaly":
        return "volume_anomaly"
    return None


def owner_of(snapshot: CatalogSnapshot, pipeline_id: str | None, dataset: str | None) -> str:
    target = snapshot.targets.get(dataset or "")
    pipeline = snapshot.pipelines.get(pipeline_id or "")
    return (target.owner if target else "") or (pipeline.owner if pipeline else "")


def audit_messages(
    store: CatalogStore, snapshot: CatalogSnapshot, after_id: int
) -> tuple[list[Message], int]:
    """Messages for the audit entries after `after_id`, and the last id read (the sensor's cursor)."""
    query = select(audit_log).where(audit_log.c.audit_id > after_id).order_by(audit_log.c.audit_id)
    with store.engine.connect() as connection:
        entries = connection.execute(query).mappings().all()
    messages: list[Message] = []
    for entry in entries:
        event = classify(entry)
        if event is None:
            continue
        where = ".".join(part for part in (entry["pipeline_id"], entry["stage_name"]) if part)
        # A drop in volume flows down the pipeline, and every stage's check shows it; people hear once per
        # run, of the first stage it reached.
        key = (
            f"volume:{entry['run_id']}:{entry['pipeline_id']}"
            if event == "volume_anomaly"
            else f"audit:{entry['audit_id']}"
        )
        messages.append(
            Message(
                event=event,
                key=key,
                summary=f"{where}: {entry['error'] or entry['status']}",
                pipeline_id=entry["pipeline_id"],
                dataset=entry["dataset"],
                owner=owner_of(snapshot, entry["pipeline_id"], entry["dataset"]),
                details={
                    "run_id": entry["run_id"],
                    "stage": entry["stage_name"],
                    "status": entry["status"],
                    "at": str(entry["created_at"]),
                },
            )
        )
    return messages, entries[-1]["audit_id"] if entries else after_id


def last_audit_id(store: CatalogStore) -> int:
    with store.engine.connect() as connection:
        last: int = connection.execute(select(func.coalesce(func.max(audit_log.c.audit_id), 0))).scalar_one()
        return last


def sla_messages(
    store: CatalogStore, snapshot: CatalogSnapshot, now: datetime | None = None
) -> list[Message]:
    """One message per SLA miss: its episode (the deadline missed, or the update it is stale since) keys
    it."""
    return [
        Message(
            event="sla_missed",
            key=f"sla:{f.dataset}:{f.episode}",
            summary=f"{f.dataset}: {f.explanation}",
            pipeline_id=f.pipeline_id,
            dataset=f.dataset,
            owner=f.owner,
            details={"sla": f.sla.model_dump(exclude_none=True), "lag_sec": f.lag_sec},
        )
        for f in freshness(snapshot, store, now)
        if f.state == "stale"
    ]
