"""Warehouse loaders against real parts: a DuckDB file, the PostgreSQL server, and moto's S3 server.

Redshift itself is not available, so its loader is tested piece by piece: its SQL parses as Redshift's
dialect, everything but COPY runs on PostgreSQL, the parquet staging is checked on moto, and the whole loader
runs against PostgreSQL (which speaks Redshift's protocol) up to the COPY that PostgreSQL refuses.
The servers come from conftest.py's fixtures: pg_url, s3_endpoint and bucket.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from urllib.parse import urlsplit

import boto3
import psycopg2
import psycopg2.extras
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot
from sqlglot import exp

from medallion_assets.naming import InvalidIdentifier
from medallion_assets.storage.warehouse import (
    DELETE_FLAG,
    LoadResult,
    WarehouseError,
    column_definitions,
    redshift_load_statements,
    sql_type,
    staged_parquet,
    warehouse_from_url,
)

ROLE = "arn:aws:iam::123456789012:role/MedallionLoader"
ACCOUNT = "123456789012"
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("country", pa.string()), ("amount", pa.float64())]
)


def batch(*rows: tuple, schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, row)) for row in rows], schema=schema)


def content(warehouse, table: str) -> list[tuple]:
    return sorted(tuple(row.values()) for row in warehouse.query(f"SELECT id, country, amount FROM {table}"))


def redshift_url(pg_url: str, bucket: str) -> str:
    """A redshift:// URL that reaches the PostgreSQL server, which speaks the same protocol, with the password
    in the URL: the server's own where it asks for one (libpq's PGPASSWORD, as `make test` sets it)."""
    parts = urlsplit(pg_url)
    password = parts.password or os.environ.get("PGPASSWORD") or uuid.uuid4().hex
    return (
        f"redshift://{parts.username}:{password}@{parts.hostname}:{parts.port or 5432}"
        f"{parts.path}?s3_staging=s3://{bucket}/staging/&iam_role={ROLE}"
    )


def test_replace_makes_the_table_exactly_the_batch(warehouse, table):
    assert warehouse.load(table, batch((1, "FR", 1.5), (2, "DE", 2.5)), "replace") == LoadResult(table, 2, 2)
    assert warehouse.load(table, batch((3, "JP", 3.0)), "replace") == LoadResult(table, 1, 1)
    assert content(warehouse, table) == [(3, "JP", 3.0)]
    assert warehouse.load(table, batch(), "replace") == LoadResult(table, 0, 0)
    assert content(warehouse, table) == []


@pytest.mark.parametrize("keys", [["id"], ["id", "country"], "id"])
def test_merge_updates_matching_keys_and_inserts_the_others(warehouse, table, keys):
    assert warehouse.load(table, batch((1, "FR", 1.0), (2, "DE", 2.0)), "merge", keys) == LoadResult(
        table, 2, 2
    )
    result = warehouse.load(table, batch((2, "DE", 20.0), (3, "JP", 3.0)), "merge", keys)
    assert result == LoadResult(table, 2, 3)
    assert content(warehouse, table) == [(1, "FR", 1.0), (2, "DE", 20.0), (3, "JP", 3.0)]


def test_take_makes_a_table_exactly_another_ones_rows_only_when_it_holds_the_version_meant(
    warehouse, schema, table
):
    environment = f"{schema}.daily_env"  # an environment's table, loaded by a preview
    warehouse.load(table, batch((1, "FR", 1.0), (2, "DE", 2.0)), "merge", ["id"])
    warehouse.load(environment, batch((2, "DE", 20.0), (3, "JP", 3.0)), "replace")

    assert warehouse.take(table, environment, rows=3) is None  # not the version meant: nothing changes
    assert warehouse.take(f"{schema}.gone", environment, rows=2) is None  # a load creates a table
    assert content(warehouse, table) == [(1, "FR", 1.0), (2, "DE", 2.0)]
    assert warehouse.take(table, environment, rows=2) == LoadResult(table, 2, 2)
    assert content(warehouse, table) == [(2, "DE", 20.0), (3, "JP", 3.0)]
    assert not warehouse.has_table(f"{schema}.gone")


# A merge's batch with the delete flag: gold's changed groups, recomputed rows and groups that vanished.
FLAGGED = SCHEMA.append(pa.field(DELETE_FLAG, pa.bool_()))


@pytest.mark.parametrize("as_stream", [False, True])
def test_a_merge_with_a_delete_flag_upserts_and_deletes_in_one_load(warehouse, table, as_stream):
    warehouse.load(table, batch((1, "FR", 1.0), (2, "DE", 2.0), (4, "US", 4.0)), "merge", ["id"])
    changes = batch((2, "DE", 20.0, False), (3, "JP", 3.0, False), (1, None, None, True), schema=FLAGGED)
    data = pa.RecordBatchReader.from_batches(FLAGGED, changes.to_batches()) if as_stream else changes
    result = warehouse.load(table, data, "merge", ["id"], delete_flag=DELETE_FLAG)
    assert result == LoadResult(table, 3, 3)
    assert content(warehouse, table) == [(2, "DE", 20.0), (3, "JP", 3.0), (4, "US", 4.0)]
    # The flag stays out of the table; a deleted key not present deletes nothing.
    assert DELETE_FLAG not in warehouse.query(f"SELECT * FROM {table}")[0]
    warehouse.load(
        table, batch((9, None, None, True), schema=FLAGGED), "merge", ["id"], delete_flag=DELETE_FLAG
    )
    assert len(content(warehouse, table)) == 3


@pytest.mark.parametrize(
    "mode, flagged, message",
    [
        ("replace", FLAGGED, "needs mode 'merge'"),
        ("merge", pa.schema([pa.field(DELETE_FLAG, pa.bool_()), *SCHEMA]), "must be the batch's last column"),
        ("merge", SCHEMA.append(pa.field(DELETE_FLAG, pa.string())), "a boolean"),
    ],
)
def test_a_misplaced_delete_flag_is_refused_before_any_sql(warehouse, schema, mode, flagged, message):
    with pytest.raises(ValueError, match=message):
        warehouse.load(f"{schema}.daily", flagged.empty_table(), mode, ["id"], delete_flag=DELETE_FLAG)
    assert warehouse.query(f"SELECT * FROM information_schema.schemata WHERE schema_name = '{schema}'") == []


@pytest.mark.parametrize("mode", ["replace", "merge"])
def test_loading_the_same_batch_twice_leaves_no_duplicates(warehouse, table, mode):
    rows = batch((1, "FR", 1.0), (2, "DE", 2.0))
    warehouse.load(table, rows, mode, ["id"])
    assert warehouse.load(table, rows, mode, ["id"]) == LoadResult(table, 2, 2)
    assert content(warehouse, table) == [(1, "FR", 1.0), (2, "DE", 2.0)]


def test_a_table_without_schema_goes_to_the_default_schema(warehouse):
    name = f"daily_{uuid.uuid4().hex[:12]}"
    try:
        assert warehouse.load(name, batch((1, "FR", 1.0)), "replace") == LoadResult(name, 1, 1)
        assert content(warehouse, name) == [(1, "FR", 1.0)]
    finally:
        warehouse.query(f"DROP TABLE IF EXISTS {name}")


NULLABLE = pa.schema([("id", pa.int64()), ("country", pa.string()), ("amount", pa.float64())])
AS_TEXT = pa.schema([("id", pa.int64()), ("country", pa.string()), ("amount", pa.string())])


@pytest.mark.parametrize(
    "mode, bad",
    [
        pytest.param("replace", batch((None, "FR", 1.0), schema=NULLABLE), id="replace-null-in-not-null-key"),
        pytest.param("merge", batch((2, None, 1.0), schema=NULLABLE), id="merge-null-in-not-null-column"),
        pytest.param("replace", batch((2, "DE", "lots"), schema=AS_TEXT), id="replace-wrong-type"),
        pytest.param("merge", batch((2, "DE", "lots"), schema=AS_TEXT), id="merge-wrong-type"),
        # Staging tables do not copy CHECKs: these fail in the table itself, after its rows were deleted.
        pytest.param("replace", batch((2, "DE", -5.0), (9, "US", 9.0)), id="replace-check-violation"),
        pytest.param("merge", batch((2, "DE", -5.0), (9, "US", 9.0)), id="merge-check-violation"),
    ],
)
def test_a_failed_load_leaves_the_table_as_it_was(warehouse, schema, mode, bad):
    table = f"{schema}.daily"
    warehouse.query(f"CREATE SCHEMA {schema}")
    warehouse.query(
        f"CREATE TABLE {table} (id BIGINT NOT NULL, country TEXT NOT NULL, "
        "amount DOUBLE PRECISION CHECK (amount >= 0))"
    )
    warehouse.load(table, batch((1, "FR", 1.0), (2, "DE", 2.0)), "replace")
    with pytest.raises(WarehouseError, match=f"loading {table} failed"):
        warehouse.load(table, bad, mode, ["id"])
    assert content(warehouse, table) == [(1, "FR", 1.0), (2, "DE", 2.0)]
    # The connection is still usable after the rollback.
    assert warehouse.load(table, batch((3, "JP", 3.0)), "merge", ["id"]) == LoadResult(table, 1, 3)


@pytest.mark.parametrize(
    "keys, bad, problem",
    [
        ([], batch((1, "FR", 1.0)), "needs keys"),
        (["day"], batch((1, "FR", 1.0)), "not columns"),
        (["id"], batch((None, "FR", 1.0), schema=NULLABLE), "hold nulls"),
        (["id"], batch((1, "FR", 1.0), (1, "FR", 2.0)), "share the same keys"),
    ],
)
def test_a_merge_that_would_leave_duplicates_is_refused_naming_the_table(
    warehouse, table, keys, bad, problem
):
    warehouse.load(table, batch((1, "FR", 1.0)), "replace")
    with pytest.raises(ValueError, match=f"merge into {table}.*{problem}"):
        warehouse.load(table, bad, "merge", keys)
    assert content(warehouse, table) == [(1, "FR", 1.0)]


@pytest.mark.parametrize(
    "name, columns, keys",
    [
        ('{schema}."daily"', SCHEMA.names, ["id"]),
        ("{schema}.daily; DROP TABLE x", SCHEMA.names, ["id"]),
        ("{schema}.daily.extra", SCHEMA.names, ["id"]),
        ("{schema}.daily", ["id", "country", 'amount" TEXT); --'], ["id"]),
        ("{schema}.daily", ["id", "coun try", "amount"], ["id"]),
        ("{schema}.daily", SCHEMA.names, ["id; DELETE FROM x"]),
        ("{schema}.daily", SCHEMA.names, ["'id'"]),
    ],
)
@pytest.mark.parametrize("mode", ["replace", "merge"])
def test_names_with_quotes_or_semicolons_are_refused_before_any_sql(
    warehouse, schema, name, columns, keys, mode
):
    data = batch((1, "FR", 1.0)).rename_columns(columns)
    with pytest.raises(InvalidIdentifier):
        warehouse.load(name.format(schema=schema), data, mode, keys)
    assert warehouse.query(f"SELECT * FROM information_schema.schemata WHERE schema_name = '{schema}'") == []


def test_values_of_every_mapped_type_come_back_unchanged(warehouse, table):
    rows = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "small": pa.array([7, None, -7], pa.int32()),
            "ratio": pa.array([0.1, float("inf"), None], pa.float64()),
            "label": pa.array(["", None, 'a,b "quoted"\nnext line'], pa.string()),
            "flag": pa.array([True, False, None], pa.bool_()),
            "day": pa.array([dt.date(2024, 2, 29), None, dt.date(1999, 12, 31)], pa.date32()),
            "at": pa.array(
                [dt.datetime(2024, 1, 1, 12, 30, 0, 123456), None, dt.datetime(2000, 1, 1)],
                pa.timestamp("us"),
            ),
            "at_utc": pa.array(
                [dt.datetime(2024, 1, 1, 23, 59, tzinfo=dt.UTC), None, None], pa.timestamp("us", "UTC")
            ),
            "price": pa.array([Decimal("12.34"), Decimal("-0.01"), None], pa.decimal128(10, 2)),
        }
    )
    warehouse.load(table, rows, "replace")
    assert sorted(warehouse.query(f"SELECT * FROM {table}"), key=lambda row: row["id"]) == rows.to_pylist()


@pytest.mark.parametrize(
    "arrow_type, duckdb_or_postgres, redshift",
    [
        (pa.int64(), "BIGINT", "BIGINT"),
        (pa.int32(), "INTEGER", "INTEGER"),
        (pa.float64(), "DOUBLE PRECISION", "DOUBLE PRECISION"),
        (pa.string(), "TEXT", "VARCHAR(65535)"),
        (pa.bool_(), "BOOLEAN", "BOOLEAN"),
        (pa.date32(), "DATE", "DATE"),
        (pa.timestamp("us"), "TIMESTAMP", "TIMESTAMP"),
        (pa.timestamp("ns", "UTC"), "TIMESTAMPTZ", "TIMESTAMPTZ"),
        (pa.decimal128(18, 4), "DECIMAL(18,4)", "DECIMAL(18,4)"),
    ],
)
def test_arrow_types_map_to_sql_types(arrow_type, duckdb_or_postgres, redshift):
    assert sql_type(arrow_type, "duckdb") == sql_type(arrow_type, "postgres") == duckdb_or_postgres
    assert sql_type(arrow_type, "redshift") == redshift


def test_an_unmapped_type_is_refused_naming_the_column():
    with pytest.raises(TypeError, match="column 'tags'"):
        column_definitions(pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string()))]), "postgres")


def test_urls_name_their_warehouse(tmp_path, monkeypatch, pg_url):
    with warehouse_from_url(f"duckdb:///{tmp_path}/new/folder/w.duckdb") as absolute:
        absolute.load("gold.daily", batch((1, "FR", 1.0)), "replace")
    assert (tmp_path / "new" / "folder" / "w.duckdb").is_file()
    monkeypatch.chdir(tmp_path)
    with warehouse_from_url("duckdb:///relative/w.duckdb") as relative:
        assert relative.query("SELECT 1 AS one") == [{"one": 1}]
    assert (tmp_path / "relative" / "w.duckdb").is_file()
    with warehouse_from_url(pg_url.replace("postgresql://", "postgresql+psycopg2://", 1)) as postgres:
        assert postgres.query("SELECT 1 AS one") == [{"one": 1}]


def test_threads_opening_one_duckdb_file_at_once_each_get_their_answer(tmp_path):
    """The availability probes of several gold tables open the warehouse from threads at once, each
    closing it after one query: none may be refused because another thread opens or closes the same file
    (unserialized, 5 to 9 of these 600 opens failed)."""
    url = f"duckdb:///{tmp_path}/warehouse.duckdb"
    with warehouse_from_url(url) as warehouse:
        warehouse.query("CREATE TABLE answer AS SELECT 42 AS value")

    def answers(_: int) -> list[list[dict]]:
        found = []
        for _ in range(200):
            with warehouse_from_url(url) as warehouse:
                found.append(warehouse.query("SELECT value FROM answer"))
        return found

    with ThreadPoolExecutor(max_workers=3) as threads:
        assert list(threads.map(answers, range(3))) == [[[{"value": 42}]] * 200] * 3


@pytest.mark.parametrize("url", ["mysql://loader:hunter2@db/gold", "loader:hunter2@db/gold"])
def test_an_unknown_url_scheme_lists_the_supported_ones_and_hides_the_rest(url):
    with pytest.raises(
        ValueError, match="supported: duckdb, postgresql, postgresql\\+psycopg2, redshift"
    ) as error:
        warehouse_from_url(url)
    assert "hunter2" not in str(error.value)


def test_a_redshift_url_without_staging_or_role_is_refused():
    with pytest.raises(ValueError, match="s3_staging=.*iam_role="):
        warehouse_from_url("redshift://loader:hunter2@cluster.example:5439/dev?iam_role=" + ROLE)


def test_a_password_stays_out_of_connection_errors():
    # Made up at run time, so that a traceback's source lines cannot show it.
    password = uuid.uuid4().hex
    with pytest.raises(WarehouseError, match="connecting to") as error:
        warehouse_from_url(f"postgresql://postgres:{password}@127.0.0.1:1/postgres")
    assert password not in "".join(traceback.format_exception(error.value))


@pytest.mark.parametrize(
    "mode, kinds",
    [
        ("replace", [exp.Create, exp.Create, exp.Delete, exp.Copy]),
        ("merge", [exp.Create, exp.Create, exp.Create, exp.Copy, exp.Delete, exp.Insert, exp.Drop]),
    ],
)
def test_redshift_statements_parse_as_redshift_sql(mode, kinds):
    s3_uri = "s3://bucket/it's staged/x.parquet"
    statements = redshift_load_statements(
        "gold.daily", column_definitions(SCHEMA, "redshift"), ["id", "country"], mode, s3_uri, ROLE
    )
    parsed = [sqlglot.parse_one(sql, read="redshift") for sql in statements]
    assert [type(expression) for expression in parsed] == kinds
    copy = next(expression for expression in parsed if isinstance(expression, exp.Copy))
    assert [column.name for column in copy.this.expressions] == SCHEMA.names
    assert copy.args["files"][0].this == s3_uri
    assert copy.args["credentials"].args["iam_role"].this == ROLE


def test_redshift_statements_of_a_merge_with_a_delete_flag_parse_and_run_on_postgres(pg_url, pg_schema):
    table, s3_uri = f"{pg_schema}.daily", "s3://bucket/staging/x.parquet"
    columns = column_definitions(SCHEMA, "redshift")
    merge = redshift_load_statements(table, columns, ["id"], "merge", s3_uri, ROLE)
    flagged = redshift_load_statements(table, columns, ["id"], "merge", s3_uri, ROLE, delete_flag=DELETE_FLAG)
    parsed = [sqlglot.parse_one(sql, read="redshift") for sql in flagged]
    assert [type(expression) for expression in parsed] == [
        *[exp.Create] * 3,
        exp.Alter,
        exp.Copy,
        exp.Delete,
        exp.Insert,
        exp.Drop,
    ]
    copy = next(expression for expression in parsed if isinstance(expression, exp.Copy))
    assert [column.name for column in copy.this.expressions] == [*SCHEMA.names, DELETE_FLAG]
    run_on_postgres(pg_url, merge, batch((1, "FR", 1.0), (2, "DE", 2.0)))
    run_on_postgres(pg_url, flagged, batch((2, "DE", 20.0, False), (1, None, None, True), schema=FLAGGED))
    with warehouse_from_url(pg_url) as postgres:
        assert content(postgres, table) == [(2, "DE", 20.0)]


def run_on_postgres(pg_url: str, statements: list[str], data: pa.Table) -> None:
    """Run Redshift's statements in one PostgreSQL transaction, an INSERT of ``data`` standing in for COPY."""
    with psycopg2.connect(pg_url) as connection, connection.cursor() as cursor:
        for sql in statements:
            if sql.startswith("COPY "):
                destination = sql.removeprefix("COPY ").partition(" FROM ")[0]
                rows = [tuple(row.values()) for row in data.to_pylist()]
                psycopg2.extras.execute_values(cursor, f"INSERT INTO {destination} VALUES %s", rows)
            else:
                cursor.execute(sql)
    connection.close()


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("replace", [(2, "DE", 20.0), (3, "JP", 3.0)]),
        ("merge", [(1, "FR", 1.0), (2, "DE", 20.0), (3, "JP", 3.0)]),
    ],
)
def test_redshift_statements_other_than_copy_run_on_postgres(pg_url, pg_schema, mode, expected):
    table = f"{pg_schema}.daily"
    columns = column_definitions(SCHEMA, "redshift")
    s3_uri = "s3://bucket/staging/x.parquet"
    for data in [batch((1, "FR", 1.0), (2, "DE", 2.0)), batch((2, "DE", 20.0), (3, "JP", 3.0))]:
        run_on_postgres(pg_url, redshift_load_statements(table, columns, ["id"], mode, s3_uri, ROLE), data)
    with warehouse_from_url(pg_url) as postgres:
        assert content(postgres, table) == expected


