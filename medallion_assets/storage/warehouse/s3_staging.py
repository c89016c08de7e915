"""Batches staged as parquet under an S3 prefix, for Redshift's COPY to read."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.parquet as pq

from medallion_assets.paths import path_under
from medallion_assets.storage.objects import delete_object, list_objects, write_bytes


@contextmanager
def staged_parquet(data: pa.Table | pa.RecordBatchReader, s3_staging: str, table: str) -> Iterator[str]:
    """Upload ``data`` as one parquet object under ``s3_staging``; yield its s3:// URI, delete it on exit.

    ``data`` is a table or anything with a ``schema`` that yields record batches; they are written one by one.
    """
    s3_uri = path_under(s3_staging, table, f"{uuid.uuid4().hex}.parquet")
    buffer = io.BytesIO()
    # Redshift's TIMESTAMP holds microseconds, and COPY reads parquet timestamps at that unit.
    with pq.ParquetWriter(
        buffer, data.schema, coerce_timestamps="us", allow_truncated_timestamps=True
    ) as writer:
        for batch in data.to_batches() if isinstance(data, pa.Table) else data:
            writer.write_batch(batch)
    write_bytes(s3_uri, buffer.getvalue())
    try:
        yield s3_uri
    finally:
        delete_object(s3_uri)


def delete_staged(prefix: str) -> None:
    """Delete every object staged under ``prefix`` (by Spark's executors, for one load)."""
    for staged in list_objects(prefix):
        delete_object(staged.url)
