"""The SQL of a load, as pure functions of names and column types, so that tests can read, parse and run it.

All three warehouses share this generator: they differ only in what their COPY reads (CSV over the connection,
parquet staged under an S3 prefix, or a registered Arrow batch), in how a table is emptied and in how a
staging table is created. A table's existing columns are read from ``information_schema``, which all have.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from medallion_assets.naming import (
    STAGING_SUFFIX,
    check_identifier,
    quote_identifier,
    quote_qualified,
    split_qualified,
)

Mode = Literal["replace", "merge"]
# The boolean column a merge's batch may carry to delete rows by their keys: a row flagged true deletes the
# table's row of its keys and is not inserted (a gold group that vanished).
DELETE_FLAG = "_medallion_deleted"
Dialect = Literal["duckdb", "postgres", "redshift"]


def staging_table(table: str) -> str:
    """The table a merge into ``table`` stages its batch in: next to it, in its schema."""
    *schema, name = split_qualified(table)
    return ".".join([*schema, check_identifier(name + STAGING_SUFFIX, f"staging table of {table}")])


def columns_sql(table: str) -> str:
    """The columns ``table`` has (none when it does not exist): the rows ``columns_to_add`` reads."""
    return (
        "SELECT column_name, data_type, numeric_precision, numeric_scale, is_nullable, column_default "
        f"FROM information_schema.columns WHERE {_located(table)} ORDER BY ordinal_position"
    )


def table_exists_sql(table: str) -> str:
    """One row if ``table`` exists, none otherwise."""
    return f"SELECT table_name FROM information_schema.tables WHERE {_located(table)}"


def create_statements(table: str, columns: Mapping[str, str]) -> list[str]:
    """Create the table's schema and the table itself, each only if missing."""
    parts = split_qualified(table)
    definitions = ", ".join(f"{quote_identifier(name)} {sql}" for name, sql in columns.items())
    schema = [f"CREATE SCHEMA IF NOT EXISTS {quote_identifier(parts[0])}"] if len(parts) == 2 else []
    return [*schema, f"CREATE TABLE IF NOT EXISTS {quote_qualified(table)} ({definitions})"]


def add_column_statements(table: str, added: Mapping[str, str]) -> list[str]:
    """Add each column to ``table``, nullable; one per statement, as Redshift allows."""
    target = quote_qualified(table)
    return [f"ALTER TABLE {target} ADD COLUMN {quote_identifier(name)} {sql}" for name, sql in added.items()]


def upsert_statements(
    table: str, stage: str, names: Sequence[str], keys: Sequence[str], delete_flag: str | None = None
) -> list[str]:
    """Move every row of ``stage`` into ``table`` after deleting the rows with the same ``keys``; with
    ``delete_flag``, a staged row flagged true only deletes.

    DELETE ... USING then INSERT, rather than MERGE, because PostgreSQL, Redshift and DuckDB all run it.
    """
    target, source = quote_qualified(table), quote_qualified(stage)
    quoted = ", ".join(map(quote_identifier, names))
    match = " AND ".join(
        f"{target}.{quote_identifier(key)} = {source}.{quote_identifier(key)}" for key in keys
    )
    kept = f" WHERE NOT {quote_identifier(delete_flag)}" if delete_flag else ""
    return [
        f"DELETE FROM {target} USING {source} WHERE {match}",
        f"INSERT INTO {target} ({quoted}) SELECT {quoted} FROM {source}{kept}",
    ]


def key_check_sql(stage: str, keys: Sequence[str]) -> str:
    """The counts ``check_keys`` reads of the rows staged in ``stage``: rows, distinct keys, non-null keys."""
    source = quote_qualified(stage)
    quoted = ", ".join(map(quote_identifier, keys))
    distinct = (
        f"(SELECT COUNT(*) FROM (SELECT DISTINCT {quoted} FROM {source}) AS {quote_identifier('keyed')})"
    )
    non_null = ", ".join(f"COUNT({quote_identifier(key)})" for key in keys)
    return f"SELECT COUNT(*), {distinct}, {non_null} FROM {source}"


@dataclass(frozen=True)
class LoadPlan:
    """The statements of one load, run in one transaction in this order (iterating yields them so).

    ``prepare`` creates, evolves and empties the table or creates the staging table; ``copy`` moves the
    batch into the table (replace) or the staging table (merge); ``key_check``, for a merge of a stream,
    counts the staged keys, which the loader checks before ``finish`` upserts and drops the staging table.
    """

    prepare: tuple[str, ...]
    copy: str
    key_check: str | None
    finish: tuple[str, ...]

    def __iter__(self) -> Iterator[str]:
        yield from self.prepare
        yield self.copy
        if self.key_check:
            yield self.key_check
        yield from self.finish


