"""What a load takes: a table, a stream of record batches or parquet staged on S3; and the checks of it
that run before any SQL."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import pyarrow as pa

from medallion_assets.naming import check_identifier, split_qualified
from medallion_assets.storage.warehouse.sql import Mode


@dataclass(frozen=True)
class StagedParquet:
    """A batch already staged as parquet objects under an S3 prefix (by Spark's executors): Redshift COPYs
    the prefix, so the rows never pass through the loading process."""

    prefix: str
    schema: pa.Schema
    num_rows: int  # named as pyarrow names them, so that a staged batch is counted like a table
    nbytes: int


Batch: TypeAlias = pa.Table | Iterable[pa.RecordBatch] | StagedParquet


class BatchStream:
    """The batches of one load, each checked against the stream's schema and counted as it goes by.

    The schema is a ``pa.Table``'s or a ``RecordBatchReader``'s own, else the first batch's: an empty
    iterable without a ``schema`` has none, so it is refused.
    """

    _batches: Iterator[pa.RecordBatch]

    def __init__(self, table: str, data: Batch) -> None:
        self.table, self.data, self.rows = table, data, 0
        if isinstance(data, StagedParquet):
            self.schema, self.rows, self._batches = data.schema, data.num_rows, iter(())
            return
        if isinstance(data, pa.Table):
            self.schema, self._batches = data.schema, iter(data.to_batches())
            return
        self._batches = iter(data)
        schema = getattr(data, "schema", None)
        if schema is None:
            first = next(self._batches, None)
            if first is None:
                raise ValueError(
                    f"load into {table}: the stream of record batches is empty, so it has no schema; "
                    "pass a pyarrow.RecordBatchReader (it carries one) or a pyarrow.Table"
                )
            schema, self._batches = first.schema, itertools.chain([first], self._batches)
        self.schema = schema

    @property
    def in_memory(self) -> bool:
        """Whether the whole batch is one ``pa.Table`` at hand (``data``), rather than a stream."""
        return isinstance(self.data, pa.Table)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for number, batch in enumerate(self._batches, start=1):
            if not batch.schema.equals(self.schema):
                raise ValueError(
                    f"load into {self.table}: record batch {number} has the schema "
                    f"{batch.schema.to_string(show_schema_metadata=False)!r}, not the stream's "
                    f"{self.schema.to_string(show_schema_metadata=False)!r}"
                )
            self.rows += batch.num_rows
            yield batch


def check_batch(
    table: str, schema: pa.Schema, mode: Mode, keys: Sequence[str], delete_flag: str | None = None
) -> None:
    """Refuse, before any SQL runs, a load whose names are no plain identifiers, whose keys no columns, or
    whose delete flag is not the last column of a merge, a boolean."""
    split_qualified(table)
    if mode not in ("replace", "merge"):
        raise ValueError(f"load into {table}: mode must be 'replace' or 'merge', not {mode!r}")
    names = [check_identifier(name, f"column of {table}") for name in schema.names]
    if not names or len(set(names)) != len(names):
        raise ValueError(f"load into {table}: the batch needs at least one column and unique column names")
    for key in keys:
        check_identifier(key, f"key of {table}")
    if mode == "replace":
        if delete_flag is not None:
            raise ValueError(f"load into {table}: a delete flag needs mode 'merge', which deletes by keys")
        return
    if not keys:
        raise ValueError(f"merge into {table} needs keys: the columns that identify a row")
    missing = [key for key in keys if key not in names]
    if missing:
        raise ValueError(f"merge into {table}: keys {missing} are not columns of the batch ({names})")
    if delete_flag is not None and (names[-1] != delete_flag or not pa.types.is_boolean(schema.types[-1])):
        raise ValueError(
            f"merge into {table}: the delete flag {delete_flag} must be the batch's last column, a boolean"
        )


def check_keys(table: str, keys: Sequence[str], rows: int, distinct_keys: int, *non_null: int) -> None:
    """Refuse a merge whose keys hold nulls or repeat, from counts of the whole batch.

    A null key never matches, and two rows with one key are ambiguous, so either would leave duplicates
    behind. The counts are the rows, the distinct keys and the non-null values of each key column, in
    ``keys``' order: ``arrow_key_counts`` of a table in memory, or ``key_check_sql`` of a stream once staged.
    """
    nullable = [key for key, count in zip(keys, non_null) if count != rows]
    if nullable:
        raise ValueError(f"merge into {table}: key columns {nullable} hold nulls")
    if distinct_keys != rows:
        raise ValueError(f"merge into {table}: several rows of the batch share the same keys {list(keys)}")


def arrow_key_counts(data: pa.Table, keys: Sequence[str]) -> tuple[int, ...]:
    """The counts ``check_keys`` reads, of a table in memory."""
    distinct_keys = data.group_by(list(keys)).aggregate([]).num_rows
    return data.num_rows, distinct_keys, *(data.num_rows - data.column(key).null_count for key in keys)
