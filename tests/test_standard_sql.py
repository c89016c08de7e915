"""Standard SQL is accepted when it is valid: TPC-H's queries validate as gold stages unchanged, compute in
Spark (through the function every SQL stage runs) what DuckDB computes on the same rows, and a mistake in
one is reported at its own line, naming the stage and what its scope offers."""

from __future__ import annotations

import datetime
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from medallion_assets.catalog.loader import CatalogInvalid, CatalogNote
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.cli import main
from medallion_assets.engine.transform import run_sql
from medallion_assets.loading import validate_files
from medallion_assets.sql_safety import UnsafeSql, checked_query
from tests import tpch


@pytest.fixture
def store(tmp_path) -> CatalogStore:
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    return store


def problems_of(store: CatalogStore, path) -> list[str]:
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [path])
    return [str(problem).removeprefix(f"{path}:") for problem in refused.value.problems]


def test_the_tpch_queries_validate_unchanged(store, tmp_path):
    loaded = validate_files(store.snapshot(), [tpch.write_catalog(tmp_path)])
    assert {stage.stage_name for stage in loaded.rows["stages"] if stage.transform_sql} == set(tpch.QUERIES)


def with_sql(name: str, old: str, new: str, output: dict[str, str] | None = None) -> dict:
    tables, declared, sql = tpch.QUERIES[name]
    assert old in sql
    return {name: (tables, declared if output is None else output, sql.replace(old, new))}


def test_a_typo_in_a_correlated_subquery_points_at_its_line_with_the_inner_scopes_columns(store, tmp_path):
    path = tpch.write_catalog(
        tmp_path, with_sql("q4", "and l_commitdate < l_receiptdate", "and l_comitdate < 1")
    )
    [problem] = problems_of(store, path)
    typo_line = next(n for n, line in enumerate(path.read_text().splitlines(), 1) if "l_comitdate" in line)
    # The suggestions are the subquery's own table's columns (lineitem), not the outer query's (orders).
    assert problem == (
        f"{typo_line}: stages[tpch.q4].transform_sql: names column 'l_comitdate', which its input does not "
        "have; did you mean l_commitdate or l_receiptdate or l_shipdate?"
    )


def test_an_unnamed_output_takes_the_declared_name_at_its_place_and_validate_says_so(store, tmp_path):
    path = tpch.write_catalog(tmp_path, {"q18": tpch.QUERIES["q18"]})
    assert "sum(l_quantity)\n" in path.read_text(), "Q18 as the specification writes it"
    with pytest.warns(CatalogNote) as noted:
        loaded = validate_files(store.snapshot(), [path])
    [stage] = [stage for stage in loaded.rows["stages"] if stage.transform_sql]
    assert stage.transform_sql == tpch.QUERIES["q18"][2], "the row keeps the SQL as written"
    sum_line = next(n for n, line in enumerate(path.read_text().splitlines(), 1) if "sum(l_quantity)" in line)
    note = (
        f"{path}:{sum_line}: stages[tpch.q18].transform_sql: output column 6, SUM(l_quantity), has no "
        "name: it takes the target's declared name sum_l_quantity at its place"
    )
    assert [str(warning.message) for warning in noted] == [note]
    validated = CliRunner().invoke(
        main, ["catalog", "validate", str(path)], env={"MEDALLION_CATALOG_URL": store.url}
    )
    assert (validated.exit_code, validated.stderr) == (0, f"note: {note}\n")


def test_an_unnamed_aggregate_is_refused_at_validate_when_the_target_declares_no_columns(store, tmp_path):
    path = tpch.write_catalog(tmp_path, with_sql("q6", "l_discount) as revenue", "l_discount)", {}))
    [problem] = problems_of(store, path)
    sum_line = next(n for n, line in enumerate(path.read_text().splitlines(), 1) if "l_discount)" in line)
    assert problem == (
        f"{sum_line}: stages[tpch.q6].transform_sql: output column 1, SUM(l_extendedprice * l_discount), has "
        "no name: give it one with AS"
    )


def test_declared_names_are_taken_by_place_only_when_the_counts_match(store, tmp_path):
    two = {"revenue": "decimal(22,4)", "extra": "string"}
    path = tpch.write_catalog(tmp_path, with_sql("q6", "l_discount) as revenue", "l_discount)", two))
    [problem] = problems_of(store, path)
    assert problem.split(": ", 1)[1] == (
        "stages[tpch.q6].transform_sql: output column 1, SUM(l_extendedprice * l_discount), has no name: "
        "give it one with AS (the target declares 2 columns for its 1, so none is taken by place)"
    )


