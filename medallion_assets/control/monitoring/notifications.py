"""Notifications: events (a failed run, a halt, healing that gave up, a missed SLA…) routed by `notifications`
rows to registered channels, delivered at least once through an outbox.

Metadata never runs code: a row names a channel registered here with `@notification_channel`, and its params
are checked by that channel's pydantic model when the catalog is loaded. Secrets (a webhook URL, an SMTP
password) never live in a row: params name the environment variables that hold them.

Delivery goes through `notification_deliveries`, keyed by a dedup key (the row and the event): an event is
enqueued once however often it is seen, so a restarted sensor never sends twice; a failed send is retried with
doubling waits on later ticks, and every send and failure is audited. A channel that is down delays only its
own messages: runs never wait for notifications (the sensor sends them).
"""

from __future__ import annotations

import json
import os
import re
import smtplib
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from email.message import EmailMessage
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import RowMapping, insert, select, update

from medallion_assets.catalog.models import Notification
from medallion_assets.catalog.schema import audit_log, notification_deliveries
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.registry import registry_problems
from medallion_assets.control.rows import rows_as

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
SEND_TIMEOUT_SEC = 10
# Sending stops for the tick after this long (what is left waits for the next tick), well within the time
# Dagster gives a sensor evaluation (60 s by default).
TICK_BUDGET_SEC = 30


@dataclass(frozen=True)
class Message:
    """One event to tell people about. `key` identifies the event itself (not the recipient)."""

    event: str
    key: str
    summary: str
    pipeline_id: str | None = None
    dataset: str | None = None
    owner: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class DeliveryFailed(Exception):
    """A channel could not deliver. The message is safe to audit: it never holds a secret."""


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _env_name(value: str) -> str:
    if not ENV_NAME.match(value):
        # The value is not repeated: whoever got this wrong may have pasted the secret itself.
        raise ValueError(
            "must be the name of an environment variable (A-Z, 0-9, _) that holds the secret, "
            "never the secret"
        )
    return value


