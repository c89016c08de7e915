"""`medallion status` and `medallion notify`: what is wrong now, and whether people will hear of it."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, cast

import click

from medallion_assets.cli.common import EXIT_FAILED, EXIT_INVALID, catalog_store
from medallion_assets.redaction import echo

if TYPE_CHECKING:
    from medallion_assets.catalog.models import Notification


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
def status(as_json: bool) -> None:
    """Every pipeline's last run, freshness against its SLA, DQ rate, open anomalies, kill switches and
    profile."""
    from medallion_assets.control.monitoring.status import pipeline_status, render

    report = pipeline_status(catalog_store())
    echo(json.dumps(report, default=str, indent=2) if as_json else "\n".join(render(report)))


@click.command("metrics")
@click.option(
    "--port", default=9464, show_default=True, help="port of the /metrics endpoint (0: any free port)"
)
@click.option("--address", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--once", is_flag=True, help="print the metrics once, in Prometheus text format, and exit")
def metrics(port: int, address: str, once: bool) -> None:
    """Prometheus endpoint: runs, failures, halts, duration, rows, DQ rate, freshness lag, throttle waits and
    queue depth per pipeline and stage (queue depth from the Dagster instance under DAGSTER_HOME)."""
    import os
    import time

    from dagster import DagsterInstance
    from prometheus_client import generate_latest

    from medallion_assets.control.monitoring.metrics import registry_for, serve

    store = catalog_store()
    instance = DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else None
    if once:
        echo(generate_latest(registry_for(store, instance)).decode(), nl=False)
        return
    server = serve(store, port, address, instance)
    echo(f"serving Prometheus metrics on http://{address}:{server.server_port}/metrics", err=True)
    while True:
        time.sleep(3600)


@click.group()
def notify() -> None:
    """Notification channels and rows (the notifications table)."""


@notify.command("channels")
def notify_channels() -> None:
    """List the registered channels and their parameters."""
    from medallion_assets.control.monitoring.notifications import CHANNELS

    for channel in sorted(CHANNELS.values(), key=lambda c: c.name):
        echo(f"{channel.name:<10} {channel.description}")
        for name, field in channel.params.model_fields.items():
            kind = getattr(field.annotation, "__name__", str(field.annotation))
            echo(f"    {name} ({kind})" + (f": {field.description}" if field.description else ""))


@notify.command("test")
@click.argument("notification_id", metavar="CHANNEL")
def notify_test(notification_id: str) -> None:
    """Send a test message through the notifications row CHANNEL now, and say whether it arrived."""
    from medallion_assets.control.monitoring.notifications import DeliveryFailed, Message, send

    store = catalog_store()
    # read_table types its rows as the base model; this table's rows are Notification.
    notifications = cast("list[Notification]", store.read_table("notifications"))
    rows = {row.notification_id: row for row in notifications}
    row = rows.get(notification_id)
    if row is None:
        echo(
            f"unknown notification {notification_id!r}; notifications: {', '.join(sorted(rows)) or 'none'}",
            err=True,
        )
        sys.exit(EXIT_INVALID)
    message = Message(
        event="test", key="test", summary=f"test message for {notification_id} from medallion notify test"
    )
    try:
        send(row, message)
    except DeliveryFailed as error:
        store.record_audit(
            event="notification",
            status="failed",
            error=str(error),
            details={"notification_id": notification_id, "about": "test"},
        )
        echo(f"{notification_id} ({row.channel}): not delivered: {error}", err=True)
        sys.exit(EXIT_FAILED)
    store.record_audit(
        event="notification",
        status="delivered",
        details={"notification_id": notification_id, "about": "test"},
    )
    echo(f"{notification_id} ({row.channel}): delivered")
