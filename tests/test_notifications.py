"""Notifications over real channels: SNS on moto's server, a webhook server and an SMTP server on loopback;
rows checked by the catalog loader; the outbox delivering at least once, never twice, retrying with
backoff."""

from __future__ import annotations

import json
import socket
from datetime import UTC
from email import message_from_bytes

import boto3
import pytest
from aiosmtpd.controller import Controller

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.models import Notification
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.monitoring.notifications import Message, deliver_due, deliveries, enqueue
from medallion_assets.loading import validate_files
from tests.fixtures.webhook import HOOK_ENV, Webhook


@pytest.fixture
def store(tmp_path) -> CatalogStore:
    catalog = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    catalog.migrate()
    return catalog


def hook_row(**fields) -> Notification:
    return Notification(
        **{
            "notification_id": "ops_hook",
            "events": ["run_failed", "sla_missed"],
            "channel": "webhook",
            "params": {"url_env": HOOK_ENV},
            **fields,
        }
    )


FAILED = Message(
    event="run_failed",
    key="run:r1",
    summary="run r1 of orders_etl failed: bronze__orders: boom",
    pipeline_id="orders_etl",
    owner="team:finance-data",
    details={"run_id": "r1"},
)


def test_unknown_channel_and_pasted_secret_are_refused_at_load_with_file_and_line(store, tmp_path):
    catalog = tmp_path / "notify.yaml"
    catalog.write_text(
        "notifications:\n"
        "  - {notification_id: pager, events: [run_failed], channel: pagerduty}\n"
        "  - {notification_id: pasted, events: [run_failed], channel: webhook,\n"
        "     params: {url_env: 'https://hooks.example.com/T0/B0/very-secret'}}\n"
        "  - {notification_id: lost, events: [sla_missed], scope: pipeline, scope_id: nowhere, channel: "
        "webhook,\n     params: {url_env: HOOK}}\n"
    )
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [catalog])
    problems = [str(p) for p in refused.value.problems]
    assert problems == [
        f"{catalog}:2: notifications[pager].channel: unknown channel 'pagerduty'; registered channels: "
        "email, sns, webhook",
        f"{catalog}:3: notifications[pasted].params: params for webhook: url_env: Value error, must be the "
        "name of an environment variable (A-Z, 0-9, _) that holds the secret, never the secret",
        f"{catalog}:5: notifications[lost].scope_id: unknown pipeline 'nowhere'",
    ]
    assert "very-secret" not in str(refused.value)
    assert store.table_rows("notifications") == []


def test_webhook_answering_500_is_retried_with_backoff_then_delivered_and_audited(store, monkeypatch):
    flaky = Webhook(statuses=[500])
    monkeypatch.setenv(HOOK_ENV, flaky.url)
    try:
        row = hook_row(backoff_sec=60)
        store.upsert({"notifications": [row]})
        assert enqueue(store, [row], [FAILED], now=1000) == 1
        assert deliver_due(store, now=1000) == {"delivered": 0, "failed": 1, "gave_up": 0}
        assert deliver_due(store, now=1059) == {"delivered": 0, "failed": 0, "gave_up": 0}  # backing off
        assert deliver_due(store, now=1060) == {"delivered": 1, "failed": 0, "gave_up": 0}
        assert deliver_due(store, now=5000) == {"delivered": 0, "failed": 0, "gave_up": 0}  # never twice
    finally:
        flaky.close()
    assert len(flaky.received) == 2
    body = flaky.received[-1]["body"]
    assert (
        body["text"]
        == "[medallion] run failed: orders_etl\nrun r1 of orders_etl failed: bronze__orders: boom"
    )
    assert body["medallion"]["event"] == "run_failed" and body["medallion"]["details"] == {"run_id": "r1"}
    audit = store.audit_entries(event="notification")
    assert [
        (e["status"], e["error"], e["details"]["attempt"], e["details"]["retry_in_sec"]) for e in audit
    ] == [("failed", "webhook answered HTTP 500", 1, 60), ("delivered", None, 2, 0)]
    (delivery,) = deliveries(store)
    assert (delivery["dedup_key"], delivery["status"], delivery["attempts"]) == (
        "ops_hook|run:r1",
        "delivered",
        2,
    )
    recorded = json.dumps([audit, store.table_rows("notifications")], default=str)
    assert "secret-token" not in recorded and HOOK_ENV in recorded