def load_statements(
    table: str,
    columns: Mapping[str, str],
    keys: Sequence[str],
    mode: Mode,
    copy_source: str,
    dialect: Dialect,
    added: Mapping[str, str] | None = None,
    check_keys: bool = False,
    delete_flag: str | None = None,
) -> LoadPlan:
    """The statements of one load. ``copy_source`` follows ``COPY ... FROM`` (DuckDB: the batch's view name).

    ``replace`` empties the table and copies the batch straight into it. ``merge`` copies it into the
    staging table, then upserts from it. ``added`` columns are added to the table first (``columns_to_add``);
    ``check_keys`` counts the staged keys before the upsert. ``delete_flag`` (merge only) names the batch's
    boolean column, last, not one of ``columns``, whose true rows delete their keys' rows instead.
    """
    target = quote_qualified(table)
    copied = [*columns, delete_flag] if delete_flag else list(columns)
    quoted = ", ".join(map(quote_identifier, copied))
    prepare = [*create_statements(table, columns), *add_column_statements(table, added or {})]
    destination = table if mode == "replace" else staging_table(table)
    if dialect == "duckdb":
        copy = (
            f"INSERT INTO {quote_qualified(destination)} ({quoted}) "
            f"SELECT {quoted} FROM {quote_identifier(copy_source)}"
        )
    else:
        copy = f"COPY {quote_qualified(destination)} ({quoted}) FROM {copy_source}"
    if mode == "replace":
        return LoadPlan((*prepare, _emptied(target, dialect)), copy, None, ())
    stage = quote_qualified(destination)
    # DuckDB has no CREATE TABLE ... (LIKE ...); an empty copy of the target has its columns and types too.
    like = f"AS SELECT * FROM {target} LIMIT 0" if dialect == "duckdb" else f"(LIKE {target})"
    flag = [f"ALTER TABLE {stage} ADD COLUMN {quote_identifier(delete_flag)} BOOLEAN"] if delete_flag else []
    return LoadPlan(
        (*prepare, f"CREATE TABLE {stage} {like}", *flag),
        copy,
        key_check_sql(destination, keys) if check_keys else None,
        (*upsert_statements(table, destination, list(columns), keys, delete_flag), f"DROP TABLE {stage}"),
    )


def take_statements(table: str, source: str, columns: Sequence[str], dialect: Dialect) -> list[str]:
    """Make ``table``'s rows exactly ``source``'s, its ``columns``, without the rows leaving the warehouse."""
    target, quoted = quote_qualified(table), ", ".join(map(quote_identifier, columns))
    return [
        _emptied(target, dialect),
        f"INSERT INTO {target} ({quoted}) SELECT {quoted} FROM {quote_qualified(source)}",
    ]


def _emptied(target: str, dialect: Dialect) -> str:
    """The statement that empties the (quoted) ``target`` inside a load's transaction."""
    # Redshift's TRUNCATE commits the open transaction; PostgreSQL's is transactional, and much cheaper than
    # DELETE, at the price of blocking readers of the table until the load commits.
    return f"{'TRUNCATE' if dialect == 'postgres' else 'DELETE FROM'} {target}"


def redshift_copy_source(s3_uri: str, iam_role: str) -> str:
    """What a Redshift COPY reads: the parquet staged at ``s3_uri``, with the IAM role."""
    # COPY maps parquet columns by position; the column list names them in the batch's order.
    return f"{_literal(s3_uri)} IAM_ROLE {_literal(iam_role)} FORMAT AS PARQUET"


def redshift_load_statements(
    table: str,
    columns: Mapping[str, str],
    keys: Sequence[str],
    mode: Mode,
    s3_uri: str,
    iam_role: str,
    added: Mapping[str, str] | None = None,
    check_keys: bool = False,
    delete_flag: str | None = None,
) -> LoadPlan:
    """The statements of one Redshift load of the parquet staged at ``s3_uri``."""
    source = redshift_copy_source(s3_uri, iam_role)
    return load_statements(table, columns, keys, mode, source, "redshift", added, check_keys, delete_flag)


def _located(table: str) -> str:
    """The information_schema condition that selects ``table``; without a schema, it is the current one."""
    *schema, name = split_qualified(table)
    in_schema = _literal(schema[0]) if schema else "current_schema()"
    return f"table_schema = {in_schema} AND table_name = {_literal(name)}"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
