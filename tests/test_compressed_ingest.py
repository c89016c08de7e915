"""Compressed raw objects, read by Spark executors: gzip, bzip2 and zstd, by ending or declared; corrupt
ones."""

from __future__ import annotations

import bz2
import gzip

import boto3
import pytest
import zstandard
from pyspark.sql import functions as F

from medallion_assets.engine.ingest import _write_rejected
from medallion_assets.errors import CorruptSourceObject, SourceSchemaDrift
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables
from medallion_assets.storage.objects import list_objects
from tests.reference import expected_daily_user_events
from tests.test_engine import run_ingest, source

LINES = b'{"id": "a", "n": 1}\n{"id": "b", "n": 2}\nnot json\n\n{"id": "c", "n": 3}\n'
COMPRESSORS = {"gz": gzip.compress, "bz2": bz2.compress, "zst": zstandard.ZstdCompressor().compress}


@pytest.mark.parametrize("ending", sorted(COMPRESSORS))
def test_compressed_jsonl_is_read_by_its_ending_with_file_and_line(spark, tmp_path, ending):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / f"e.jsonl.{ending}").write_bytes(COMPRESSORS[ending](LINES))
    result, bronze, quarantine = run_ingest(
        spark, tmp_path, source(tmp_path, "jsonl", {"id": "string", "n": "int"})
    )
    assert [(r["id"], r["n"], r["_source_line"]) for r in bronze] == [("a", 1, 1), ("b", 2, 2), ("c", 3, 5)]
    assert [(r["_source_line"], r["raw"]) for r in quarantine] == [(3, "not json")]
    assert (result.rows_read, result.rows_written, result.rows_quarantined) == (4, 3, 1)


def test_declared_compression_wins_over_the_ending(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "export_0001").write_bytes(gzip.compress(b"id,n\nx,1\ny,2\n"))
    src = source(tmp_path, "csv", {"id": "string", "n": "int"}).model_copy(update={"compression": "gzip"})
    result, bronze, _ = run_ingest(spark, tmp_path, src)
    assert [(r["id"], r["n"], r["_source_line"]) for r in bronze] == [("x", 1, 2), ("y", 2, 3)]
    assert result.rows_written == 2


def test_a_line_that_is_not_utf8_is_quarantined_with_that_reason_and_the_rest_ingested(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    head = b"".join(b'{"id": "h%d", "n": %d}\n' % (i, i) for i in range(3000))  # past the head that is probed
    (tmp_path / "raw" / "e.jsonl.gz").write_bytes(
        gzip.compress(head + b'{"id": "\xff\xfe", "n": 1}\n{"id": "z"}\n')
    )
    result, bronze, quarantine = run_ingest(
        spark, tmp_path, source(tmp_path, "jsonl", {"id": "string", "n": "int"})
    )
    assert (result.rows_read, result.rows_written, result.rows_quarantined) == (3002, 3001, 1)
    assert [(r["_source_line"], r["reason"]) for r in quarantine] == [
        (3001, "not UTF-8 text (byte 8 of the line)")
    ]
    assert bronze[-1]["id"] == "z" and bronze[-1]["_source_line"] == 3002


def test_gzip_bytes_that_are_not_gzip_are_an_unreadable_object(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "good.jsonl.gz").write_bytes(gzip.compress(LINES))
    (tmp_path / "raw" / "bad.jsonl.gz").write_bytes(b'{"id": "plain text with a .gz name"}\n')
    with pytest.raises(
        CorruptSourceObject, match=r"object .*/raw/bad\.jsonl\.gz is unreadable: cannot decompress"
    ):
        run_ingest(spark, tmp_path, source(tmp_path, "jsonl", {"id": "string"}))
    assert [path for path in (tmp_path / "bronze").rglob("*") if path.is_file()] == []


def test_a_gzip_cut_short_after_its_head_fails_the_batch_naming_the_object_and_writes_nothing(
    spark, tmp_path
):
    (tmp_path / "raw").mkdir()
    body = b"".join(b'{"id": "r%d", "n": %d}\n' % (i, i) for i in range(200_000))
    whole = gzip.compress(body)
    (tmp_path / "raw" / "cut.jsonl.gz").write_bytes(whole[: len(whole) * 2 // 3])
    with pytest.raises(
        CorruptSourceObject, match=r"object .*/raw/cut\.jsonl\.gz is unreadable: cannot decompress"
    ):
        run_ingest(spark, tmp_path, source(tmp_path, "jsonl", {"id": "string", "n": "int"}))
    assert not list((tmp_path / "bronze").rglob("*.parquet"))


def test_new_fields_in_a_compressed_object_are_drift(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "e.jsonl.zst").write_bytes(COMPRESSORS["zst"](b'{"id": "a", "extra": 1.5}\n'))
    with pytest.raises(SourceSchemaDrift, match=r"has fields not in the catalog: extra \(double\)"):
        run_ingest(spark, tmp_path, source(tmp_path, "jsonl", {"id": "string"}))


def test_gzipped_seed_data_on_s3_flows_to_the_same_gold(medallion, s3_endpoint):
    """The seed's bucket, gzipped: executors fetch the objects through boto3 and gold is what it always
    was."""
    from medallion_assets.sample_data import write_sample_data

    boto3.resource("s3").Bucket("medallion-raw").objects.all().delete()
    summary = write_sample_data("s3://medallion-raw", rows=3000, lines_per_file=1000, gzipped=True)
    assert all(url.endswith((".gz", ".parquet")) for url in summary.objects)
    report = medallion.run("user_events_etl")
    assert report.status == "success", [entry["error"] for entry in medallion.stage_audit("bronze_ingest")]
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events("s3://medallion-raw")
    bronze = medallion.stage_audit("bronze_ingest")[-1]
    assert bronze["rows_read"] == 3000
    assert bronze["rows_written"] + bronze["rows_quarantined"] == 3000
    assert bronze["rows_quarantined"] == summary.malformed_events


def test_a_second_read_that_rejects_other_records_than_the_first_fails_the_batch(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "e.jsonl.gz").write_bytes(gzip.compress(LINES))
    src = source(tmp_path, "jsonl", {"id": "string", "n": "int"})
    objects = list_objects(src.s3_path)
    # The quarantine is written from a second read of the objects holding rejects; as if the first read had
    # counted three rejects where the object holds one.
    with pytest.raises(RuntimeError) as raised:
        _write_rejected(
            LakeTables(spark, Lake.resolve(tmp_path / "lake")),
            src,
            objects,
            3,
            0,
            F.current_timestamp(),
            (TableRef("lake", "bronze", "s_quarantine"), "b1"),
        )
    assert str(raised.value) == (
        "source s changed while it was ingested: 3 records were rejected on the first read of its objects "
        "and 1 on the second; the quarantine holds the second read's"
    )