def test_staged_parquet_is_uploaded_under_the_prefix_then_deleted(bucket):
    s3 = boto3.client("s3")
    data = batch((1, "FR", 1.0), (2, None, None))
    with staged_parquet(data, f"s3://{bucket}/staging/", "gold.daily") as s3_uri:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix="staging/")["Contents"]
        assert [f"s3://{bucket}/{item['Key']}" for item in listed] == [s3_uri]
        assert s3_uri.startswith(f"s3://{bucket}/staging/gold.daily/") and s3_uri.endswith(".parquet")
        body = s3.get_object(Bucket=bucket, Key=listed[0]["Key"])["Body"].read()
        assert pq.read_table(io.BytesIO(body)).equals(data)
    assert s3.list_objects_v2(Bucket=bucket, Prefix="staging/")["KeyCount"] == 0


def test_a_missing_staging_bucket_is_a_clear_error_before_any_sql(pg_url, pg_schema, s3_endpoint):
    table = f"{pg_schema}.daily"
    with warehouse_from_url(redshift_url(pg_url, f"missing-{uuid.uuid4().hex[:12]}")) as redshift:
        with pytest.raises(
            WarehouseError, match=f"loading {table} failed: SourceNotFound: .*bucket .* not found"
        ):
            redshift.load(table, batch((1, "FR", 1.0)), "replace")
        assert (
            redshift.query(f"SELECT * FROM information_schema.schemata WHERE schema_name = '{pg_schema}'")
            == []
        )


