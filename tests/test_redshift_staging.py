"""Gold staged for Redshift by Spark's executors: one parquet object per partition under the load's prefix,
COPYed from there, then deleted; no row passes through the loading process."""

from __future__ import annotations

import io

import boto3
import pyarrow.parquet as pq
import pytest

from medallion_assets.engine.stage import staged_on_executors
from medallion_assets.storage.warehouse import StagedParquet, WarehouseError, warehouse_from_url
from tests.test_warehouse import batch, content, redshift_url

ROWS = [(i, ("FR", "DE", "JP")[i % 3], i / 4) for i in range(1, 301)]


def staged_rows(bucket: str, prefix: str) -> tuple[list[str], list[tuple]]:
    s3 = boto3.client("s3")
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    rows = [
        tuple(row.values())
        for key in keys
        for row in pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read())).to_pylist()
    ]
    return keys, sorted(rows)


def test_executors_stage_one_part_per_partition_and_a_retry_replaces_its_part(spark, bucket):
    frame = spark.createDataFrame(batch(*ROWS)).repartition(3)
    prefix = f"s3://{bucket}/staging/gold.daily/load-1/"
    for attempt in (1, 2):  # the second stands for a retried job: same partitions, same names
        staged = staged_on_executors(frame, prefix)
        keys, rows = staged_rows(bucket, "staging/gold.daily/load-1/")
        assert keys == [f"staging/gold.daily/load-1/part-{n:05d}.parquet" for n in range(3)], attempt
        assert rows == ROWS
        assert (staged.num_rows, staged.prefix) == (300, prefix)
        assert staged.nbytes == sum(
            item["Size"]
            for item in boto3.client("s3").list_objects_v2(
                Bucket=bucket, Prefix="staging/gold.daily/load-1/"
            )["Contents"]
        )


def test_an_empty_frame_stages_nothing(spark, bucket):
    assert staged_on_executors(spark.createDataFrame(batch()), f"s3://{bucket}/staging/t/x/") is None
    assert boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix="staging/")["KeyCount"] == 0


def test_redshift_copies_the_staged_prefix_in_its_transaction_and_deletes_it(
    spark, pg_url, pg_schema, bucket
):
    table = f"{pg_schema}.daily"
    with warehouse_from_url(pg_url) as postgres:
        postgres.load(table, batch((1, "FR", 1.0)), "replace")
    with warehouse_from_url(redshift_url(pg_url, bucket)) as redshift:
        prefix = redshift.staging_prefix(table)
        assert prefix.startswith(f"s3://{bucket}/staging/{table}/") and prefix != redshift.staging_prefix(
            table
        )
        staged = staged_on_executors(spark.createDataFrame(batch(*ROWS)).repartition(2), prefix)
        assert len(staged_rows(bucket, prefix.removeprefix(f"s3://{bucket}/"))[0]) == 2
        # PostgreSQL refuses Redshift's COPY ... IAM_ROLE ... FORMAT AS PARQUET: the transaction rolls back.
        with pytest.raises(WarehouseError, match=f"loading {table} failed.*IAM_ROLE"):
            redshift.load(table, staged, "merge", ["id"])
        assert content(redshift, table) == [(1, "FR", 1.0)]
    assert boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix="staging/")["KeyCount"] == 0


def test_a_warehouse_that_does_not_copy_from_s3_refuses_staged_parquet(pg_url, pg_schema):
    staged = StagedParquet("s3://b/staging/t/x/", batch().schema, 10, 100)
    with warehouse_from_url(pg_url) as postgres:
        with pytest.raises(
            ValueError, match="PostgresWarehouse cannot COPY parquet staged on S3; pass the rows"
        ):
            postgres.load(f"{pg_schema}.daily", staged, "replace")
