"""Prometheus metrics, read from the audit log (and Dagster's run queue) at scrape time.

A custom collector rather than counters kept in memory: the numbers already live in `audit_log`, written by
every run wherever it ran, so a scrape of any `medallion metrics` process sees them all, and a restart loses
nothing. Each scrape costs a handful of grouped queries.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from wsgiref.simple_server import WSGIServer

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from medallion_assets.catalog.schema import audit_log, notification_deliveries
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.monitoring.sla import freshness
from medallion_assets.naming import PIPELINE_TAG

STAGE = ("pipeline", "stage")
SLA_STATES = ("fresh", "late", "stale", "unknown")


class MedallionCollector(Collector):
    """Per pipeline and stage: executions by status, duration, rows, DQ rate, freshness lag, throttle waits,
    queue depth (when a Dagster instance is given) and notification deliveries."""

    def __init__(self, store: CatalogStore, instance: DagsterInstance | None = None):
        self.store, self.instance = store, instance

    def collect(self) -> Iterator[Metric]:
        stage_rows = (audit_log.c.pipeline_id, audit_log.c.stage_name)
        executions = CounterMetricFamily(
            "medallion_stage_executions",
            "Stage executions by outcome (success, failed, halted)",
            labels=[*STAGE, "status"],
        )
        duration = CounterMetricFamily(
            "medallion_stage_duration_seconds", "Time spent in stage executions", labels=list(STAGE)
        )
        rows = CounterMetricFamily(
            "medallion_stage_rows", "Rows read, written and quarantined", labels=[*STAGE, "kind"]
        )
        waits = CounterMetricFamily(
            "medallion_throttle_waits", "Waits for a throttle's rate bucket", labels=list(STAGE)
        )
        waited = CounterMetricFamily(
            "medallion_throttle_wait_seconds", "Time waited for throttles", labels=list(STAGE)
        )
        with self.store.engine.connect() as connection:
            for pipeline, stage, status, count, seconds, read, written, quarantined in connection.execute(
                select(
                    *stage_rows,
                    audit_log.c.status,
                    func.count(),
                    func.sum(audit_log.c.duration_sec),
                    func.sum(audit_log.c.rows_read),
                    func.sum(audit_log.c.rows_written),
                    func.sum(audit_log.c.rows_quarantined),
                )
                .where(audit_log.c.event == "stage")
                .group_by(*stage_rows, audit_log.c.status)
            ):
                executions.add_metric([pipeline, stage, status], count)
                duration.add_metric([pipeline, stage], seconds or 0)
                for kind, value in (("read", read), ("written", written), ("quarantined", quarantined)):
                    rows.add_metric([pipeline, stage, kind], value or 0)
            for pipeline, stage, count, seconds in connection.execute(
                select(*stage_rows, func.count(), func.sum(audit_log.c.duration_sec))
                .where(audit_log.c.event == "throttle")
                .group_by(*stage_rows)
            ):
                waits.add_metric([pipeline or "", stage or ""], count)
                waited.add_metric([pipeline or "", stage or ""], seconds or 0)
            deliveries = connection.execute(
                select(notification_deliveries.c.status, func.count()).group_by(
                    notification_deliveries.c.status
                )
            ).all()
        yield from (executions, duration, rows, waits, waited)
        yield self._dq_rates()
        yield from self._freshness()
        notifications = GaugeMetricFamily(
            "medallion_notification_deliveries",
            "Notification deliveries by status (pending, delivered, gave_up)",
            labels=["status"],
        )
        for status, count in deliveries:
            notifications.add_metric([status], count)
        yield notifications
        if self.instance is not None:
            yield self._queue_depth(self.instance)

    def _dq_rates(self) -> Metric:
        """The DQ rate of each stage's latest successful execution that measured one."""
        latest = (
            select(
                audit_log.c.pipeline_id, audit_log.c.stage_name, func.max(audit_log.c.audit_id).label("id")
            )
            .where(audit_log.c.event == "stage", audit_log.c.status == "success")
            .group_by(audit_log.c.pipeline_id, audit_log.c.stage_name)
            .subquery()
        )
        gauge = GaugeMetricFamily(
            "medallion_stage_dq_rate",
            "Share of rows read that no rule rejected, last run",
            labels=list(STAGE),
        )
        with self.store.engine.connect() as connection:
            for pipeline, stage, details in connection.execute(
                select(audit_log.c.pipeline_id, audit_log.c.stage_name, audit_log.c.details).join(
                    latest, audit_log.c.audit_id == latest.c.id
                )
            ):
                if (details or {}).get("dq_rate") is not None:
                    gauge.add_metric([pipeline, stage], details["dq_rate"])
        return gauge

    def _freshness(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "medallion_dataset_freshness_lag_seconds",
            "Seconds since the dataset's last successful write (datasets with an SLA)",
            labels=["pipeline", "dataset"],
        )
        state = GaugeMetricFamily(
            "medallion_dataset_sla_state",
            "1 for the dataset's freshness state against its SLA",
            labels=["pipeline", "dataset", "state"],
        )
        for verdict in freshness(self.store.snapshot(), self.store, datetime.now(UTC)):
            if verdict.lag_sec is not None:
                lag.add_metric([verdict.pipeline_id, verdict.dataset], verdict.lag_sec)
            for name in SLA_STATES:
                state.add_metric([verdict.pipeline_id, verdict.dataset, name], float(verdict.state == name))
        yield from (lag, state)

    def _queue_depth(self, instance: DagsterInstance) -> Metric:
        gauge = GaugeMetricFamily(
            "medallion_queue_depth", "Runs waiting in Dagster's queue", labels=["pipeline"]
        )
        depth: dict[str, int] = {}
        for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.QUEUED])):
            pipeline = run.tags.get(PIPELINE_TAG, "")
            depth[pipeline] = depth.get(pipeline, 0) + 1
        for pipeline, count in sorted(depth.items()):
            gauge.add_metric([pipeline], count)
        return gauge


def registry_for(store: CatalogStore, instance: DagsterInstance | None = None) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(MedallionCollector(store, instance))
    return registry


def serve(
    store: CatalogStore, port: int, address: str, instance: DagsterInstance | None = None
) -> WSGIServer:
    """Serve /metrics on a daemon thread; returns the server (its port is `server.server_port`)."""
    server, _thread = start_http_server(port, address, registry=registry_for(store, instance))
    return server
