"""PostgreSQL, the Redshift-protocol stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, ClassVar

import psycopg2

from medallion_assets.storage.warehouse.base import Warehouse
from medallion_assets.storage.warehouse.batches import BatchStream
from medallion_assets.storage.warehouse.csv_stream import csv_stream
from medallion_assets.storage.warehouse.sql import Dialect


class PostgresWarehouse(Warehouse):
    """PostgreSQL through psycopg2: the batch travels as CSV through ``COPY ... FROM STDIN``."""

    dialect: ClassVar[Dialect] = "postgres"
    max_identifier_bytes = 63  # NAMEDATALEN - 1
    _errors: ClassVar[tuple[type[Exception], ...]] = (psycopg2.Error,)

    def __init__(self, **connect_kwargs: Any) -> None:
        """Connect with psycopg2's keyword arguments (host, port, user, password, dbname, sslmode, ...)."""
        self._where = "{user}@{host}:{port}/{dbname}".format_map(
            {name: connect_kwargs.get(name, "") for name in ("user", "host", "port", "dbname")}
        )
        password = connect_kwargs.get("password")
        self._secrets = (str(password),) if password else ()
        self._connect_kwargs = connect_kwargs
        self._connection = self._connected()

    def _connect(self) -> psycopg2.extensions.connection:
        connection: psycopg2.extensions.connection = psycopg2.connect(**self._connect_kwargs)
        return connection

    @contextmanager
    def _transaction(self) -> Iterator[psycopg2.extensions.cursor]:
        with self._connection, self._connection.cursor() as cursor:
            yield cursor

    def _lost(self, error: Exception) -> bool:
        # A terminated backend surfaces as OperationalError, or as InterfaceError from the rollback that
        # follows; either way psycopg2 has marked the connection closed.
        return isinstance(error, (psycopg2.OperationalError, psycopg2.InterfaceError)) and bool(
            self._connection.closed
        )

    def _copy_source(self, table: str, stream: BatchStream) -> AbstractContextManager[str]:
        return nullcontext("STDIN WITH (FORMAT csv)")

    def _copy(self, cursor: psycopg2.extensions.cursor, sql: str, stream: BatchStream) -> None:
        csv = csv_stream(stream)
        try:
            cursor.copy_expert(sql, csv)
        except psycopg2.Error:
            # psycopg2 reports a failing read() as a cancelled COPY; the stream's own error says what failed.
            if csv.failure is not None:
                raise csv.failure from None
            raise