def _secret(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise DeliveryFailed(f"environment variable {name} is not set")
    return value


@dataclass(frozen=True)
class RegisteredChannel:
    name: str
    # Called with params its `params` model validated.
    send: Callable[[Any, Message], None]
    params: type[BaseModel]

    @property
    def description(self) -> str:
        return (self.send.__doc__ or "").strip().splitlines()[0]


CHANNELS: dict[str, RegisteredChannel] = {}


Send = TypeVar("Send", bound=Callable[[Any, Message], None])


def notification_channel(name: str, params: type[BaseModel]) -> Callable[[Send], Send]:
    """Register `send(params, message)` as the channel `name`; it raises DeliveryFailed when it cannot."""

    def register(send: Send) -> Send:
        if name in CHANNELS:
            raise ValueError(f"notification channel {name!r} is registered twice")
        CHANNELS[name] = RegisteredChannel(name, send, params)
        return send

    return register


class SnsParams(Params):
    topic_arn: str = Field(pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$")
    region: str | None = Field(default=None, description="default: the topic ARN's region")


@notification_channel("sns", SnsParams)
def send_sns(params: SnsParams, message: Message) -> None:
    """Amazon SNS: the message as JSON to a topic (credentials and endpoint from boto3's usual
    configuration)."""
    # Imported when sending: checking notification rows at catalog load (and plan) imports this module.
    import boto3
    from botocore.config import Config

    # The outbox retries, with backoff, on later ticks: botocore's own retries would only hold the tick up.
    client = boto3.client(
        "sns",
        region_name=params.region or params.topic_arn.split(":")[3],
        config=Config(
            connect_timeout=SEND_TIMEOUT_SEC, read_timeout=SEND_TIMEOUT_SEC, retries={"total_max_attempts": 1}
        ),
    )
    try:
        client.publish(
            TopicArn=params.topic_arn,
            Subject=_subject(message)[:100],
            Message=json.dumps(message.as_dict(), default=str),
        )
    except Exception as error:  # noqa: BLE001 — botocore's errors name the topic, never a credential
        raise DeliveryFailed(f"SNS publish failed: {type(error).__name__}: {error}") from None


class WebhookParams(Params):
    url_env: str = Field(description="environment variable holding the webhook URL (it embeds a token)")
    _check_env = field_validator("url_env")(lambda cls, value: _env_name(value))


@notification_channel("webhook", WebhookParams)
def send_webhook(params: WebhookParams, message: Message) -> None:
    """A webhook (Slack-compatible): POST {"text": …, "medallion": {the event}} as JSON."""
    body = json.dumps(
        {"text": _slack_escaped(_subject(message) + "\n" + message.summary), "medallion": message.as_dict()},
        default=str,
    ).encode()
    request = urllib.request.Request(
        _secret(params.url_env), data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=SEND_TIMEOUT_SEC) as response:
            response.read()
    except urllib.error.HTTPError as error:
        raise DeliveryFailed(f"webhook answered HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        # The URL (and its token) stays out of the message: only the kind of failure is kept.
        raise DeliveryFailed(
            f"webhook unreachable: {type(getattr(error, 'reason', error)).__name__}"
        ) from None


def _slack_escaped(text: str) -> str:
    """Error text comes from data and files: escaped as Slack asks, so it cannot mention @channel or fake
    links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class EmailParams(Params):
    host: str
    port: int = Field(default=587, ge=1, le=65_535)
    starttls: bool = True
    username: str | None = None
    password_env: str | None = Field(
        default=None, description="environment variable holding the SMTP password"
    )
    sender: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    recipients: list[str] = Field(min_length=1)
    _check_env = field_validator("password_env")(lambda cls, value: value and _env_name(value))

    @field_validator("recipients")
    @classmethod
    def _addresses(cls, recipients: list[str]) -> list[str]:
        bad = [r for r in recipients if not re.match(r"^[^@\s,;<>]+@[^@\s,;<>]+$", r)]
        if bad:
            raise ValueError(f"not email addresses: {', '.join(map(repr, bad))}")
        return recipients


@notification_channel("email", EmailParams)
def send_email(params: EmailParams, message: Message) -> None:
    """Email through SMTP (STARTTLS and login when configured), one message to every recipient."""
    email = EmailMessage()
    email["Subject"], email["From"], email["To"] = (
        _subject(message),
        params.sender,
        ", ".join(params.recipients),
    )
    email.set_content(message.summary + "\n\n" + json.dumps(message.as_dict(), default=str, indent=2))
    try:
        with smtplib.SMTP(params.host, params.port, timeout=SEND_TIMEOUT_SEC) as smtp:
            if params.starttls:
                smtp.starttls()
            if params.username:
                smtp.login(params.username, _secret(params.password_env) if params.password_env else "")
            smtp.send_message(email)
    except (smtplib.SMTPException, OSError) as error:
        raise DeliveryFailed(f"SMTP delivery failed: {type(error).__name__}: {error}") from None


def _subject(message: Message) -> str:
    where = message.dataset or message.pipeline_id or "medallion"
    return f"[medallion] {message.event.replace('_', ' ')}: {where}"


def notification_problems(row: Notification) -> list[str]:
    """Why a row cannot be used: an unknown channel or params its channel refuses ([] when usable)."""
    return registry_problems("channel", row.channel, CHANNELS, row.params)


def check_notifications(snapshot: CatalogSnapshot) -> list[tuple[str, Notification, str, str]]:
    """Loader problems as (table, row, field, message)."""
    problems: list[tuple[str, Notification, str, str]] = []
    for row in rows_as(Notification, snapshot.tables["notifications"].values()):
        for message in notification_problems(row):
            problems.append(
                ("notifications", row, "channel" if message.startswith("unknown") else "params", message)
            )
        if row.scope == "pipeline" and row.scope_id not in snapshot.pipelines:
            problems.append(("notifications", row, "scope_id", f"unknown pipeline {row.scope_id!r}"))
    return problems


def recipients(rows: Iterable[Notification], message: Message) -> list[Notification]:
    """The enabled rows that want this event in this scope."""
    return [
        row
        for row in rows
        if row.enabled
        and message.event in row.events
        and (
            row.scope == "global"
            or (row.scope == "pipeline" and row.scope_id == message.pipeline_id)
            or (row.scope == "owner" and row.scope_id == message.owner)
        )
    ]


def enqueue(
    store: CatalogStore, rows: list[Notification], messages: Iterable[Message], now: float | None = None
) -> int:
    """Put each message in the outbox once per recipient row; an event seen before is not queued again."""
    now = time.time() if now is None else now
    wanted: dict[str, tuple[Notification, Message]] = {}
    for message in messages:  # the first message of a key stands for the event
        for row in recipients(rows, message):
            wanted.setdefault(f"{row.notification_id}|{message.key}", (row, message))
    if not wanted:
        return 0
    with store.engine.begin() as connection:
        known = set(
            connection.execute(
                select(notification_deliveries.c.dedup_key).where(
                    notification_deliveries.c.dedup_key.in_(list(wanted))
                )
            ).scalars()
        )
        fresh = [
            dict(
                dedup_key=key,
                notification_id=row.notification_id,
                event=message.event,
                message=message.as_dict(),
                status="pending",
                attempts=0,
                next_attempt_at=now,
            )
            for key, (row, message) in wanted.items()
            if key not in known
        ]
        if fresh:
            connection.execute(insert(notification_deliveries), fresh)
    return len(fresh)


def deliver_due(
    store: CatalogStore, now: float | None = None, budget_sec: float = TICK_BUDGET_SEC
) -> dict[str, int]:
    """Try the pending deliveries that are due, oldest first, for at most `budget_sec`; returns how many were
    delivered, failed (to retry) or gave up."""
    now = time.time() if now is None else now
    started = time.monotonic()
    rows = {row.notification_id: row for row in rows_as(Notification, store.read_table("notifications"))}
    with store.engine.connect() as connection:
        due = (
            connection.execute(
                select(notification_deliveries)
                .where(
                    notification_deliveries.c.status == "pending",
                    notification_deliveries.c.next_attempt_at <= now,
                )
                .order_by(notification_deliveries.c.created_at, notification_deliveries.c.dedup_key)
            )
            .mappings()
            .all()
        )
    counts = {"delivered": 0, "failed": 0, "gave_up": 0}
    # A row whose channel failed once in this tick is not tried again until the next: a channel that hangs
    # costs one timeout per tick, whatever its backlog, and never holds up the other rows.
    failing: set[str] = set()
    for delivery in due:
        if time.monotonic() - started >= budget_sec:
            break
        if delivery["notification_id"] in failing:
            continue
        row = rows.get(delivery["notification_id"])
        message = Message(**delivery["message"])
        attempts = delivery["attempts"] + 1
        try:
            if row is None:
                raise DeliveryFailed(
                    f"notification {delivery['notification_id']!r} is no longer in the catalog"
                )
            send(row, message)
        except DeliveryFailed as error:
            failing.add(delivery["notification_id"])
            if row is None or attempts >= row.max_attempts:
                status, wait = "gave_up", 0
            else:
                status, wait = "failed", row.backoff_sec * 2 ** (attempts - 1)
            problem: str | None = str(error)
        else:
            status, wait, problem = "delivered", 0, None
        _settle(store, delivery, message, status, attempts, now, wait, problem)
        counts[status] += 1
    return counts


def send(row: Notification, message: Message) -> None:
    """Send through the row's channel now (params checked again: the row may have come by plain SQL)."""
    problems = notification_problems(row)
    if problems:
        raise DeliveryFailed("; ".join(problems))
    channel = CHANNELS[row.channel]
    channel.send(channel.params.model_validate(row.params), message)


def _settle(
    store: CatalogStore,
    delivery: RowMapping,
    message: Message,
    status: str,
    attempts: int,
    now: float,
    wait: float,
    error: str | None,
) -> None:
    """Record an attempt on the delivery and in the audit log, in one transaction."""
    outbox_status = {"failed": "pending"}.get(status, status)
    with store.engine.begin() as connection:
        connection.execute(
            update(notification_deliveries)
            .where(notification_deliveries.c.dedup_key == delivery["dedup_key"])
            .values(status=outbox_status, attempts=attempts, next_attempt_at=now + wait, last_error=error)
        )
        connection.execute(
            insert(audit_log).values(
                pipeline_id=message.pipeline_id,
                dataset=message.dataset,
                event="notification",
                status=status,
                error=error,
                details={
                    "notification_id": delivery["notification_id"],
                    "about": message.event,
                    "dedup_key": delivery["dedup_key"],
                    "attempt": attempts,
                    "retry_in_sec": wait,
                },
            )
        )


def deliveries(store: CatalogStore) -> list[dict[str, Any]]:
    with store.engine.connect() as connection:
        return [
            dict(r)
            for r in connection.execute(
                select(notification_deliveries).order_by(notification_deliveries.c.created_at)
            ).mappings()
        ]
