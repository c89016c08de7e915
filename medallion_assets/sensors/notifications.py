"""The notification sensor: every tick it gathers what went wrong (failed Dagster runs, audit-log events,
missed SLAs), queues one delivery per event and recipient row, and sends what is due.

Failed runs come from Dagster's run records, the rest from `audit_log` (halts, blocking checks, healing that
gave up, circuit breakers, volume anomalies), SLAs from the catalog judged against the audit log's last
successful writes. The cursor says where the previous tick stopped; the outbox's dedup keys make a tick that
is repeated after a restart queue nothing twice. Sending happens here, off every run's path, with short
timeouts.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import cast

from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)
from sqlalchemy import func, select

from medallion_assets.catalog.models import Notification
from medallion_assets.catalog.schema import audit_log
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.monitoring.alerts import audit_messages, owner_of, sla_messages
from medallion_assets.control.monitoring.notifications import Message, deliver_due, enqueue
from medallion_assets.naming import PIPELINE_TAG
from medallion_assets.sensors.healing import failed_steps

# On its first tick the sensor looks this far back; afterwards its cursor says where it stopped.
FIRST_LOOKBACK = timedelta(hours=1)


def run_failure_messages(
    instance: DagsterInstance, snapshot: CatalogSnapshot, since: datetime
) -> tuple[list[Message], datetime]:
    """A message per run that failed since `since`, with its failed steps; and the newest update time seen."""
    records = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.FAILURE], updated_after=since))
    messages = []
    for record in records:
        run = record.dagster_run
        steps = [
            f"{step}: {error.message.strip().splitlines()[0] if error.message.strip() else error.cls_name}"
            for step, error in failed_steps(instance, run)
        ]
        pipeline_id = run.tags.get(PIPELINE_TAG)
        messages.append(
            Message(
                event="run_failed",
                key=f"run:{run.run_id}",
                pipeline_id=pipeline_id,
                owner=owner_of(snapshot, pipeline_id, None),
                summary=f"run {run.run_id} of {pipeline_id or run.job_name} failed"
                + (": " + "; ".join(steps) if steps else ""),
                details={"run_id": run.run_id, "failed_steps": steps},
            )
        )
    newest = max((record.update_timestamp for record in records), default=since)
    return messages, newest


def audit_id_before(store: CatalogStore, moment: datetime) -> int:
    """The last audit entry written before `moment` (0 when none): where a first tick starts reading."""
    query = select(func.coalesce(func.max(audit_log.c.audit_id), 0)).where(audit_log.c.created_at < moment)
    with store.engine.connect() as connection:
        last: int = connection.execute(query).scalar_one()
        return last


def notification_tick(
    instance: DagsterInstance, store: CatalogStore, cursor: str | None, now: datetime | None = None
) -> tuple[str, str]:
    """One tick's work: (new cursor, summary). Queued before the cursor moves: at least once. The catalog is
    read afresh, so a new SLA or notification row counts from the next tick."""
    now = now or datetime.now(UTC)
    snapshot = store.snapshot()
    if cursor:
        state = json.loads(cursor)
        after_id, runs_since = state["audit_id"], datetime.fromisoformat(state["runs_since"])
    else:
        runs_since = now - FIRST_LOOKBACK
        after_id = audit_id_before(store, runs_since)
    messages, last_id = audit_messages(store, snapshot, after_id)
    run_messages, runs_seen = run_failure_messages(instance, snapshot, runs_since)
    messages += run_messages + sla_messages(store, snapshot, now)
    # read_table types its rows as the base model; this table's rows are Notification.
    rows = cast(list[Notification], store.read_table("notifications"))
    queued = enqueue(store, rows, messages, now.timestamp())
    sent = deliver_due(store, now.timestamp())
    new_cursor = json.dumps({"audit_id": last_id, "runs_since": runs_seen.isoformat()})
    summary = (
        f"{len(messages)} event(s), {queued} new delivery(ies); delivered {sent['delivered']}, "
        f"failed {sent['failed']} (to retry), gave up {sent['gave_up']}"
    )
    return new_cursor, summary


def build_notification_sensor(store: CatalogStore, interval_seconds: int) -> SensorDefinition:
    """The sensor that tells people: notifications rows and SLAs are read fresh on every tick."""

    @sensor(
        name="medallion_notifications",
        minimum_interval_seconds=interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Sends notifications (notifications table) for failed runs, halts, failed checks, "
        "healing that gave up, circuit breakers, volume anomalies and missed SLAs; retries with backoff.",
    )
    def medallion_notifications(context: SensorEvaluationContext) -> SkipReason:
        cursor, summary = notification_tick(context.instance, store, context.cursor)
        context.update_cursor(cursor)
        return SkipReason(summary)

    return medallion_notifications
