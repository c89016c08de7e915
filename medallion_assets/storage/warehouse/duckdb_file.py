"""The embedded DuckDB warehouse, the default."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import duckdb

from medallion_assets.storage.warehouse.base import Warehouse
from medallion_assets.storage.warehouse.batches import BatchStream

# The name under which DuckDB sees each Arrow batch while it is inserted.
BATCH_VIEW = "medallion_batch"
# DuckDB's Python module keeps one database per file and process, which every connection to the file shares.
# A thread opening the file while another opens or closes it can be refused ("Unique file handle conflict:
# ... is already attached": 97 of 1,200 opens by 8 threads, duckdb 2.0), as the availability probes of
# several gold tables were. Opening is one thread at a time; open connections still work in parallel.
_OPENING = threading.Lock()


class DuckDBWarehouse(Warehouse):
    """An embedded DuckDB file: each Arrow batch is registered as a view and inserted with SQL.

    ``reconnect()`` reopens the file; an in-memory database (":memory:") starts empty again.
    """

    dialect = "duckdb"
    _errors = (duckdb.Error,)

    def __init__(self, path: str) -> None:
        self._where = path
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._connection = self._connected()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        with _OPENING:
            return duckdb.connect(self._where)

    @contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        # DuckDB's connection is its own cursor: a second cursor would be a second connection and transaction.
        connection = self._connection
        connection.begin()
        try:
            yield connection
        except BaseException:
            connection.rollback()
            raise
        connection.commit()

    def _lost(self, error: Exception) -> bool:
        return isinstance(error, duckdb.ConnectionException)

    def _copy_source(self, table: str, stream: BatchStream) -> nullcontext[str]:
        return nullcontext(BATCH_VIEW)

    def _copy(self, cursor: duckdb.DuckDBPyConnection, sql: str, stream: BatchStream) -> None:
        for batch in stream:
            cursor.register(BATCH_VIEW, batch)
            try:
                cursor.execute(sql)
            finally:
                cursor.unregister(BATCH_VIEW)
