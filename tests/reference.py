"""Expected gold results computed straight from the raw files, independently of the framework.

Written from the definitions of the gold datasets in plain Python and sharing no code with the pipeline, so
that a pipeline result equal to these is evidence, not a tautology. Only the object access is shared, which
lets the same functions read raw data from S3 or from a local folder.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

import pyarrow.parquet as pq

from medallion_assets.storage.objects import list_objects, read_bytes

_CENTS = Decimal("0.01")


def expected_daily_user_events(raw_url: str) -> list[dict]:
    """Events per UTC day of event_ts and distinct users, from ``{raw_url}/user_events/``.

    Lines that are not a JSON object and records whose event_ts does not parse are dropped, then records are
    deduplicated on event_id (the first one kept). Rows: event_date, total_events, unique_users.
    """
    seen_ids = set()
    totals: dict[date, int] = defaultdict(int)
    users: dict[date, set] = defaultdict(set)
    for line in _lines(f"{raw_url.rstrip('/')}/user_events/"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        day = _utc_date(record.get("event_ts"))
        if day is None or record.get("event_id") in seen_ids:
            continue
        seen_ids.add(record.get("event_id"))
        totals[day] += 1
        # As COUNT(DISTINCT user_id): a missing user is not a user.
        if record.get("user_id") is not None:
            users[day].add(record["user_id"])
    return [
        {"event_date": day, "total_events": totals[day], "unique_users": len(users[day])}
        for day in sorted(totals)
    ]


def expected_daily_revenue(raw_url: str) -> list[dict]:
    """Revenue and order count per (UTC day of order_ts, customer country), from orders and customers.

    Order rows need the header's number of fields, an amount that is a finite decimal (rounded half up to
    cents, as a DECIMAL(…, 2) column holds it) and an order_ts that parses; they are then deduplicated on
    order_id (the first in file order kept) and inner-joined with the customers. Rows: order_date, country,
    revenue (Decimal, 2 places), orders.
    """
    root = raw_url.rstrip("/")
    country_of = {}
    for info in list_objects(f"{root}/customers/"):
        table = pq.read_table(io.BytesIO(read_bytes(info.url)), columns=["customer_id", "country"])
        country_of.update(zip(table.column("customer_id").to_pylist(), table.column("country").to_pylist()))

    seen_ids = set()
    revenue: dict[tuple[date, str], Decimal] = defaultdict(Decimal)
    orders: dict[tuple[date, str], int] = defaultdict(int)
    for info in list_objects(f"{root}/orders/"):
        rows = csv.reader(io.StringIO(_content(info.url).decode("utf-8"), newline=""))
        header = next(rows, None)
        if header is None:
            continue
        for row in rows:
            if len(row) != len(header):
                continue
            record = dict(zip(header, row))
            amount = _decimal(record["amount"])
            day = _utc_date(record["order_ts"])
            if amount is None or day is None or record["order_id"] in seen_ids:
                continue
            seen_ids.add(record["order_id"])
            country = country_of.get(record["customer_id"])
            if country is None:
                continue
            revenue[day, country] += amount
            orders[day, country] += 1
    return [
        {
            "order_date": day,
            "country": country,
            "revenue": revenue[day, country],
            "orders": orders[day, country],
        }
        for day, country in sorted(revenue)
    ]


def _content(url: str) -> bytes:
    """An object's bytes, decompressed when its name says gzip."""
    data = read_bytes(url)
    return gzip.decompress(data) if url.endswith(".gz") else data


def _lines(url: str) -> Iterator[str]:
    for info in list_objects(url):
        for raw_line in _content(info.url).split(b"\n"):
            try:
                yield raw_line.decode("utf-8").rstrip("\r")
            except UnicodeDecodeError:
                # Not text, so not a JSON object either.
                continue


def _utc_date(value: object) -> date | None:
    """The UTC date of an ISO-8601 timestamp; one without an offset is taken as UTC. None if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.date()


def _decimal(text: str) -> Decimal | None:
    try:
        amount = Decimal(text)
    except InvalidOperation:
        return None
    return amount.quantize(_CENTS, rounding=ROUND_HALF_UP) if amount.is_finite() else None
