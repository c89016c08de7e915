"""Warehouse faults, each injected for real: a terminated backend, a leftover staging table, schema drift and
breaking changes, and a load streamed as record batches. Run on the PostgreSQL server and a DuckDB file.

The healing actions answer these errors; here the warehouse side is proven: every fault leaves the table as
it was, raises an error that says what happened, and the remedy (reconnect, drop_staging, evolve=True,
a stream of smaller batches) then loads the batch exactly once.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import boto3
import psycopg2
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot
from sqlglot import exp

from medallion_assets.naming import InvalidIdentifier
from medallion_assets.storage.warehouse import (
    BreakingSchemaChange,
    LeftoverStagingTable,
    LoadResult,
    SchemaDrift,
    WarehouseConnectionLost,
    column_definitions,
    redshift_load_statements,
    staged_parquet,
    warehouse_from_url,
)
from tests.test_warehouse import NULLABLE, ROLE, SCHEMA, batch, content, run_on_postgres

WIDER = pa.schema([*SCHEMA, ("email", pa.string()), ("score", pa.int32())])
OLD = [(1, "FR", 1.0), (2, "DE", 2.0)]


def columns_of(warehouse, table: str) -> list[tuple]:
    schema_name, name = table.split(".")
    return [
        tuple(row.values())
        for row in warehouse.query(
            "SELECT column_name, is_nullable FROM information_schema.columns "
            f"WHERE table_schema = '{schema_name}' AND table_name = '{name}' ORDER BY ordinal_position"
        )
    ]


def tables_in(warehouse, schema_name: str) -> list[str]:
    return sorted(
        row["table_name"]
        for row in warehouse.query(
            f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{schema_name}'"
        )
    )


# --- a lost connection
# ----------------------------------------------------------------------------------------


def blocked_backend(
    pg_url: str, marker: str, statement: str = "", deadline_sec: float = 60
) -> tuple[int, str]:
    """The pid and statement of the backend waiting on a lock whose statement names ``marker`` and starts with
    ``statement``. A statement before it may wait for a moment too (seen under load); the load is blocked for
    good only at the one that conflicts with the test's lock."""
    # Its own connection in autocommit: a transaction would see one snapshot of pg_stat_activity throughout.
    watcher = psycopg2.connect(pg_url)
    watcher.autocommit = True
    started = time.monotonic()
    try:
        with watcher.cursor() as cursor:
            while time.monotonic() - started < deadline_sec:
                cursor.execute(
                    "SELECT pid, query FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE %s AND pid <> pg_backend_pid()",
                    (f"%{marker}%",),
                )
                found = [(pid, query) for pid, query in cursor.fetchall() if query.startswith(statement)]
                if found:
                    return found[0]
                time.sleep(0.05)
    finally:
        watcher.close()
    pytest.fail(f"no load waited on a lock within {deadline_sec} s")


@pytest.mark.parametrize(
    "mode, blocked_at, expected",
    [
        # TRUNCATE waits for the SHARE lock, before any row of the table is touched.
        ("replace", "TRUNCATE", [(2, "DE", 20.0), (3, "JP", 3.0)]),
        # The staging table is created and filled (both allowed under SHARE); the upsert's DELETE waits.
        ("merge", "DELETE", [(1, "FR", 1.0), (2, "DE", 20.0), (3, "JP", 3.0)]),
    ],
)
def test_a_terminated_load_is_rolled_back_and_lands_exactly_once_after_reconnect(
    pg_url, pg_schema, mode, blocked_at, expected
):
    table = f"{pg_schema}.daily"
    new = batch((2, "DE", 20.0), (3, "JP", 3.0))
    parts = urlsplit(pg_url)
    where = f"{parts.username}@{parts.hostname}:{parts.port or 5432}{parts.path}"
    with warehouse_from_url(pg_url) as warehouse, ThreadPoolExecutor(max_workers=1) as pool:
        warehouse.load(table, batch(*OLD), "replace")
        locker = psycopg2.connect(pg_url)
        try:
            with locker.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {table} IN SHARE MODE")
                loading = pool.submit(warehouse.load, table, new, mode, ["id"])
                pid, statement = blocked_backend(pg_url, pg_schema, blocked_at)
                assert statement.startswith(blocked_at)
                cursor.execute("SELECT pg_terminate_backend(%s)", (pid,))
            locker.rollback()
        finally:
            locker.close()
        with pytest.raises(WarehouseConnectionLost) as lost:
            loading.result()
        assert str(lost.value) == (
            f"loading {table} failed: lost the connection to {where}; "
            "the load was rolled back. Call reconnect() and run it again"
        )
        with pytest.raises(
            WarehouseConnectionLost, match="^query failed: lost the connection .* the statement was"
        ):
            warehouse.query("SELECT 1")
        warehouse.reconnect()
        # Nothing of the terminated load is left: the old content, and no staging table.
        assert content(warehouse, table) == OLD
        assert tables_in(warehouse, pg_schema) == ["daily"]
        assert warehouse.load(table, new, mode, ["id"]) == LoadResult(table, 2, len(expected))
        assert content(warehouse, table) == expected


