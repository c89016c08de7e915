"""SQL: a stage's transform_sql is one query over its declared inputs, refused otherwise at load and at
run."""

from __future__ import annotations

import json

import pytest

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.engine.transform import run_sql
from medallion_assets.loading import validate_files
from medallion_assets.sql_safety import UnsafeSql
from tests.conftest import SEED

DECLARED = "declared inputs: silver_user_events"
ATTACKS = [
    (
        "SELECT value FROM text.`/etc/hostname`",
        'reads text."/etc/hostname" by path or qualified name; it may read only its declared inputs '
        "(silver_user_events), by id",
    ),
    (
        "SELECT * FROM read_files('/etc/passwd')",
        "reads from the table function READ_FILES('/etc/passwd'); it may read only its declared inputs "
        "(silver_user_events)",
    ),
    (
        "SELECT reflect('java.lang.Runtime', 'getRuntime') AS event_date FROM silver_user_events",
        "calls reflect(), which runs JVM code; it is not allowed",
    ),
    (
        "SELECT java_method('java.lang.System', 'exit', 1) AS event_date FROM silver_user_events",
        "calls java_method(), which runs JVM code; it is not allowed",
    ),
    (
        "SELECT system.builtin.`reflect`('java.lang.Thread', 'sleep', 99999999L) AS x FROM "
        "silver_user_events",
        "calls reflect(), which runs JVM code; it is not allowed",
    ),
    (
        "SELECT TRANSFORM(event_id) USING 'touch /tmp/owned' AS (event_date) FROM silver_user_events",
        "holds QUERYTRANSFORM (TRANSFORM(event_id) USING 'touch /tmp/owned' AS (event_date)); only a query "
        "is allowed",
    ),
    (
        "CREATE TABLE wiped USING parquet LOCATION '/srv/lake/silver' AS SELECT 1",
        "must be a query (SELECT, WITH … SELECT, or a UNION/INTERSECT/EXCEPT of them), not CREATE",
    ),
    (
        "INSERT OVERWRITE DIRECTORY '/srv/lake' SELECT 1",
        "must be a query (SELECT, WITH … SELECT, or a UNION/INTERSECT/EXCEPT of them), not INSERT",
    ),
    (
        "SET spark.sql.legacy.allowNonEmptyLocationInCTAS=true",
        "must be a query (SELECT, WITH … SELECT, or a UNION/INTERSECT/EXCEPT of them), not SET",
    ),
    (
        "ADD JAR /tmp/evil.jar",
        "must be a query (SELECT, WITH … SELECT, or a UNION/INTERSECT/EXCEPT of them), not COMMAND",
    ),
    (
        "SELECT event_id FROM silver_user_events; DROP TABLE silver_user_events",
        "must be exactly one query; found 2 statements",
    ),
    ("SELECT * FROM silver_orders", f"reads 'silver_orders', which the stage does not declare; {DECLARED}"),
    (
        "SELECT * FROM spark_catalog.default.silver_user_events",
        "reads spark_catalog.default.silver_user_events by path or qualified name; it may read only its "
        "declared inputs (silver_user_events), by id",
    ),
]


@pytest.fixture
def store(tmp_path) -> CatalogStore:
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    return store


def stage_file(tmp_path, sql: str):
    path = tmp_path / "attack.yaml"
    path.write_text(f"""# an attacker's stage
stages:
  - pipeline_id: user_events_etl
    stage_order: 3
    stage_name: gold_daily_aggregate
    input_id: silver_user_events
    target_id: gold_daily_user_events
    transform_sql: {json.dumps(sql)}
""")
    return path


@pytest.mark.parametrize("sql, refusal", ATTACKS)
def test_an_unsafe_transformation_is_refused_at_load_with_its_file_and_line(store, tmp_path, sql, refusal):
    before = store.snapshot().stages("user_events_etl")
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [stage_file(tmp_path, sql)])
    [problem] = refused.value.problems
    assert str(problem) == (
        f"{tmp_path}/attack.yaml:3: stages[user_events_etl.gold_daily_aggregate].transform_sql: {refusal}"
    )
    assert store.snapshot().stages("user_events_etl") == before


