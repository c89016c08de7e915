"""`sql_dialect: redshift` computes in Spark what Redshift computes: the same expressions over the same rows,
in Spark (through the function every SQL stage runs, after Medallion's transpilation) and on PostgreSQL, the
Redshift-family engine of the tests, compared value by value.

PostgreSQL runs the Redshift text itself wherever the two share it; where Redshift has a construct PostgreSQL
lacks (NVL, DATEADD, DATEDIFF, LISTAGG), the case gives PostgreSQL's spelling of Redshift's documented
meaning.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import psycopg2
import pytest

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.engine.transform import run_sql
from medallion_assets.loading import validate_files
from tests.conftest import SEED, fresh_database

COLUMNS = {
    "id": "bigint",
    "i": "bigint",
    "j": "bigint",
    "n": "decimal(10,3)",
    "f": "double",
    "s": "string",
    "s2": "string",
    "d": "date",
    "d2": "date",
    "ts": "timestamp",
    "b": "boolean",
}
POSTGRES_TYPES = {"string": "text", "double": "double precision", "decimal(10,3)": "numeric(10,3)"}
ROWS = [
    (1, 7, 2, Decimal("3.789"), 2.5, "a,b,c", "x", datetime.date(2024, 1, 31), datetime.date(2024, 2, 1),
     datetime.datetime(2024, 1, 31, 23, 59, 59), True),
    (2, -7, 2, Decimal("-3.789"), -2.5, "one", None, datetime.date(2023, 12, 31), datetime.date(2025, 3, 1),
     datetime.datetime(2024, 2, 29, 0, 0, 1), False),
    (3, 9, -4, Decimal("2.500"), 3.5, "p,,q", "", datetime.date(2024, 2, 29), datetime.date(2024, 2, 28),
     datetime.datetime(2023, 7, 4, 12, 30), None),
    (4, 0, 3, Decimal("-2.500"), -0.5, "", "y", datetime.date(2024, 3, 15), datetime.date(2024, 6, 15),
     datetime.datetime(2024, 12, 31, 18, 0), True),
]  # fmt: skip

# name → (the Redshift expression, PostgreSQL's spelling when it differs).
EXPRESSIONS: dict[str, tuple[str, str | None]] = {
    "integer division": ("i / j", None),
    "integer division of literals": ("7 / 2", None),
    "integer division of an integer division": ("(i + 1) / j / 2", None),
    "decimal division": ("n / j", None),
    "modulo": ("i % j", None),
    "NVL": ("NVL(s2, 'none')", "COALESCE(s2, 'none')"),
    "COALESCE of an integer and a decimal": ("COALESCE(i, n)", None),
    "concatenation with NULL": ("s || s2", None),
    "DATEADD by days": ("DATEADD(day, 1, d)", "d + INTERVAL '1 day'"),
    "DATEADD by months": ("DATEADD(month, 1, d)", "d + INTERVAL '1 month'"),
    "date plus an integer": ("d + 1", None),
    "DATEDIFF in days": ("DATEDIFF(day, d, d2)", "d2 - d"),
    "DATEDIFF in months": (
        "DATEDIFF(month, d, d2)",
        "(EXTRACT(YEAR FROM d2) * 12 + EXTRACT(MONTH FROM d2)) "
        "- (EXTRACT(YEAR FROM d) * 12 + EXTRACT(MONTH FROM d))",
    ),
    "DATEDIFF in quarters": (
        "DATEDIFF(quarter, d, d2)",
        "(EXTRACT(YEAR FROM d2) * 4 + FLOOR((EXTRACT(MONTH FROM d2) - 1) / 3)) "
        "- (EXTRACT(YEAR FROM d) * 4 + FLOOR((EXTRACT(MONTH FROM d) - 1) / 3))",
    ),
    "DATEDIFF in years": ("DATEDIFF(year, d, d2)", "EXTRACT(YEAR FROM d2) - EXTRACT(YEAR FROM d)"),
    ":: cast of text to an integer": ("'42'::INT + i", None),
    ":: cast of a decimal to an integer": ("n::INT", None),
    ":: cast of a double to an integer": ("f::INT", None),
    ":: cast of a timestamp to a date": ("ts::DATE", None),
    "TRUNC of a number": ("TRUNC(n, 1)", None),
    "TRUNC of a timestamp": ("TRUNC(ts)", "ts::DATE"),
    "DATE_TRUNC to the month": ("DATE_TRUNC('month', ts)", None),
    "SPLIT_PART": ("SPLIT_PART(s, ',', 2)", None),
    "equality with NULL": ("s2 = NULL", None),
    "boolean comparison": ("b = TRUE", None),
    "IS TRUE": ("b IS TRUE", None),
    "IS NOT DISTINCT FROM": ("s2 IS NOT DISTINCT FROM 'x'", None),
}


def comparable(value: Any) -> Any:
    """Numbers to 6 decimal places (PostgreSQL's numeric division keeps more digits than Spark's decimal)."""
    if isinstance(value, (Decimal, float)):
        return round(float(value), 6)
    return value


@pytest.fixture(scope="module")
def postgres(pg_url):
    with fresh_database(pg_url) as url:
        connection = psycopg2.connect(url)
        connection.autocommit = True
        with connection.cursor() as cursor:
            columns = ", ".join(f"{name} {POSTGRES_TYPES.get(t, t)}" for name, t in COLUMNS.items())
            cursor.execute(f"CREATE TABLE t ({columns})")
            cursor.executemany(f"INSERT INTO t VALUES ({', '.join(['%s'] * len(COLUMNS))})", ROWS)
        yield connection
        connection.close()


@pytest.fixture(scope="module")
def frame(spark):
    return spark.createDataFrame(ROWS, ", ".join(f"{name} {t}" for name, t in COLUMNS.items()))


@pytest.mark.parametrize("name", EXPRESSIONS)
def test_an_expression_computes_in_spark_what_it_computes_on_postgresql(name, spark, frame, postgres):
    redshift, postgres_spelling = EXPRESSIONS[name]
    with postgres.cursor() as cursor:
        cursor.execute(f"SELECT {postgres_spelling or redshift} AS v FROM t ORDER BY id")
        expected = [comparable(v) for (v,) in cursor.fetchall()]

    computed = run_sql(spark, {"t": frame}, f"SELECT {redshift} AS v FROM t ORDER BY id", "redshift")

    assert [comparable(row.v) for row in computed.collect()] == expected


def test_listagg_orders_and_joins_as_redshift_does(spark, frame, postgres):
    with postgres.cursor() as cursor:
        cursor.execute("SELECT string_agg(s2, '|' ORDER BY s2) FROM t")
        [(expected,)] = cursor.fetchall()

    [row] = run_sql(
        spark, {"t": frame}, "SELECT LISTAGG(s2, '|') WITHIN GROUP (ORDER BY s2) AS v FROM t", "redshift"
    ).collect()

    assert row.v == expected


@pytest.mark.parametrize(
    "expression, refusal",
    [
        (
            "PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY value)",
            "PERCENTILE_CONT, which sqlglot turns into Spark's approximate PERCENTILE_APPROX",
        ),
        ("COUNT(CASE WHEN user_id SIMILAR TO 'u0%' THEN 1 END)", "SIMILAR TO, which Spark does not have"),
        (
            "LISTAGG(DISTINCT user_id, ',')",
            "LISTAGG(DISTINCT …), which sqlglot turns into a LISTAGG call Spark refuses",
        ),
    ],
)
def test_a_construct_spark_would_compute_otherwise_is_refused_at_validate(tmp_path, expression, refusal):
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    sql = f"SELECT event_ts::DATE AS event_date, COUNT(*) AS total_events, {expression} AS unique_users "
    stage = tmp_path / "stage.yaml"
    stage.write_text(f"""stages:
  - pipeline_id: user_events_etl
    stage_order: 3
    stage_name: gold_daily_aggregate
    input_id: silver_user_events
    target_id: gold_daily_user_events
    sql_dialect: redshift
    transform_sql: "{sql}FROM silver_user_events GROUP BY 1"
""")
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [stage])
    assert [p.message for p in refused.value.problems] == [
        f"uses {refusal}: Spark would not compute it as redshift does"
    ]