def test_a_closed_duckdb_connection_is_lost_until_reconnected(tmp_path):
    path = tmp_path / "warehouse.duckdb"
    with warehouse_from_url(f"duckdb:///{path}") as warehouse:
        warehouse.load("gold.daily", batch(*OLD), "replace")
        warehouse.close()
        with pytest.raises(WarehouseConnectionLost) as lost:
            warehouse.load("gold.daily", batch((3, "JP", 3.0)), "merge", ["id"])
        assert str(lost.value) == (
            f"loading gold.daily failed: lost the connection to {path}; "
            "the load was rolled back. Call reconnect() and run it again"
        )
        warehouse.reconnect()
        assert warehouse.load("gold.daily", batch((3, "JP", 3.0)), "merge", ["id"]) == LoadResult(
            "gold.daily", 1, 3
        )
        assert content(warehouse, "gold.daily") == [*OLD, (3, "JP", 3.0)]


# --- a leftover staging table
# ---------------------------------------------------------------------------------


def test_a_leftover_staging_table_stops_merges_until_dropped(warehouse, schema, table):
    warehouse.load(table, batch(*OLD), "merge", ["id"])
    # A normal merge leaves nothing behind.
    assert tables_in(warehouse, schema) == ["daily"]
    staging = f"{table}__medallion_stage"
    # As a crashed load would leave it: the target's columns, some of the batch's rows.
    warehouse.query(f"CREATE TABLE {staging} (id BIGINT NOT NULL, country TEXT, amount DOUBLE PRECISION)")
    warehouse.query(f"INSERT INTO {staging} VALUES (2, 'DE', 20.0)")
    new = batch((2, "DE", 20.0), (3, "JP", 3.0))
    with pytest.raises(LeftoverStagingTable) as error:
        warehouse.load(table, new, "merge", ["id"])
    assert str(error.value) == (
        f"loading {table} failed: the staging table {staging} was left behind by an "
        f"earlier load; drop it with drop_staging('{table}') and load again"
    )
    assert (error.value.table, error.value.staging) == (table, staging)
    assert content(warehouse, table) == OLD
    assert warehouse.drop_staging(table) == staging
    assert tables_in(warehouse, schema) == ["daily"]
    assert warehouse.load(table, new, "merge", ["id"]) == LoadResult(table, 2, 3)
    assert content(warehouse, table) == [(1, "FR", 1.0), (2, "DE", 20.0), (3, "JP", 3.0)]
    assert tables_in(warehouse, schema) == ["daily"]


@pytest.mark.parametrize("name", ["{schema}.daily; DROP TABLE x", '{schema}."daily"', "a.b.c"])
def test_drop_staging_takes_plain_table_names_only(warehouse, schema, table, name):
    warehouse.load(table, batch(*OLD), "replace")
    with pytest.raises(InvalidIdentifier):
        warehouse.drop_staging(name.format(schema=schema))
    assert content(warehouse, table) == OLD


# --- schema drift and breaking changes
# ------------------------------------------------------------------------


def wider(*rows: tuple) -> pa.Table:
    return batch(*rows, schema=WIDER)


def test_new_columns_are_refused_as_drift_naming_them_and_their_types(warehouse, table):
    warehouse.load(table, batch(*OLD), "replace")
    with pytest.raises(SchemaDrift) as drift:
        warehouse.load(table, wider((3, "JP", 3.0, "a@example.com", 7)), "merge", ["id"])
    assert str(drift.value) == (
        f"loading {table} failed: the batch has columns that {table} lacks: "
        "email TEXT, score INTEGER; load with evolve=True to add them as nullable columns"
    )
    assert drift.value.columns == {"email": "TEXT", "score": "INTEGER"}
    assert columns_of(warehouse, table) == [("id", "NO"), ("country", "YES"), ("amount", "YES")]
    assert content(warehouse, table) == OLD