@pytest.mark.parametrize("sql, refusal", ATTACKS)
def test_an_unsafe_transformation_that_reached_the_catalog_is_refused_again_before_spark_runs_it(
    spark, sql, refusal
):
    inputs = {"silver_user_events": spark.createDataFrame([("e1", 1.0)], "event_id string, value double")}
    with pytest.raises(UnsafeSql) as refused:
        run_sql(spark, inputs, sql, "spark")
    assert str(refused.value) == refusal


def test_the_attacks_are_real_spark_would_run_them(spark, tmp_path):
    """What the check stands between: Spark reads a local file by path and calls any static Java method."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret\n")
    assert [row.value for row in spark.sql(f"SELECT value FROM text.`{secret}`").collect()] == [
        "the host's secret"
    ]
    [home] = spark.sql("SELECT reflect('java.lang.System', 'getProperty', 'java.home') AS home").collect()
    assert home.home
    with pytest.raises(UnsafeSql):
        run_sql(spark, {}, f"SELECT value FROM text.`{secret}`", "spark")


def test_a_typo_in_a_column_is_refused_at_load_with_the_names_it_could_have_meant(store, tmp_path):
    sql = (
        "SELECT event_ts::DATE AS event_date, COUNT(*) AS total_events, COUNT(DISTINCT usr_id) AS "
        "unique_users FROM silver_user_events GROUP BY 1"
    )
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [stage_file(tmp_path, sql)])
    [problem] = refused.value.problems
    assert str(problem) == (
        # Line 8 holds the SQL's (only) line; the stage's row starts on line 3.
        f"{tmp_path}/attack.yaml:8: stages[user_events_etl.gold_daily_aggregate].transform_sql: names column "
        "'usr_id', which its input does not have; did you mean user_id?"
    )


def test_a_qualified_typo_and_an_unknown_alias_are_refused_in_a_join(store, tmp_path):
    seed_sql = store.snapshot().stage_producing("silver_orders").transform_sql
    for typo, message in [
        ("c.country", "names column 'c.countyr', which its input does not have; did you mean country?"),
        ("o.amount", "names column x.amount, but reads no relation 'x'"),
    ]:
        broken_sql = seed_sql.replace(typo, {"c.country": "c.countyr", "o.amount": "x.amount"}[typo])
        (tmp_path / "join.yaml").write_text(f"""stages:
  - pipeline_id: orders_etl
    stage_order: 3
    stage_name: silver_orders_enrich
    input_id: bronze_orders
    inputs: [bronze_customers]
    target_id: silver_orders
    transform_sql: {json.dumps(broken_sql)}
""")
        with pytest.raises(CatalogInvalid) as refused:
            validate_files(store.snapshot(), [tmp_path / "join.yaml"])
        assert [p.message for p in refused.value.problems] == [message]


def test_safe_queries_over_declared_inputs_still_run(spark):
    inputs = {
        "silver_user_events": spark.createDataFrame(
            [("e1", 1.0), ("e2", 2.0)], "event_id string, value double"
        )
    }
    sql = """WITH doubled AS (SELECT event_id, value * 2 AS v FROM silver_user_events)
             SELECT event_id, v, r.id FROM doubled CROSS JOIN range(2) r
             UNION ALL SELECT event_id, value, -1 FROM silver_user_events"""
    assert sorted(tuple(row) for row in run_sql(spark, inputs, sql, "spark").collect()) == [
        ("e1", 1.0, -1),
        ("e1", 2.0, 0),
        ("e1", 2.0, 1),
        ("e2", 2.0, -1),
        ("e2", 4.0, 0),
        ("e2", 4.0, 1),
    ]
