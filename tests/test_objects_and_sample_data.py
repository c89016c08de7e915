"""Object access on a real S3 API (moto's server on loopback) and on local folders; sample data; reference."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from decimal import Decimal
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import EndpointConnectionError
from moto.server import ThreadedMotoServer

from medallion_assets.errors import SourceNotFound
from medallion_assets.sample_data import write_sample_data
from medallion_assets.storage import objects
from medallion_assets.storage.objects import (
    ObjectInfo,
    any_object,
    copy_object,
    delete_object,
    list_objects,
    read_bytes,
    write_bytes,
)
from tests.reference import expected_daily_revenue, expected_daily_user_events
from tests.tiers import refuse_in_unit_test


@pytest.fixture(scope="session")
def s3_endpoint():
    """URL of an S3 API server on loopback; the AWS environment points boto3 at it for the session."""
    refuse_in_unit_test("s3_endpoint")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ENDPOINT_URL_S3", url)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        patch.delenv("AWS_PROFILE", raising=False)
        yield url
    server.stop()


@pytest.fixture
def bucket(s3_endpoint):
    """A new, empty bucket for one test."""
    name = f"medallion-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
def raw_root(request, tmp_path):
    """A root url for raw data, once a local folder and once an S3 prefix."""
    if request.param == "local":
        return str(tmp_path / "raw")
    return f"s3://{request.getfixturevalue('bucket')}/raw"


def test_s3_write_list_read_copy_delete(bucket):
    write_bytes(f"s3://{bucket}/raw/b.jsonl", b"bb")
    write_bytes(f"s3://{bucket}/raw/a/x.jsonl", b"xxx")
    write_bytes(f"s3://{bucket}/raw_old/y.jsonl", b"y")
    boto3.client("s3").put_object(Bucket=bucket, Key="raw/empty-folder/", Body=b"")

    expected = [
        ObjectInfo(f"s3://{bucket}/raw/a/x.jsonl", 3, hashlib.md5(b"xxx").hexdigest()),
        ObjectInfo(f"s3://{bucket}/raw/b.jsonl", 2, hashlib.md5(b"bb").hexdigest()),
    ]
    assert list_objects(f"s3://{bucket}/raw") == expected
    assert list_objects(f"s3://{bucket}/raw/") == expected
    assert list_objects(f"s3://{bucket}/raw/b.jsonl") == expected[1:]
    assert read_bytes(f"s3://{bucket}/raw/a/x.jsonl") == b"xxx"

    copy_object(f"s3://{bucket}/raw/a/x.jsonl", f"s3://{bucket}/copies/x.jsonl")
    assert read_bytes(f"s3://{bucket}/copies/x.jsonl") == b"xxx"

    delete_object(f"s3://{bucket}/copies/x.jsonl")
    delete_object(f"s3://{bucket}/copies/x.jsonl")
    with pytest.raises(SourceNotFound):
        list_objects(f"s3://{bucket}/copies/")


def test_s3_listing_reads_every_page(bucket):
    client = boto3.client("s3")
    keys = [f"many/{n:04d}.json" for n in range(1_005)]
    # More than one page of 1,000 keys; written in parallel only to keep the test short.
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=b"{}"), keys))
    assert [info.url for info in list_objects(f"s3://{bucket}/many/")] == [
        f"s3://{bucket}/{key}" for key in keys
    ]
    # Whether a source answers takes one request, not a listing of everything it holds: a probe listing a
    # large source whole could outlast its timeout and judge it down.
    requests: list[dict] = []

    def count(params: dict, **_) -> None:
        requests.append(params)

    events = objects._s3().meta.events
    events.register("before-parameter-build.s3.ListObjectsV2", count)
    try:
        assert any_object(f"s3://{bucket}/many").url == f"s3://{bucket}/many/0000.json"
    finally:
        events.unregister("before-parameter-build.s3.ListObjectsV2", count)
    assert [r["Prefix"] for r in requests] == ["many"]


def test_any_object_is_one_that_list_objects_lists(bucket, tmp_path):
    # Listed before the folder's own keys: a neighbour whose name starts the same, and a folder marker.
    write_bytes(f"s3://{bucket}/raw-2024/old.jsonl", b"old")
    boto3.client("s3").put_object(Bucket=bucket, Key="raw/", Body=b"")
    write_bytes(f"s3://{bucket}/raw/b.jsonl", b"bb")
    assert any_object(f"s3://{bucket}/raw") == list_objects(f"s3://{bucket}/raw")[0]
    assert any_object(f"s3://{bucket}/raw/b.jsonl").url == f"s3://{bucket}/raw/b.jsonl"
    write_bytes(str(tmp_path / "raw" / "deep" / "a.jsonl"), b"a")
    assert any_object(f"file://{tmp_path}/raw") == list_objects(str(tmp_path / "raw"))[0]


def test_local_write_list_read_copy_delete(tmp_path):
    root = tmp_path / "raw"
    write_bytes(str(root / "b.jsonl"), b"bb")
    write_bytes(f"file://{root}/a/deep/x.jsonl", b"xxx")
    write_bytes(str(tmp_path / "raw_old" / "y.jsonl"), b"y")

    listed = list_objects(f"file://{root}")
    assert [(info.url, info.size) for info in listed] == [
        (f"{root}/a/deep/x.jsonl", 3),
        (f"{root}/b.jsonl", 2),
    ]
    stat = (root / "b.jsonl").stat()
    assert listed[1].etag == f"{stat.st_size}-{stat.st_mtime_ns}"
    assert list_objects(str(root / "b.jsonl")) == listed[1:]
    assert read_bytes(f"{root}/a/deep/x.jsonl") == b"xxx"

    write_bytes(str(root / "b.jsonl"), b"bbbb")
    assert list_objects(str(root / "b.jsonl"))[0].etag != listed[1].etag

    copy_object(str(root / "b.jsonl"), f"file://{tmp_path}/copies/b.jsonl")
    assert (tmp_path / "copies" / "b.jsonl").read_bytes() == b"bbbb"

    delete_object(str(tmp_path / "copies" / "b.jsonl"))
    delete_object(str(tmp_path / "copies" / "b.jsonl"))
    assert not (tmp_path / "copies" / "b.jsonl").exists()


def test_copy_between_s3_and_local(bucket, tmp_path):
    write_bytes(str(tmp_path / "in.csv"), b"a,b\n1,2\n")
    copy_object(str(tmp_path / "in.csv"), f"s3://{bucket}/landed/in.csv")
    copy_object(f"s3://{bucket}/landed/in.csv", str(tmp_path / "back" / "in.csv"))
    assert (tmp_path / "back" / "in.csv").read_bytes() == b"a,b\n1,2\n"


def test_source_not_found_messages(bucket, tmp_path):
    def message(call, *args) -> str:
        with pytest.raises(SourceNotFound) as raised:
            call(*args)
        return str(raised.value)

    (tmp_path / "empty").mkdir()
    assert message(list_objects, "s3://medallion-missing/user_events/", "user_events_raw") == (
        "source user_events_raw: s3://medallion-missing/user_events/ does not exist "
        "(bucket medallion-missing not found)"
    )
    assert message(list_objects, f"s3://{bucket}/user_events/", "user_events_raw") == (
        f"source user_events_raw: s3://{bucket}/user_events/ holds no objects"
    )
    assert (
        message(list_objects, f"s3://{bucket}/user_events/") == f"s3://{bucket}/user_events/ holds no objects"
    )
    assert message(list_objects, str(tmp_path / "empty"), "orders_raw") == (
        f"source orders_raw: {tmp_path}/empty holds no objects"
    )
    assert message(list_objects, f"file://{tmp_path}/missing", "orders_raw") == (
        f"source orders_raw: {tmp_path}/missing does not exist"
    )
    missing_or_empty = ("s3://medallion-missing/events/", f"s3://{bucket}/events/", str(tmp_path / "empty"))
    for url in missing_or_empty:
        assert message(any_object, url, "a_source") == message(list_objects, url, "a_source")
    assert message(read_bytes, f"s3://{bucket}/no.json") == f"s3://{bucket}/no.json does not exist"
    assert message(read_bytes, "s3://medallion-missing/no.json") == (
        "s3://medallion-missing/no.json does not exist (bucket medallion-missing not found)"
    )
    assert message(read_bytes, str(tmp_path / "no.json")) == f"{tmp_path}/no.json does not exist"
    assert message(copy_object, f"s3://{bucket}/no.json", f"s3://{bucket}/to.json") == (
        f"s3://{bucket}/no.json does not exist"
    )
    write_bytes(f"s3://{bucket}/yes.json", b"{}")
    assert message(copy_object, f"s3://{bucket}/yes.json", "s3://medallion-missing/to.json") == (
        "s3://medallion-missing/to.json does not exist (bucket medallion-missing not found)"
    )


def test_client_follows_a_changed_endpoint(bucket, monkeypatch, s3_endpoint):
    write_bytes(f"s3://{bucket}/x", b"x")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(EndpointConnectionError):
        read_bytes(f"s3://{bucket}/x")

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    assert read_bytes(f"s3://{bucket}/x") == b"x"


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()
    }


def test_sample_data_is_deterministic(tmp_path):
    first = write_sample_data(str(tmp_path / "a"), 2_000, seed=7, lines_per_file=150)
    second = write_sample_data(str(tmp_path / "b"), 2_000, seed=7, lines_per_file=150)
    other = write_sample_data(str(tmp_path / "c"), 2_000, seed=8, lines_per_file=150)

    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    assert sorted(first.objects) == [str(tmp_path / "a" / name) for name in _tree(tmp_path / "a")]
    assert [url.replace("/a/", "/b/") for url in first.objects] == list(second.objects)
    assert len(first.objects) == 14 + 3 + 1 + 2  # events, orders, customers, customer changes
    for name, content in _tree(tmp_path / "c").items():
        assert content != _tree(tmp_path / "a")[name], name
    assert other.event_lines == first.event_lines


def test_sample_data_on_s3_is_the_same_bytes_as_local(bucket, tmp_path):
    write_sample_data(f"s3://{bucket}/sample/", 500, seed=3)
    write_sample_data(str(tmp_path), 500, seed=3)
    prefix = f"s3://{bucket}/sample/"
    from_s3 = {info.url.removeprefix(prefix): read_bytes(info.url) for info in list_objects(prefix)}
    assert from_s3 == _tree(tmp_path)


def test_sample_data_needs_a_few_rows(tmp_path):
    with pytest.raises(ValueError, match="rows must be at least 10, got 9"):
        write_sample_data(str(tmp_path), 9)


_GOOD_EVENT = re.compile(
    r'\{"event_id": "e\d{9}", "user_id": "u\d{6}", "event_type": "(view|click|purchase|signup)", '
    r'"event_ts": "(2026-11-0[1-7]T([01]\d|2[0-3]):[0-5]\d:[0-5]\dZ|not-a-date)", "value": (null|\d+\.\d\d)\}'
)
_GOOD_ORDER = re.compile(r"o\d{9},c\d{5},2026-11-0[1-7]T([01]\d|2[0-3]):[0-5]\d:[0-5]\dZ,(\d+\.\d\d|abc)")


def test_sample_data_summary_counts_what_is_in_the_files(tmp_path):
    summary = write_sample_data(str(tmp_path), 3_000, lines_per_file=400)

    malformed = bad_ts = duplicates = copies_across_files = 0
    first_seen = {}
    users = set()
    event_files = sorted((tmp_path / "user_events").iterdir())
    for number, path in enumerate(event_files):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                malformed += 1
                continue
            assert _GOOD_EVENT.fullmatch(line), line
            if record["event_id"] in first_seen:
                original_line, original_file = first_seen[record["event_id"]]
                assert line == original_line
                duplicates += 1
                copies_across_files += original_file != number
                continue
            first_seen[record["event_id"]] = (line, number)
            users.add(record["user_id"])
            bad_ts += record["event_ts"] == "not-a-date"
    assert len(event_files) == 8
    assert (malformed, bad_ts, duplicates) == (15, 6, 30)
    assert (summary.malformed_events, summary.bad_timestamp_events, summary.duplicate_events) == (15, 6, 30)
    assert len(first_seen) + malformed + duplicates == summary.event_lines == 3_000
    assert copies_across_files > 0
    assert 100 < len(users) <= 150

    customers = pq.read_table(tmp_path / "customers" / "customers.parquet")
    assert customers.schema == pa.schema(
        [
            ("customer_id", pa.string()),
            ("name", pa.string()),
            ("country", pa.string()),
            ("signup_date", pa.date32()),
        ]
    )
    assert customers.num_rows == summary.customer_rows == 30
    assert set(customers.column("country").to_pylist()) <= {"US", "DE", "FR", "GB", "JP", "BR"}
    assert customers.column("customer_id").to_pylist() == [f"c{n:05d}" for n in range(30)]

    wrong_fields = bad_amount = duplicate_ids = data_rows = 0
    order_ids = set()
    for path in sorted((tmp_path / "orders").iterdir()):
        rows = list(csv.reader(io.StringIO(path.read_text())))
        assert rows[0] == ["order_id", "customer_id", "order_ts", "amount"]
        for row in rows[1:]:
            data_rows += 1
            if len(row) != 4:
                wrong_fields += 1
                continue
            assert _GOOD_ORDER.fullmatch(",".join(row)), row
            assert row[1] in set(customers.column("customer_id").to_pylist())
            duplicate_ids += row[0] in order_ids
            bad_amount += row[3] == "abc"
            order_ids.add(row[0])
    assert (wrong_fields, bad_amount, duplicate_ids) == (3, 2, 6)
    assert (summary.wrong_field_count_orders, summary.bad_amount_orders, summary.duplicate_orders) == (
        3,
        2,
        6,
    )
    assert data_rows == summary.order_lines == 600


def test_sample_customer_changes_hold_updates_a_late_event_and_a_delete(tmp_path):
    summary = write_sample_data(str(tmp_path), 2_000)
    first, second = (
        [json.loads(line) for line in (tmp_path / "customer_changes" / name).read_text().splitlines()]
        for name in ("part-00000.jsonl", "part-00001.jsonl")
    )
    assert len(first) + len(second) == summary.customer_change_events

    # The first export, in time order: every customer inserted before the orders' week, then its updates of
    # the week, each the customer's whole row with one column changed.
    assert [e["changed_at"] for e in first] == sorted(e["changed_at"] for e in first)
    inserts = [e for e in first if e["op"] == "I"]
    assert sorted(e["customer_id"] for e in inserts) == [f"c{n:05d}" for n in range(summary.customer_rows)]
    assert max(e["changed_at"] for e in inserts) < "2026-11-01"
    rows, changed = {}, []
    for event in first:
        if event["op"] == "U":
            assert "2026-11-01" <= event["changed_at"] < "2026-11-08"
            [column] = [c for c in ("segment", "email") if event[c] != rows[event["customer_id"]][c]]
            changed.append(column)
        rows[event["customer_id"]] = event
    assert sorted(changed) == ["email"] * 2 + ["segment"] * 5  # a tenth and a quarter of 20 customers

    # The second: an update placed between its customer's insert and segment change, with a segment of
    # neither, and the deletion of another customer the day after the week.
    late, deletion = second
    inserted, segment_change = [e for e in first if e["customer_id"] == late["customer_id"]]
    assert (inserted["op"], segment_change["op"], late["op"]) == ("I", "U", "U")
    assert inserted["changed_at"] < late["changed_at"] < segment_change["changed_at"]
    assert late["segment"] not in (inserted["segment"], segment_change["segment"])
    assert late["email"] == inserted["email"]
    assert deletion["customer_id"] != late["customer_id"] and deletion["customer_id"] in rows
    assert (deletion["op"], deletion["segment"], deletion["email"]) == ("D", None, None)
    assert deletion["changed_at"].startswith("2026-11-08")


def test_reference_agrees_with_the_sample_summary(tmp_path):
    summary = write_sample_data(str(tmp_path), 2_000)
    daily_events = expected_daily_user_events(str(tmp_path))
    daily_revenue = expected_daily_revenue(str(tmp_path))

    assert [row["event_date"] for row in daily_events] == [date(2026, 11, day) for day in range(1, 8)]
    assert sum(row["total_events"] for row in daily_events) == (
        summary.event_lines
        - summary.malformed_events
        - summary.bad_timestamp_events
        - summary.duplicate_events
    )
    assert sum(row["orders"] for row in daily_revenue) == (
        summary.order_lines
        - summary.wrong_field_count_orders
        - summary.bad_amount_orders
        - summary.duplicate_orders
    )


_HAND_WRITTEN_RAW = {
    "user_events/part-00000.jsonl": [
        '{"event_id": "e1", "user_id": "u1", "event_type": "view", "event_ts": "2026-11-01T10:00:00Z", '
        '"value": null}',
        '{"event_id": "e2", "user_id": "u2", "event_type": "click", "event_ts": "2026-11-01T23:59:59Z", '
        '"value": 1.5}',
        # 01:30 UTC on the next day.
        '{"event_id": "e3", "user_id": "u1", "event_type": "view", "event_ts": "2026-11-01T23:30:00-02:00"}',
        '{"event_id": "e4", "user_id"',
        "#### partial upload ####",
    ],
    "user_events/part-00001.jsonl": [
        '{"event_id": "e2", "user_id": "u2", "event_type": "click", "event_ts": "2026-11-01T23:59:59Z", '
        '"value": 1.5}',
        '{"event_id": "e5", "user_id": "u3", "event_type": "purchase", "event_ts": "not-a-date", "value": '
        "9.99}",
        '{"event_id": "e6", "user_id": "u2", "event_type": "purchase", "event_ts": "2026-11-02T08:00:00Z"}',
        '{"event_id": "e7", "user_id": "u2", "event_type": "view", "event_ts": "2026-11-02T09:00:00Z"}',
        "[1, 2, 3]",
    ],
    "orders/part-00000.csv": [
        "order_id,customer_id,order_ts,amount",
        "o1,c1,2026-11-01T09:00:00Z,10.00",
        "o2,c2,2026-11-01T10:00:00Z,5.25",
        "o3,c1,2026-11-01T11:00:00Z,abc",
        "o4,c3,2026-11-02T12:00:00Z",
        "o2,c2,2026-11-01T10:00:00Z,5.25",
    ],
    "orders/part-00001.csv": [
        "order_id,customer_id,order_ts,amount",
        "o5,c1,2026-11-02T01:00:00Z,7.10",
        # A later row under a known order_id loses, even with other content.
        "o1,c2,2026-11-02T01:00:00Z,99.99",
        # No such customer: the inner join drops it.
        "o6,c9,2026-11-02T02:00:00Z,3.00",
        "o7,c3,2026-11-02T03:00:00Z,1.05",
        "o8,c2,2026-11-02T04:00:00Z,not-a-date",
        "o9,c2,not-a-date,4.00",
    ],
}


def test_reference_on_a_hand_written_raw_set(raw_root):
    for name, lines in _HAND_WRITTEN_RAW.items():
        write_bytes(f"{raw_root}/{name}", ("\n".join(lines) + "\n").encode())
    customers = pa.table(
        {"customer_id": ["c1", "c2", "c3"], "name": ["A", "B", "C"], "country": ["US", "DE", "US"]}
    )
    buffer = io.BytesIO()
    pq.write_table(customers, buffer)
    write_bytes(f"{raw_root}/customers/customers.parquet", buffer.getvalue())

    assert expected_daily_user_events(raw_root) == [
        {"event_date": date(2026, 11, 1), "total_events": 2, "unique_users": 2},
        {"event_date": date(2026, 11, 2), "total_events": 3, "unique_users": 2},
    ]
    assert expected_daily_revenue(raw_root) == [
        {"order_date": date(2026, 11, 1), "country": "DE", "revenue": Decimal("5.25"), "orders": 1},
        {"order_date": date(2026, 11, 1), "country": "US", "revenue": Decimal("10.00"), "orders": 1},
        {"order_date": date(2026, 11, 2), "country": "US", "revenue": Decimal("8.15"), "orders": 2},
    ]
    assert {row["revenue"].as_tuple().exponent for row in expected_daily_revenue(raw_root)} == {-2}