def test_the_declared_columns_of_a_target_must_be_what_its_sql_produces(store, tmp_path):
    missing = with_sql("q4", "count(*) as order_count", "count(*) as orders")
    [problem] = problems_of(store, tpch.write_catalog(tmp_path, missing))
    assert problem.split(": ", 1)[1] == (
        "stages[tpch.q4].transform_sql: does not produce the target's declared column(s) order_count; "
        "it produces o_orderpriority, orders"
    )
    mistyped = with_sql("q4", "", "", {"o_orderpriority": "string", "order_count": "date"})
    [problem] = problems_of(store, tpch.write_catalog(tmp_path, mistyped))
    assert problem.split(": ", 1)[1] == (
        "stages[tpch.q4].transform_sql: produces column order_count as BIGINT (a number), but the target "
        "declares it date (a date or time)"
    )


@pytest.mark.parametrize("name", tpch.QUERIES)
def test_each_tpch_query_computes_in_spark_what_duckdb_does(spark, name, tpch_rows):
    tables, declared, sql = tpch.QUERIES[name]
    frames = {
        table: spark.createDataFrame(
            tpch_rows[table], ", ".join(f"{c} {t}" for c, t in tpch.TABLES[table].items())
        )
        for table in tables
    }
    reference = duckdb.connect()
    for table in tables:
        columns = tpch.TABLES[table]
        reference.execute(
            f"CREATE TABLE {table} ("
            + ", ".join(f"{c} {tpch.duckdb_type(t)}" for c, t in columns.items())
            + ")"
        )
        reference.executemany(
            f"INSERT INTO {table} VALUES ({', '.join('?' for _ in columns)})", tpch_rows[table]
        )

    # As a stage runs it: an output the SQL leaves unnamed (Q18's sum) takes the target's declared name.
    result = run_sql(spark, frames, sql, "spark", list(declared))
    assert result.columns == list(declared)
    spark_rows = [tuple(row) for row in result.collect()]

    expected = tpch.answer(reference.execute(sql).fetchall())
    assert expected, f"{name} finds rows in the generated data, so the comparison means something"
    assert tpch.answer(spark_rows) == expected


@pytest.fixture(scope="module")
def tpch_rows() -> dict[str, list[tuple[Any, ...]]]:
    rows = tpch.generate()
    assert isinstance(rows["orders"][0][4], datetime.date)
    return rows


@pytest.mark.parametrize(
    "sql",
    [
        # USING and NATURAL joins: the joined column is one column, named unqualified.
        "select o_orderkey, count(*) as n from orders join lineitem on o_orderkey = l_orderkey "
        "join (select o_orderkey, o_custkey as buyer from orders) as b using (o_orderkey) "
        "group by o_orderkey",
        "select o_orderkey, buyer from orders "
        "natural join (select o_orderkey, o_custkey as buyer from orders) b",
        # A lateral column alias, which Redshift has: `total` is the select list's own.
        "select o_totalprice * 2 as total, total + 1 as more from orders",
        # A set operation, ordered by its output's names; a CTE's columns by its column list.
        "with k (key) as (select o_orderkey from orders) "
        "select key from k union all select l_orderkey from lineitem order by key",
        # A correlated scalar subquery whose unqualified column is the inner table's, over an outer one's.
        "select o_orderkey from orders where o_totalprice > (select avg(l_extendedprice) from lineitem "
        "where l_orderkey = o_orderkey)",
    ],
)
def test_standard_scoping_is_accepted(sql):
    schemas = {table: tpch.TABLES[table] for table in ("orders", "lineitem")}
    checked_query(sql, "redshift", schemas, schemas)


def test_a_column_of_another_scope_is_not_offered():
    """In the derived table only lineitem is in scope: orders' columns are no suggestion there."""
    schemas = {table: tpch.TABLES[table] for table in ("orders", "lineitem")}
    with pytest.raises(UnsafeSql) as refused:
        checked_query(
            "select o_orderkey from orders, (select l_orderky from lineitem) as l", "spark", schemas, schemas
        )
    assert (
        str(refused.value)
        == "names column 'l_orderky', which its input does not have; did you mean l_orderkey?"
    )