def test_a_channel_that_is_down_gives_up_after_its_attempts_without_leaking_the_url(store, monkeypatch):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    monkeypatch.setenv(HOOK_ENV, f"http://127.0.0.1:{port}/hooks/secret-token")  # nothing listens there
    row = hook_row(max_attempts=2, backoff_sec=10)
    store.upsert({"notifications": [row]})
    enqueue(store, [row], [FAILED], now=0)
    assert deliver_due(store, now=0)["failed"] == 1
    assert deliver_due(store, now=10)["gave_up"] == 1
    assert deliver_due(store, now=10_000) == {"delivered": 0, "failed": 0, "gave_up": 0}
    audit = store.audit_entries(event="notification")
    assert [(e["status"], e["error"]) for e in audit] == [
        ("failed", "webhook unreachable: ConnectionRefusedError"),
        ("gave_up", "webhook unreachable: ConnectionRefusedError"),
    ]
    assert "secret-token" not in json.dumps([audit, deliveries(store)], default=str)


def test_the_same_event_is_queued_once_per_recipient_and_scopes_pick_recipients(store, webhook):
    rows = [
        hook_row(notification_id="everyone"),
        hook_row(notification_id="finance", scope="owner", scope_id="team:finance-data"),
        hook_row(notification_id="orders", scope="pipeline", scope_id="orders_etl"),
        hook_row(notification_id="web", scope="owner", scope_id="team:web"),
        hook_row(notification_id="only_sla", events=["sla_missed"]),
        hook_row(notification_id="muted", enabled=False),
    ]
    store.upsert({"notifications": rows})
    assert enqueue(store, rows, [FAILED, FAILED]) == 3
    assert enqueue(store, rows, [FAILED]) == 0  # seen before: a restarted sensor queues nothing again
    assert deliver_due(store, budget_sec=0)["delivered"] == 0  # out of time: all wait for the next tick
    assert deliver_due(store)["delivered"] == 3
    assert sorted(d["notification_id"] for d in deliveries(store)) == ["everyone", "finance", "orders"]
    assert len(webhook.received) == 3


def test_sns_publishes_to_the_topic(store, s3_endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_SNS", s3_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", s3_endpoint)
    sns, sqs = boto3.client("sns"), boto3.client("sqs")
    topic = sns.create_topic(Name="medallion-alerts")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="alerts-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    row = Notification(
        notification_id="ops_sns", events=["run_failed"], channel="sns", params={"topic_arn": topic}
    )
    store.upsert({"notifications": [row]})
    enqueue(store, [row], [FAILED])
    assert deliver_due(store)["delivered"] == 1

    (received,) = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=5)["Messages"]
    envelope = json.loads(received["Body"])
    assert envelope["TopicArn"] == topic and envelope["Subject"] == "[medallion] run failed: orders_etl"
    assert json.loads(envelope["Message"]) == FAILED.as_dict()


class Inbox:
    def __init__(self):
        self.envelopes = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 — aiosmtpd's hook name
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"


def test_email_reaches_the_smtp_server(store):
    inbox = Inbox()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    smtp = Controller(inbox, hostname="127.0.0.1", port=port)
    smtp.start()
    try:
        row = Notification(
            notification_id="ops_mail",
            events=["run_failed"],
            channel="email",
            params={
                "host": "127.0.0.1",
                "port": port,
                "starttls": False,
                "sender": "medallion@example.com",
                "recipients": ["oncall@example.com"],
            },
        )
        store.upsert({"notifications": [row]})
        enqueue(store, [row], [FAILED])
        assert deliver_due(store)["delivered"] == 1
    finally:
        smtp.stop()
    (envelope,) = inbox.envelopes
    assert envelope.mail_from == "medallion@example.com" and envelope.rcpt_tos == ["oncall@example.com"]
    email = message_from_bytes(envelope.content)
    assert email["Subject"] == "[medallion] run failed: orders_etl"
    assert (
        email.get_payload(decode=True)
        .decode()
        .startswith("run r1 of orders_etl failed: bronze__orders: boom")
    )


