"""Paths: whatever an object key or id holds, nothing is written outside the root it belongs under."""

from __future__ import annotations

import gzip

import boto3
import pytest

from medallion_assets.naming import InvalidIdentifier
from medallion_assets.paths import UnsafePath, path_under
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.root import Lake

ESCAPES = [
    ("../../etc/passwd", "holds the segment '..'"),
    ("a/../../b", "holds the segment '..'"),
    ("/root/.ssh/authorized_keys", "is absolute"),
    ("..\\..\\x", "holds a backslash"),
    ("a\x00.jsonl", "holds a NUL byte"),
    ("%2e%2e/%2e%2e/x", "holds the segment '..'"),
    ("%252e%252e/x", "holds the segment '..'"),  # decoded twice
    ("a%2f..%2f..%2fb", "holds an encoded '/'"),
    ("a//b", "holds an empty segment ('//')"),
    ("./x", "holds the segment '.'"),
    ("x\n", "holds a control character"),
    ("", "is empty"),
]


@pytest.mark.parametrize("root", ["/srv/lake", "file:///srv/lake", "s3://lake-bucket/prefix"])
@pytest.mark.parametrize("part, problem", ESCAPES)
def test_a_part_that_could_leave_its_root_is_refused(root, part, problem):
    with pytest.raises(UnsafePath) as refused:
        path_under(root, "_quarantine", part)
    assert str(refused.value) == f"path part {part!r} under {root!r} {problem}"


def test_plain_parts_stay_under_their_root():
    assert (
        path_under("s3://lake/p/", "objects", "raw-bucket", "user_events/2024/a.jsonl")
        == "s3://lake/p/objects/raw-bucket/user_events/2024/a.jsonl"
    )
    assert path_under("/srv/lake", "silver", "user_events") == "/srv/lake/silver/user_events"


@pytest.mark.parametrize("dataset", ["../etc", "a/b", "x\n", "%2e%2e"])
def test_lake_tables_and_quarantine_paths_take_only_plain_dataset_ids(dataset):
    for build in (
        lambda: TableRef("lake", "silver", dataset),
        lambda: TableRef("lake", dataset, "user_events"),
        lambda: Lake.resolve("/srv/lake").quarantine_path(dataset),
    ):
        with pytest.raises(InvalidIdentifier, match="is not a plain name"):
            build()


def test_a_landing_object_with_a_climbing_key_is_not_copied_out_of_quarantine(medallion, tmp_path):
    """The attack: an unreadable object whose key climbs six folders, out of the lake into the
    installation."""
    key = "user_events/" + "../" * 6 + "escaped.jsonl"
    corrupt = gzip.compress(b'{"event_id": "e1"}\n')  # not UTF-8 text: the corrupt-object rule quarantines it
    boto3.client("s3").put_object(Bucket="medallion-raw", Key=key, Body=corrupt)
    before = {path for path in tmp_path.rglob("*") if "lake" not in path.relative_to(tmp_path).parts}

    report = medallion.run("user_events_etl")

    assert report.status == "failed"
    [gave_up] = [e for e in medallion.store.audit_entries(stage_name="bronze_ingest", event="healing")]
    url = f"s3://medallion-raw/{key}"
    root = f"{tmp_path}/lake/_quarantine/bronze_user_events"
    assert (gave_up["status"], gave_up["details"]["detail"]) == (
        "give_up",
        f"{url} cannot be kept in quarantine: path part {key!r} under {root!r} holds the segment '..'",
    )
    assert not (tmp_path / "escaped.jsonl").exists()
    after = {path for path in tmp_path.rglob("*") if "lake" not in path.relative_to(tmp_path).parts}
    assert after - before <= {tmp_path / "catalog.db-journal"}  # nothing new beside the lake
    assert not list((tmp_path / "lake").rglob("escaped.jsonl"))
    bookmarks = {b["object_key"] for b in medallion.store.table_rows("ingestion_bookmarks")}
    assert url not in bookmarks  # not marked handled: the object stays in front of an operator