@pytest.mark.parametrize(
    "mode, expected",
    [
        (
            "merge",
            [(1, "FR", 1.0, None, None), (2, "DE", 20.0, "de@example.com", None), (3, "JP", 3.0, None, 7)],
        ),
        ("replace", [(2, "DE", 20.0, "de@example.com", None), (3, "JP", 3.0, None, 7)]),
    ],
)
def test_evolve_adds_the_new_columns_nullable_in_the_same_load(warehouse, table, mode, expected):
    warehouse.load(table, batch(*OLD), "replace")
    new = wider((2, "DE", 20.0, "de@example.com", None), (3, "JP", 3.0, None, 7))
    assert warehouse.load(table, new, mode, ["id"], evolve=True) == LoadResult(table, 2, len(expected))
    assert columns_of(warehouse, table) == [
        ("id", "NO"),
        ("country", "YES"),
        ("amount", "YES"),
        ("email", "YES"),
        ("score", "YES"),
    ]
    rows = warehouse.query(f"SELECT id, country, amount, email, score FROM {table}")
    assert sorted(tuple(row.values()) for row in rows) == expected
    # The evolved table takes the narrower batch again: a missing nullable column is no breaking change.
    assert warehouse.load(table, batch((4, "US", 4.0)), "merge", ["id"]) == LoadResult(
        table, 1, len(expected) + 1
    )


AMOUNT_AS_TEXT = pa.schema([*NULLABLE.remove(2), ("amount", pa.string()), ("email", pa.string())])
WITHOUT_ID = pa.schema([("country", pa.string()), ("amount", pa.float64()), ("email", pa.string())])


@pytest.mark.parametrize(
    "bad, mode, change",
    [
        pytest.param(
            batch((3, "JP", "lots", "a@b"), schema=AMOUNT_AS_TEXT),
            "merge",
            "column amount is DOUBLE PRECISION in the table but TEXT in the batch",
            id="type-changed",
        ),
        pytest.param(
            batch(("JP", 3.0, "a@b"), schema=WITHOUT_ID),
            "replace",
            "column id is BIGINT NOT NULL in the table but missing from the batch",
            id="not-null-missing",
        ),
    ],
)
def test_breaking_changes_are_refused_even_with_evolve(warehouse, table, bad, mode, change):
    warehouse.load(table, batch(*OLD), "replace")
    with pytest.raises(BreakingSchemaChange) as error:
        warehouse.load(table, bad, mode, ["country"], evolve=True)
    assert str(error.value) == (
        f"loading {table} failed: breaking schema change: {change}; "
        "only new nullable columns are added (evolve=True), so change the table by hand"
    )
    # Untouched: the new column "email" was not added either.
    assert columns_of(warehouse, table) == [("id", "NO"), ("country", "YES"), ("amount", "YES")]
    assert content(warehouse, table) == OLD


def test_every_mapped_type_reloads_as_the_same_type(warehouse, table):
    """The table's types, as information_schema spells them, match the batch's: no false breaking change."""
    types = [
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.float32(),
        pa.float64(),
        pa.bool_(),
        pa.date32(),
        pa.string(),
        pa.timestamp("us"),
        pa.timestamp("us", "UTC"),
        pa.decimal128(10, 2),
    ]
    every = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            *(pa.field(f"c{number}", arrow_type) for number, arrow_type in enumerate(types)),
        ]
    )
    one_row = pa.Table.from_pylist([{"id": 1}], schema=every)
    warehouse.load(table, one_row, "replace")
    assert warehouse.load(table, one_row, "merge", ["id"]) == LoadResult(table, 1, 1)


# --- a load streamed as record batches
# ------------------------------------------------------------------------


class Batches:
    """Record batches handed out one at a time, counting how often each was pulled."""

    def __init__(self, *rows_per_batch: list[tuple], schema: pa.Schema = SCHEMA) -> None:
        self.batches = [
            pa.RecordBatch.from_pylist([dict(zip(schema.names, row)) for row in rows], schema=schema)
            for rows in rows_per_batch
        ]
        self.pulled = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for one in self.batches:
            self.pulled += 1
            yield one


@pytest.mark.parametrize("as_reader", [True, False], ids=["reader", "iterable"])
@pytest.mark.parametrize(
    "mode, expected",
    [
        ("replace", [(2, "DE", 20.0), (3, "JP", 3.0), (4, "US", 4.0), (5, "IT", None), (6, "ES", 6.0)]),
        (
            "merge",
            [
                (1, "FR", 1.0),
                (2, "DE", 20.0),
                (3, "JP", 3.0),
                (4, "US", 4.0),
                (5, "IT", None),
                (6, "ES", 6.0),
            ],
        ),
    ],
)
def test_a_stream_of_record_batches_loads_exactly_once(warehouse, table, mode, expected, as_reader):
    warehouse.load(table, batch(*OLD), "replace")
    stream = Batches(
        [(2, "DE", 20.0), (3, "JP", 3.0)], [(4, "US", 4.0)], [], [(5, "IT", None), (6, "ES", 6.0)]
    )
    data = pa.RecordBatchReader.from_batches(SCHEMA, iter(stream)) if as_reader else stream
    assert warehouse.load(table, data, mode, ["id"]) == LoadResult(table, 5, len(expected))
    assert stream.pulled == 4
    assert content(warehouse, table) == expected
    assert tables_in(warehouse, table.split(".")[0]) == ["daily"]