@pytest.mark.parametrize("mode", ["replace", "merge"])
def test_the_redshift_loader_stages_then_fails_cleanly_where_copy_is_refused(pg_url, pg_schema, bucket, mode):
    table = f"{pg_schema}.daily"
    s3 = boto3.client("s3")
    # Versioning keeps the deleted staging object, so the test can read what the loader uploaded.
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    with warehouse_from_url(pg_url) as postgres:
        postgres.load(table, batch((1, "FR", 1.0)), "replace")
    data = batch((1, "FR", 10.0), (2, "DE", 2.0))
    url = redshift_url(pg_url, bucket)
    password = urlsplit(url).password
    assert password
    with warehouse_from_url(url) as redshift:
        for secret in (ROLE, ACCOUNT, password):
            assert secret not in repr(redshift)
        with pytest.raises(WarehouseError, match=f"loading {table} failed.*IAM_ROLE") as error:
            redshift.load(table, data, mode, ["id"])
        assert content(redshift, table) == [(1, "FR", 1.0)]
    reported = "".join(traceback.format_exception(error.value))
    for secret in (ROLE, ACCOUNT, password):
        assert secret not in reported
    assert s3.list_objects_v2(Bucket=bucket, Prefix="staging/")["KeyCount"] == 0
    (version,) = s3.list_object_versions(Bucket=bucket, Prefix=f"staging/{table}/")["Versions"]
    body = s3.get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"].read()
    assert pq.read_table(io.BytesIO(body)).equals(data)
