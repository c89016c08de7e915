"""Arrow types as each warehouse's column types, and what a batch's columns change in an existing table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from medallion_assets.storage.warehouse.errors import BreakingSchemaChange, SchemaDrift
from medallion_assets.storage.warehouse.sql import Dialect

_FIXED_TYPES = {
    pa.int8(): "SMALLINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float32(): "REAL",
    pa.float64(): "DOUBLE PRECISION",
    pa.bool_(): "BOOLEAN",
    pa.date32(): "DATE",
}


# information_schema's spellings of the types sql_type produces (DuckDB's, then PostgreSQL's and Redshift's).
_TYPE_ALIASES = {
    "FLOAT": "REAL",
    "DOUBLE": "DOUBLE PRECISION",
    "VARCHAR": "TEXT",
    "CHARACTER VARYING": "TEXT",
    "TIMESTAMP WITHOUT TIME ZONE": "TIMESTAMP",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMPTZ",
    "NUMERIC": "DECIMAL",
}


def sql_type(arrow_type: pa.DataType, dialect: Dialect) -> str:
    """The column type an Arrow type is stored as in ``dialect``."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        # Redshift's VARCHAR means 256 bytes, 65535 at most. PostgreSQL's and DuckDB's TEXT is unbounded.
        return "VARCHAR(65535)" if dialect == "redshift" else "TEXT"
    if pa.types.is_timestamp(arrow_type):
        return "TIMESTAMPTZ" if arrow_type.tz else "TIMESTAMP"
    if pa.types.is_decimal(arrow_type):
        return f"DECIMAL({arrow_type.precision},{arrow_type.scale})"
    try:
        return _FIXED_TYPES[arrow_type]
    except KeyError:
        raise TypeError(f"Arrow type {arrow_type} has no {dialect} column type") from None


def column_definitions(schema: pa.Schema, dialect: Dialect) -> dict[str, str]:
    """Column name → its SQL type, with NOT NULL where the Arrow field is not nullable."""
    definitions = {}
    for field in schema:
        try:
            definitions[field.name] = sql_type(field.type, dialect) + ("" if field.nullable else " NOT NULL")
        except TypeError as error:
            raise TypeError(f"column {field.name!r}: {error}") from None
    return definitions


def columns_to_add(
    table: str, existing: Sequence[Sequence[Any]], batch: pa.Schema, dialect: Dialect, evolve: bool
) -> dict[str, str]:
    """The batch's columns that ``table`` lacks, name → SQL type, to add as nullable columns.

    ``existing`` are the rows of ``columns_sql``: none when the table does not exist yet, which then lacks
    nothing. Raises BreakingSchemaChange when a batch column's type differs from the table's, or when a NOT
    NULL column without a default is missing from the batch; then SchemaDrift when columns are new and
    ``evolve`` is false.
    """
    table_types = {row[0]: _table_type(*row[1:4]) for row in existing}
    for field in batch:
        old, new = table_types.get(field.name), sql_type(field.type, dialect)
        if old is not None and old != _spelled(new):
            raise BreakingSchemaChange(table, field.name, old, new)
    for name, _, _, _, is_nullable, default in existing:
        if is_nullable == "NO" and default is None and name not in batch.names:
            raise BreakingSchemaChange(table, name, table_types[name], None)
    added = {
        field.name: sql_type(field.type, dialect)
        for field in batch
        if existing and field.name not in table_types
    }
    if added and not evolve:
        raise SchemaDrift(table, added)
    return added


def _table_type(data_type: str, precision: int | None, scale: int | None) -> str:
    """A column's type as information_schema describes it, spelled as ``_spelled`` spells sql_type's."""
    # information_schema gives a decimal's precision and scale apart (so does it for numbers of other types,
    # which _spelled then drops); DuckDB's data_type also spells them, which is no harm.
    return _spelled(data_type if precision is None else f"{data_type.partition('(')[0]}({precision},{scale})")


def _spelled(type_text: str) -> str:
    """One spelling for a column type, whichever warehouse named it: sizes dropped except a decimal's."""
    name, _, size = type_text.upper().partition("(")
    name = _TYPE_ALIASES.get(name.strip(), name.strip())
    return f"{name}({size.replace(' ', '')}" if name == "DECIMAL" and size else name
