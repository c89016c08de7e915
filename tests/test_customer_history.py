"""The seed's change feed example (metadata_seed/customer_changes_etl.yaml) through a real Dagster instance,
on a hand-written raw set: the CRM's change events become every version of each customer in silver (SCD type
2), and gold joins each order of orders_etl to the version of its customer valid when it was placed. A second
export brings a late event and a delete: silver merges them incrementally, and gold follows."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime
from decimal import Decimal

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from medallion_assets.storage.objects import write_bytes
from tests.conftest import RAW, Medallion

ORDERS = """order_id,customer_id,order_ts,amount
o1,c1,2026-11-01T10:00:00Z,10.00
o2,c1,2026-11-02T10:00:00Z,20.00
o3,c1,2026-11-03T10:00:00Z,30.00
o4,c2,2026-11-01T09:00:00Z,5.00
o5,c2,2026-11-01T15:00:00Z,2.50
o6,c3,2026-11-01T08:00:00Z,7.00
o7,c3,2026-11-03T11:00:00Z,8.00
o8,c3,2026-11-05T12:00:00Z,9.00
"""
FIRST_EXPORT = """\
{"customer_id": "c1", "op": "I", "changed_at": "2026-10-01T00:00:00Z", "segment": "standard", "email": "c1@mail.example"}
{"customer_id": "c2", "op": "I", "changed_at": "2026-10-15T00:00:00Z", "segment": "plus", "email": "c2@mail.example"}
{"customer_id": "c3", "op": "I", "changed_at": "2026-11-02T00:00:00Z", "segment": "standard", "email": "c3@mail.example"}
{"customer_id": "c2", "op": "U", "changed_at": "2026-11-02T12:00:00Z", "segment": "plus", "email": "c2@work.example"}
{"customer_id": "c1", "op": "U", "changed_at": "2026-11-03T00:00:00Z", "segment": "premium", "email": "c1@mail.example"}
"""  # noqa: E501 (one event a line, as the CRM exports them)
# Late: c1 was plus from 2 November, before the change to premium the first export held; c3 is deleted.
SECOND_EXPORT = """\
{"customer_id": "c1", "op": "U", "changed_at": "2026-11-02T00:00:00Z", "segment": "plus", "email": "c1@mail.example"}
{"customer_id": "c3", "op": "D", "changed_at": "2026-11-04T00:00:00Z"}
"""  # noqa: E501


HISTORY_COLUMNS = (
    "customer_id",
    "changed_at",
    "segment",
    "email",
    "__valid_from",
    "__valid_to",
    "__is_current",
)


def at(moment: str) -> datetime:
    """A moment of 2026 in UTC: "11-02" is midnight of 2 November, "11-02 12:00" its noon."""
    return datetime.fromisoformat(f"2026-{moment}").replace(tzinfo=UTC)


@pytest.fixture
def installation(tmp_path, s3_endpoint, spark) -> Medallion:
    """The seed installation, its bucket holding the orders, their customers and the first export."""
    bucket = boto3.resource("s3").Bucket("medallion-raw")
    if bucket.creation_date is None:
        bucket.create()
    bucket.objects.all().delete()
    write_bytes(f"{RAW}/orders/part-00000.csv", ORDERS.encode())
    customers = pa.table(
        {
            "customer_id": ["c1", "c2", "c3"],
            "name": ["Ada Kim", "Ben Silva", "Chloe Novak"],
            "country": ["FR", "DE", "US"],
            "signup_date": [date(2025, 1, 1)] * 3,
        }
    )
    parquet = io.BytesIO()
    pq.write_table(customers, parquet)
    write_bytes(f"{RAW}/customers/customers.parquet", parquet.getvalue())
    write_bytes(f"{RAW}/customer_changes/part-00000.jsonl", FIRST_EXPORT.encode())
    return Medallion.seeded(tmp_path)


def history(installation: Medallion) -> list[tuple]:
    """silver.customer_history's rows as tuples of HISTORY_COLUMNS, its columns (`op` is kept out)."""
    rows = installation.rows("silver.customer_history")
    assert {tuple(row) for row in rows} == {HISTORY_COLUMNS}
    return sorted(tuple(row.values()) for row in rows)


