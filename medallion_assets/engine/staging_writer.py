"""What Spark executors run to stage a gold table for Redshift's COPY: each partition becomes one parquet
object under the load's S3 prefix, written through boto3.

Written by the executors, so no row passes through the Dagster process, and through boto3 rather than
Spark's own writer, which would need the s3a connector (hadoop-aws and the AWS SDK jars) on every cluster.
Shipped to executors by value, like raw_reader: a cluster needs pyarrow and boto3, not Medallion.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

# A function, not the module: cloudpickle ships it by value, where a module would be imported by name on an
# executor that has no Medallion installed.
from medallion_assets.engine.raw_reader import s3_client

PARTS_SCHEMA = "url string, rows bigint, nbytes bigint"


def parts_task(
    prefix: str, arrow_schema: pa.Schema, endpoint_url: str | None
) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    """The function each task runs over its partition: write it as `part-<partition>.parquet` under `prefix`.

    The name comes from the partition, not the attempt, so a task that is retried replaces its own part
    instead of adding a second copy of its rows.
    """

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        buffer, rows = io.BytesIO(), 0
        # Redshift's TIMESTAMP holds microseconds, and COPY reads parquet timestamps at that unit.
        with pq.ParquetWriter(
            buffer, arrow_schema, coerce_timestamps="us", allow_truncated_timestamps=True
        ) as out:
            for batch in batches:
                out.write_batch(batch)
                rows += batch.num_rows
        if not rows:
            return
        bucket, _, key = prefix.removeprefix("s3://").partition("/")
        context = TaskContext.get()
        assert context is not None, "a Spark task always runs with its context"
        key = f"{key}part-{context.partitionId():05d}.parquet"
        body = buffer.getvalue()
        s3_client(endpoint_url).put_object(Bucket=bucket, Key=key, Body=body)
        yield pa.RecordBatch.from_pydict(
            {"url": [f"s3://{bucket}/{key}"], "rows": [rows], "nbytes": [len(body)]}
        )

    return write
