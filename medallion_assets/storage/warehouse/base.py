"""The load every warehouse runs, its checks and its one transaction; adapters say how to connect and copy."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from medallion_assets.naming import (
    InvalidIdentifier,
    check_identifier_length,
    quote_qualified,
    split_qualified,
)
from medallion_assets.storage.warehouse.batches import (
    Batch,
    BatchStream,
    StagedParquet,
    arrow_key_counts,
    check_batch,
    check_keys,
)
from medallion_assets.storage.warehouse.column_types import column_definitions, columns_to_add
from medallion_assets.storage.warehouse.errors import (
    LeftoverStagingTable,
    WarehouseConnectionLost,
    WarehouseError,
)
from medallion_assets.storage.warehouse.sql import (
    Dialect,
    Mode,
    columns_sql,
    load_statements,
    staging_table,
    table_exists_sql,
    take_statements,
)


@dataclass(frozen=True)
class LoadResult:
    """What one load did: the table ("schema.table"), the rows in the batch, the rows in the table after."""

    table: str
    rows_loaded: int
    rows_in_table: int


class Warehouse(ABC):
    """A SQL warehouse that gold tables are loaded into and read from, one transaction per load.

    Subclasses say how to connect, how to run a transaction and how a batch reaches the warehouse; the
    load itself (its checks and its statements) is the same everywhere.
    """

    dialect: ClassVar[Dialect]
    # Longer names are cut short by the warehouse (PostgreSQL) or refused (Redshift): checked before any SQL.
    max_identifier_bytes: ClassVar[int | None] = None
    _errors: ClassVar[tuple[type[Exception], ...]]
    _secrets: tuple[str, ...] = ()
    _where: str

    def load(
        self,
        table: str,
        data: Batch,
        mode: Mode,
        keys: Sequence[str] = (),
        *,
        evolve: bool = False,
        delete_flag: str | None = None,
    ) -> LoadResult:
        """Load ``data`` into ``table`` ("schema.table" or "table"), creating schema and table if missing.

        ``data`` is a ``pa.Table``, a ``pa.RecordBatchReader`` or any iterable of record batches sharing one
        schema (the first batch's, so a plain iterable must not be empty); a stream is consumed once, so a
        retry needs a new one.
        ``replace`` makes the table's content exactly ``data``; ``merge`` replaces the rows whose ``keys``
        match a row of ``data`` and inserts the others. Columns the table lacks raise SchemaDrift, unless
        ``evolve`` adds them (nullable); a changed type or a missing NOT NULL column raises
        BreakingSchemaChange.
        With ``delete_flag`` (a merge only), the batch's last column is that boolean, which is no column of
        the table: a row flagged true deletes the table's row of its keys and is not inserted, so one load
        applies upserts and deletes together.

        Raises InvalidIdentifier or ValueError when the names or the batch are unusable, before touching the
        warehouse for a table; keys that repeat across a stream are found in the staging table (ValueError
        too, after the rollback). Raises WarehouseError when the warehouse refuses the load, and
        WarehouseConnectionLost when the connection dies; either way the table is left as it was.
        """
        if isinstance(data, StagedParquet) and self.staging_prefix(table) is None:
            raise ValueError(
                f"load into {table}: {type(self).__name__} cannot COPY parquet staged on S3; "
                "pass the rows instead"
            )
        # A lone string is one key, not a sequence of one-letter keys.
        keys = (keys,) if isinstance(keys, str) else tuple(keys)
        stream = BatchStream(table, data)
        staging = [staging_table(table).rsplit(".", 1)[-1]] if mode == "merge" else []
        self._check_lengths(table, *stream.schema.names, *staging)
        check_batch(table, stream.schema, mode, keys, delete_flag)
        if mode == "merge" and stream.in_memory:
            # The whole batch is at hand: its keys are checked before any SQL runs.
            check_keys(table, keys, *arrow_key_counts(stream.data, keys))
        with self._reported(f"loading {table}", undone="load"):
            rows_in_table = self._load(
                table, stream, mode, keys if mode == "merge" else (), evolve, delete_flag
            )
        return LoadResult(table, stream.rows, rows_in_table)

    def take(self, table: str, source: str, rows: int) -> LoadResult | None:
        """Make ``table``'s rows exactly those of ``source``, a table of this warehouse holding ``rows`` rows,
        in one transaction: the rows never leave the warehouse (an environment's table published). None, with
        nothing changed, when ``table`` does not exist, lacks one of ``source``'s columns (a load creates and
        evolves it) or ``source`` does not hold ``rows`` rows (it is not the version meant)."""
        self._check_lengths(table)
        self._check_lengths(source)
        with self._reported(f"taking {source} into {table}", undone="load"), self._transaction() as cursor:
            columns = [row[0] for row in _fetch(cursor, columns_sql(source))]
            present = {row[0] for row in _fetch(cursor, columns_sql(table))}
            if not columns or not present.issuperset(columns):
                return None
            ((held,),) = _fetch(cursor, f"SELECT COUNT(*) FROM {quote_qualified(source)}")
            if held != rows:
                return None
            for sql in take_statements(table, source, columns, self.dialect):
                cursor.execute(sql)
            ((rows_in_table,),) = _fetch(cursor, f"SELECT COUNT(*) FROM {quote_qualified(table)}")
            return LoadResult(table, rows, rows_in_table)

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Rows of one SQL statement as dicts (none for a statement that returns no rows), committed."""
        with self._reported("query", undone="statement"), self._transaction() as cursor:
            cursor.execute(sql)
            if cursor.description is None:
                return []
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    def has_table(self, table: str) -> bool:
        """Whether ``table`` exists."""
        self._check_lengths(table)
        return bool(self.query(table_exists_sql(table)))

    def drop_staging(self, table: str, targets: Collection[str] = ()) -> str:
        """Drop the staging table a crashed merge into ``table`` left behind, if any; return its name.

        Only that exact staging table can be dropped this way, never the target or any other table: its name
        ends with the staging suffix, is not one of ``targets`` (every warehouse table the catalog loads), and
        fits the warehouse's identifier length, so the warehouse cannot cut it down to the target's name.
        """
        staging = staging_table(table)
        self._check_lengths(table, staging.rsplit(".", 1)[-1])
        if staging.lower() in {target.lower() for target in targets}:
            raise InvalidIdentifier(f"{staging} is a target table, not a staging table; it is not dropped")
        self.query(f"DROP TABLE IF EXISTS {quote_qualified(staging)}")
        return staging

    def staging_prefix(self, table: str) -> str | None:
        """Where Spark's executors may stage ``table``'s rows as parquet for this warehouse to COPY, or None
        when the rows reach the warehouse through this process."""
        return None

    def _check_lengths(self, table: str, *names: str) -> None:
        for name in [*split_qualified(table), *names]:
            check_identifier_length(name, self.max_identifier_bytes, self.dialect)

    def reconnect(self) -> None:
        """Replace the connection, lost or not, with a new one opened with the same settings."""
        self.close()
        self._connection = self._connected()

    def close(self) -> None:
        """Release the connection."""
        self._connection.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._where!r})"

    def _load(
        self,
        table: str,
        stream: BatchStream,
        mode: Mode,
        keys: tuple[str, ...],
        evolve: bool,
        delete_flag: str | None,
    ) -> int:
        """Run the checked load in one transaction; return the rows in the table after it."""
        # The table's columns: the batch's, but the delete flag (its last), which only the staging table has.
        schema = stream.schema.remove(len(stream.schema) - 1) if delete_flag else stream.schema
        columns = column_definitions(schema, self.dialect)
        with self._copy_source(table, stream) as source, self._transaction() as cursor:
            existing = _fetch(cursor, columns_sql(table))
            added = columns_to_add(table, existing, schema, self.dialect, evolve)
            if mode == "merge" and _fetch(cursor, table_exists_sql(staging_table(table))):
                raise LeftoverStagingTable(table)
            # A stream's keys were never all in memory at once: they are checked once staged.
            plan = load_statements(
                table, columns, keys, mode, source, self.dialect, added, not stream.in_memory, delete_flag
            )
            for sql in plan.prepare:
                cursor.execute(sql)
            self._copy(cursor, plan.copy, stream)
            if plan.key_check:
                (counts,) = _fetch(cursor, plan.key_check)
                check_keys(table, keys, *counts)
            for sql in plan.finish:
                cursor.execute(sql)
            rows_in_table: int
            ((rows_in_table,),) = _fetch(cursor, f"SELECT COUNT(*) FROM {quote_qualified(table)}")
            return rows_in_table

    def _connected(self) -> Any:
        with self._reported(f"connecting to {self._where}"):
            return self._connect()

    @abstractmethod
    def _connect(self) -> Any:
        """A new connection."""

    @abstractmethod
    def _transaction(self) -> Any:
        """A context manager: a cursor whose statements commit together at its end, or roll back on error."""

    @abstractmethod
    def _lost(self, error: Exception) -> bool:
        """Whether ``error`` means the connection is gone."""

    @abstractmethod
    def _copy_source(self, table: str, stream: BatchStream) -> Any:
        """A context manager: what the COPY of ``load_statements`` reads from."""

    @abstractmethod
    def _copy(self, cursor: Any, sql: str, stream: BatchStream) -> None:
        """Run the plan's copy statement, feeding it the stream's batches if it reads them from the client."""

    @contextmanager
    def _reported(self, action: str, undone: str | None = None) -> Iterator[None]:
        """Turn the driver's errors into WarehouseError, with every secret masked.

        ``undone`` names what a lost connection rolled back; without it, a lost connection is no special case.
        """
        kind: type[WarehouseError]
        try:
            yield
        except self._errors as error:
            if undone and self._lost(error):
                message = (
                    f"{action} failed: lost the connection to {self._where}; the {undone} was rolled back. "
                    "Call reconnect() and run it again"
                )
                kind = WarehouseConnectionLost
            else:
                message = f"{action} failed: {type(error).__name__}: {_describe(error)}"
                kind = WarehouseError
            for secret in self._secrets:
                message = message.replace(secret, "***")
            # Not chained: the driver's exception may carry the statement, and with it the IAM role.
            raise kind(message) from None


def _fetch(cursor: Any, sql: str) -> list[tuple[Any, ...]]:
    cursor.execute(sql)
    rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


def _describe(error: Exception) -> str:
    diag = getattr(error, "diag", None)
    # psycopg2's full message quotes the failing statement (with the IAM role); the server's own words do not.
    if diag is not None and diag.message_primary:
        return " ".join(filter(None, (diag.message_primary, diag.message_detail)))
    return str(error)