def revenue_by_segment(installation: Medallion) -> list[tuple]:
    return [
        (r["order_date"], r["segment"], r["revenue"], r["orders"])
        for r in installation.gold("analytics.daily_revenue_by_segment")
    ]


def test_a_change_feed_becomes_a_customer_history_that_gold_joins_at_each_orders_time(installation):
    assert installation.run("orders_etl").status == "success"
    first = installation.run("customer_changes_etl")
    assert first.status == "success", first
    assert [(a.key, a.status, a.mode) for a in first.assets] == [
        ("bronze/customer_changes", "success", None),
        ("silver/customer_history", "success", "full"),
        ("gold/daily_revenue_by_segment", "success", "full"),
    ]
    # c2's new email corrects its version in place: it keeps its start, with the last event's values.
    assert history(installation) == [
        ("c1", at("10-01"), "standard", "c1@mail.example", at("10-01"), at("11-03"), False),
        ("c1", at("11-03"), "premium", "c1@mail.example", at("11-03"), None, True),
        ("c2", at("11-02 12:00"), "plus", "c2@work.example", at("10-15"), None, True),
        ("c3", at("11-02"), "standard", "c3@mail.example", at("11-02"), None, True),
    ]
    # o6 was placed before c3's first event: no version was valid then.
    assert revenue_by_segment(installation) == [
        (date(2026, 11, 1), "plus", Decimal("7.50"), 2),
        (date(2026, 11, 1), "standard", Decimal("10.00"), 1),
        (date(2026, 11, 1), "unknown", Decimal("7.00"), 1),
        (date(2026, 11, 2), "standard", Decimal("20.00"), 1),
        (date(2026, 11, 3), "premium", Decimal("30.00"), 1),
        (date(2026, 11, 3), "standard", Decimal("8.00"), 1),
        (date(2026, 11, 5), "standard", Decimal("9.00"), 1),
    ]

    write_bytes(f"{RAW}/customer_changes/part-00001.jsonl", SECOND_EXPORT.encode())
    second = installation.run("customer_changes_etl")
    assert second.status == "success", second
    bronze, silver, gold = second.assets
    assert (bronze.rows_read, bronze.rows) == (2, 2)
    assert silver.mode == "incremental" and silver.why.startswith(
        "reads the rows bronze appended after snapshot"
    )
    assert silver.rows == 4  # every version of the two customers the events touched, c1 and c3
    scd2_checks = [c for c in silver.checks if c["name"].startswith("scd2_")]
    assert scd2_checks == [
        {"name": "scd2_one_current_row", "passed": True, "severity": "error"},
        {"name": "scd2_no_overlapping_validity", "passed": True, "severity": "error"},
        {"name": "scd2_unique_valid_from", "passed": True, "severity": "error"},
    ]
    assert gold.mode == "full"
    # The late event makes a version of its own between c1's first two; the delete closes c3's only one.
    assert history(installation) == [
        ("c1", at("10-01"), "standard", "c1@mail.example", at("10-01"), at("11-02"), False),
        ("c1", at("11-02"), "plus", "c1@mail.example", at("11-02"), at("11-03"), False),
        ("c1", at("11-03"), "premium", "c1@mail.example", at("11-03"), None, True),
        ("c2", at("11-02 12:00"), "plus", "c2@work.example", at("10-15"), None, True),
        ("c3", at("11-02"), "standard", "c3@mail.example", at("11-02"), at("11-04"), False),
    ]
    # o2 now meets c1's plus version; o8, placed after c3's deletion, meets none.
    assert revenue_by_segment(installation) == [
        (date(2026, 11, 1), "plus", Decimal("7.50"), 2),
        (date(2026, 11, 1), "standard", Decimal("10.00"), 1),
        (date(2026, 11, 1), "unknown", Decimal("7.00"), 1),
        (date(2026, 11, 2), "plus", Decimal("20.00"), 1),
        (date(2026, 11, 3), "premium", Decimal("30.00"), 1),
        (date(2026, 11, 3), "standard", Decimal("8.00"), 1),
        (date(2026, 11, 5), "unknown", Decimal("9.00"), 1),
    ]