def test_a_hanging_channel_costs_one_attempt_per_tick_and_never_holds_up_other_rows(
    store, webhook, monkeypatch
):
    down = Webhook(statuses=[503, 503, 503])
    monkeypatch.setenv("DOWN_HOOK_URL", down.url)
    try:
        rows = [
            hook_row(notification_id="down", params={"url_env": "DOWN_HOOK_URL"}, backoff_sec=0),
            hook_row(notification_id="up"),
        ]
        store.upsert({"notifications": rows})
        hostile = Message(
            event="run_failed",
            key="run:r2",
            summary="<!channel> boom & <https://evil|click>",
            pipeline_id="orders_etl",
        )
        enqueue(store, rows, [FAILED, hostile], now=0)
        assert deliver_due(store, now=0) == {"delivered": 2, "failed": 1, "gave_up": 0}
        assert len(down.received) == 1  # its second message waits for the next tick
        assert deliver_due(store, now=1) == {"delivered": 0, "failed": 1, "gave_up": 0}
    finally:
        down.close()
    assert sorted(r["body"]["text"] for r in webhook.received) == [
        "[medallion] run failed: orders_etl\n&lt;!channel&gt; boom &amp; &lt;https://evil|click&gt;",
        "[medallion] run failed: orders_etl\nrun r1 of orders_etl failed: bronze__orders: boom",
    ]


def test_outbox_sla_judgement_and_status_on_a_postgresql_catalog(pg_database, webhook):
    from datetime import datetime, timedelta

    from medallion_assets.catalog.models import Pipeline, Sla, Source, Stage, Target
    from medallion_assets.control.monitoring.alerts import audit_messages, sla_messages
    from medallion_assets.control.monitoring.status import pipeline_status

    store = CatalogStore(pg_database)
    store.migrate()
    row = hook_row(events=["sla_missed", "stage_halted"])
    store.upsert(
        {
            "pipelines": [
                Pipeline(pipeline_id="orders_etl", owner="team:finance-data", sla=Sla(max_stale_minutes=60))
            ],
            "sources": [
                Source(
                    source_id="orders_raw",
                    s3_path="s3://b/orders/",
                    file_format="csv",
                    columns={"id": "string"},
                )
            ],
            "targets": [Target(target_id="bronze_orders", layer="bronze")],
            "stages": [
                Stage(
                    pipeline_id="orders_etl",
                    stage_order=1,
                    stage_name="ingest",
                    input_id="orders_raw",
                    target_id="bronze_orders",
                )
            ],
            "notifications": [row],
        }
    )
    two_hours_ago = datetime.now(UTC) - timedelta(hours=2)
    store.record_audit(
        run_id="r1",
        pipeline_id="orders_etl",
        stage_name="ingest",
        dataset="bronze_orders",
        event="stage",
        status="success",
        rows_read=10,
        rows_written=10,
        created_at=two_hours_ago,
    )
    store.record_audit(
        run_id="r2",
        pipeline_id="orders_etl",
        stage_name="ingest",
        dataset="bronze_orders",
        event="stage",
        status="halted",
        error="pipeline orders_etl disabled by ops: maintenance",
    )
    snapshot = store.snapshot()
    halts, last_id = audit_messages(store, snapshot, 0)
    messages = halts + sla_messages(store, snapshot)
    assert [m.event for m in messages] == ["stage_halted", "sla_missed"]
    assert enqueue(store, [row], messages) == 2 and enqueue(store, [row], messages) == 0
    assert deliver_due(store) == {"delivered": 2, "failed": 0, "gave_up": 0}
    assert [r["body"]["text"].splitlines()[0] for r in webhook.received] == [
        "[medallion] stage halted: bronze_orders",
        "[medallion] sla missed: bronze_orders",
    ]
    (orders,) = pipeline_status(store)["pipelines"].values()
    assert orders["last_run"]["status"] == "halted" and orders["freshness"][0]["state"] == "stale"