@pytest.mark.parametrize(
    "stream, problem",
    [
        pytest.param(
            Batches([(2, "DE", 20.0), (3, "JP", 3.0)], [(2, "DE", 21.0)]),
            "several rows of the batch share the same keys ['id']",
            id="keys-repeat-across-batches",
        ),
        pytest.param(
            Batches([(3, "JP", 3.0)], [(None, "US", 4.0)], schema=NULLABLE),
            "key columns ['id'] hold nulls",
            id="null-key-in-a-later-batch",
        ),
    ],
)
def test_a_streamed_merge_checks_its_keys_across_the_whole_stream(warehouse, schema, stream, problem):
    table = f"{schema}.daily"
    warehouse.load(table, batch(*OLD, schema=NULLABLE), "replace")
    with pytest.raises(ValueError) as error:
        warehouse.load(table, stream, "merge", ["id"])
    assert str(error.value) == f"merge into {table}: {problem}"
    assert content(warehouse, table) == OLD
    assert tables_in(warehouse, schema) == ["daily"]


def test_a_batch_with_another_schema_stops_the_stream_and_the_load(warehouse, table):
    warehouse.load(table, batch(*OLD), "replace")
    amount_as_text = batch((4, "US", "x"), schema=AMOUNT_AS_TEXT.remove(3))
    stream = [*batch((3, "JP", 3.0)).to_batches(), *amount_as_text.to_batches()]
    with pytest.raises(
        ValueError, match=f"^load into {table}: record batch 2 has the schema .*amount: string"
    ):
        warehouse.load(table, stream, "replace")
    assert content(warehouse, table) == OLD


def test_an_empty_stream_needs_a_reader_for_its_schema(warehouse, table):
    warehouse.load(table, batch(*OLD), "replace")
    with pytest.raises(ValueError, match=f"^load into {table}: the stream of record batches is empty"):
        warehouse.load(table, iter([]), "replace")
    assert content(warehouse, table) == OLD
    assert warehouse.load(table, pa.RecordBatchReader.from_batches(SCHEMA, []), "replace") == LoadResult(
        table, 0, 0
    )
    assert content(warehouse, table) == []


def test_a_stream_is_staged_for_redshift_as_one_parquet_object(bucket):
    stream = Batches([(1, "FR", 1.0)], [(2, None, None)])
    with staged_parquet(
        pa.RecordBatchReader.from_batches(SCHEMA, iter(stream)), f"s3://{bucket}/staging/", "gold.daily"
    ) as s3_uri:
        key = s3_uri.removeprefix(f"s3://{bucket}/")
        body = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    assert pq.read_table(io.BytesIO(body)).equals(batch((1, "FR", 1.0), (2, None, None)))


# --- the SQL of it all, for Redshift
# ---------------------------------------------------------------------------


def test_redshift_merges_with_evolution_and_key_check_parse_and_run(pg_url, pg_schema):
    table = f"{pg_schema}.daily"
    plan = redshift_load_statements(
        table,
        column_definitions(SCHEMA, "redshift"),
        ["id"],
        "merge",
        "s3://bucket/staging/x.parquet",
        ROLE,
        {"email": "VARCHAR(65535)"},
        True,
    )
    parsed = [sqlglot.parse_one(sql, read="redshift") for sql in plan]
    assert [type(expression) for expression in parsed] == [
        exp.Create,
        exp.Create,
        exp.Alter,
        exp.Create,
        exp.Copy,
        exp.Select,
        exp.Delete,
        exp.Insert,
        exp.Drop,
    ]
    staging = parsed[3].this.this
    assert (staging.db, staging.name) == (pg_schema, "daily__medallion_stage")
    like = parsed[3].this.expressions[0].this
    assert (like.db, like.name) == (pg_schema, "daily")
    # The same statements on PostgreSQL (an INSERT standing in for COPY), after a first load without email.
    run_on_postgres(
        pg_url,
        list(
            redshift_load_statements(
                table, column_definitions(SCHEMA, "redshift"), ["id"], "replace", "s3://b/x.parquet", ROLE
            )
        ),
        batch(*OLD),
    )
    run_on_postgres(pg_url, list(plan), batch((2, "DE", 20.0)))
    with warehouse_from_url(pg_url) as postgres:
        assert content(postgres, table) == [(1, "FR", 1.0), (2, "DE", 20.0)]
        assert columns_of(postgres, table)[-1] == ("email", "YES")
        assert tables_in(postgres, pg_schema) == ["daily"]
