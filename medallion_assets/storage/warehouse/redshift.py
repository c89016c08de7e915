"""Amazon Redshift, loaded from parquet staged on S3."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg2
from botocore.exceptions import BotoCoreError, ClientError

from medallion_assets.errors import SourceNotFound
from medallion_assets.paths import path_under
from medallion_assets.storage.warehouse.batches import BatchStream, StagedParquet
from medallion_assets.storage.warehouse.postgres import PostgresWarehouse
from medallion_assets.storage.warehouse.s3_staging import delete_staged, staged_parquet
from medallion_assets.storage.warehouse.sql import redshift_copy_source


class RedshiftWarehouse(PostgresWarehouse):
    """Amazon Redshift: the batch is staged as parquet under an S3 prefix, then COPYed with an IAM role.

    Staged objects are deleted after the load, whether it succeeded or not.
    """

    dialect = "redshift"
    max_identifier_bytes = 127
    _errors = (psycopg2.Error, BotoCoreError, ClientError, SourceNotFound)

    def __init__(self, s3_staging: str, iam_role: str, **connect_kwargs: Any) -> None:
        """``s3_staging`` is an ``s3://bucket/prefix/``; the rest are psycopg2's keyword arguments."""
        if not s3_staging.startswith("s3://"):
            raise ValueError("the Redshift staging location must be an s3://bucket/prefix/ URI")
        self._s3_staging = s3_staging
        self._iam_role = iam_role
        super().__init__(**connect_kwargs)
        self._secrets = (*self._secrets, iam_role)

    def staging_prefix(self, table: str) -> str | None:
        """A new prefix, of this load alone, for executors to stage ``table``'s parquet under."""
        return path_under(self._s3_staging, table, uuid.uuid4().hex) + "/"

    @contextmanager
    def _copy_source(self, table: str, stream: BatchStream) -> Iterator[str]:
        if isinstance(stream.data, StagedParquet):
            try:
                yield redshift_copy_source(stream.data.prefix, self._iam_role)
            finally:
                delete_staged(stream.data.prefix)
            return
        with staged_parquet(stream, self._s3_staging, table) as s3_uri:
            yield redshift_copy_source(s3_uri, self._iam_role)

    def _copy(self, cursor: psycopg2.extensions.cursor, sql: str, stream: BatchStream) -> None:
        cursor.execute(sql)
