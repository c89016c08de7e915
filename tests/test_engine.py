"""The engine alone, on small files and DataFrames: no Dagster involved."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from medallion_assets.catalog.models import Source
from medallion_assets.engine.ingest import _reading_order, ingest
from medallion_assets.engine.transform import conform, deduplicate, to_spark_sql
from medallion_assets.errors import SourceSchemaDrift
from medallion_assets.naming import InvalidIdentifier, quote_qualified, spark_identifier
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables
from medallion_assets.storage.objects import ObjectInfo, list_objects
from tests.lake import lake_rows


def source(tmp_path, file_format: str, columns: dict, **options) -> Source:
    return Source(
        source_id="s",
        s3_path=str(tmp_path / "raw"),
        file_format=file_format,
        columns=columns,
        options=options,
    )


def run_ingest(spark, tmp_path, src: Source):
    """Ingest every object of `src` as one batch into the bronze table of a lake of its own; its rows and its
    quarantine's rows, read with pyiceberg."""
    lake = tmp_path / "lake"
    table = TableRef("lake", "bronze", "s")
    result = ingest(
        LakeTables(spark, Lake.resolve(lake)), src, list_objects(src.s3_path), (table, None), "b1"
    )
    bronze = sorted(lake_rows(lake, "bronze.s"), key=lambda r: (r["_source_file"], r["_source_line"]))
    quarantine = lake_rows(lake, "bronze.s_quarantine") if result.rows_quarantined else []
    return result, bronze, quarantine


def test_csv_rows_with_wrong_field_counts_are_quarantined_with_their_line(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.csv").write_text(
        'id,name,amount\n1,"Smith, J",2.5\n2,too,many,fields\n\n3,x,abc\n4,y,7\n'
    )
    result, bronze, quarantine = run_ingest(
        spark, tmp_path, source(tmp_path, "csv", {"id": "int", "name": "string", "amount": "double"})
    )
    assert (result.rows_read, result.rows_written, result.rows_quarantined) == (4, 2, 2)
    assert [(r["id"], r["name"], r["amount"], r["_source_line"]) for r in bronze] == [
        (1, "Smith, J", 2.5, 2),
        (4, "y", 7.0, 6),
    ]
    assert sorted((r["_source_line"], r["raw"]) for r in quarantine) == [
        (3, "2,too,many,fields"),
        (5, "3,x,abc"),
    ]
    assert all(r["_source_file"].endswith("/raw/a.csv") for r in quarantine)
    assert (
        quarantine[0]["reason"] == "wrong number of fields or a value that does not fit the declared schema"
    )


def test_jsonl_lines_that_are_not_objects_are_quarantined(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "e.jsonl").write_text(
        '{"id": "a", "n": 1}\n[1, 2]\n42\n{"id": "b", "n": 2\n{"id": "c"}\n'
    )
    result, bronze, quarantine = run_ingest(
        spark, tmp_path, source(tmp_path, "jsonl", {"id": "string", "n": "bigint"})
    )
    assert [(r["id"], r["n"], r["_source_line"]) for r in bronze] == [("a", 1, 1), ("c", None, 5)]
    assert sorted(r["_source_line"] for r in quarantine) == [2, 3, 4]
    assert result.rows_read == result.rows_written + result.rows_quarantined == 5


def test_parquet_sources_keep_their_object_and_row(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    for name, ids in (("p1.parquet", ["x", "y"]), ("p2.parquet", ["z"])):
        pq.write_table(pa.table({"id": ids}), tmp_path / "raw" / name)
    result, bronze, _ = run_ingest(spark, tmp_path, source(tmp_path, "parquet", {"id": "string"}))
    assert [(r["id"], r["_source_file"].rsplit("/", 1)[1], r["_source_line"]) for r in bronze] == [
        ("x", "p1.parquet", 1),
        ("y", "p1.parquet", 2),
        ("z", "p2.parquet", 1),
    ]
    assert result.rows_quarantined == 0


def test_objects_are_read_in_an_order_whose_consecutive_runs_hold_even_bytes():
    # A range hands each task a run of consecutive indexes: with 2 or 4 tasks, each holds 9 or 18 bytes.
    objects = [ObjectInfo(f"s3://b/{size}", size, str(size)) for size in (3, 8, 1, 5, 2, 7, 4, 6)]
    ordered = [info.size for info in _reading_order(objects)]
    assert ordered == [8, 1, 7, 2, 6, 3, 5, 4]
    assert [sum(ordered[start : start + 4]) for start in (0, 4)] == [18, 18]
    assert {sum(ordered[start : start + 2]) for start in range(0, 8, 2)} == {9}


def test_undeclared_parquet_columns_are_schema_drift_and_nothing_is_written(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    pq.write_table(pa.table({"id": ["x"], "extra": [0]}), tmp_path / "raw" / "p1.parquet")
    with pytest.raises(
        SourceSchemaDrift, match=r"p1.parquet has fields not in the catalog: extra \(bigint\)$"
    ):
        run_ingest(spark, tmp_path, source(tmp_path, "parquet", {"id": "string"}))
    assert [path for path in (tmp_path / "bronze").rglob("*") if path.is_file()] == []


def test_python_workers_import_the_installed_pyspark_and_read_no_archive_of_spark_before_each_task(spark):
    """Spark puts its zip of PySpark first on its Python workers' path; compiled afresh in every process, it
    cost 0.85 s of CPU a daemon. A worker re-reads the directory of every archive it has an importer for
    before each task: 13 ms for the zips, 80 ms for the jar of Spark's core classes. Medallion's daemon
    imports the installed, compiled package instead, and leaves Spark's archives off the path."""
    import py4j
    import pyspark

    def seen_by_a_worker(_):
        import sys
        import zipimport

        archives = [
            key
            for key, finder in sys.path_importer_cache.items()
            if isinstance(finder, zipimport.zipimporter)
        ]
        return __import__("pyspark").__file__, __import__("py4j").__file__, sys.path, archives

    [(pyspark_file, py4j_file, path, archives)] = (
        spark.sparkContext.parallelize([0], 1).map(seen_by_a_worker).collect()
    )
    assert (pyspark_file, py4j_file) == (pyspark.__file__, py4j.__file__)
    assert ".zip" not in pyspark.__file__ + py4j.__file__
    spark_home = os.path.dirname(pyspark.__file__)
    assert not [entry for entry in path + archives if entry.startswith(spark_home)], (path, archives)


def test_conform_names_the_field_and_value_that_did_not_cast(spark):
    frame = spark.createDataFrame(
        [("1", "2026-11-01T10:00:00Z"), ("x", "later"), ("3", None)], "id string, ts string"
    )
    conformed = conform(frame, {"id": "int", "ts": "timestamp"})
    assert [tuple(r) for r in conformed.valid.collect()] == [(1, dt.datetime(2026, 11, 1, 10)), (3, None)]
    assert [r["reason"] for r in conformed.rejected.collect()] == [
        "id: cannot cast x to int; ts: cannot cast later to timestamp"
    ]


def test_conform_counts_its_rejects_while_the_valid_rows_are_computed(spark):
    frame = spark.createDataFrame(
        [("1", "2026-11-01T10:00:00Z"), ("x", "2026-11-01T11:00:00Z"), ("2", "later"), (None, None)],
        "id string, ts string",
    )
    conformed = conform(frame, {"id": "int", "ts": "timestamp"})
    assert conformed.valid.columns == ["id", "ts"]
    assert [tuple(r) for r in conformed.valid.collect()] == [(1, dt.datetime(2026, 11, 1, 10)), (None, None)]
    assert conformed.counts.result == {"rows": 2, "rows in": 4}  # observed by that action: no pass of its own
    assert [(r["reason"], r["raw"]) for r in conformed.rejected.collect()] == [
        ("id: cannot cast x to int", '{"id":"x","ts":"2026-11-01T11:00:00Z"}'),
        ("ts: cannot cast later to timestamp", '{"id":"2","ts":"later"}'),
    ]


def test_conform_keeps_columns_named_like_its_helper_columns_apart(spark):
    # A declared column may be named anything an identifier allows, underscores first.
    frame = spark.createDataFrame([("x", None, "5")], "a string, _typed_a string, _rejected string")
    conformed = conform(frame, {"a": "string", "_typed_a": "int", "_rejected": "int"})
    assert [tuple(r) for r in conformed.valid.collect()] == [("x", None, 5)]
    assert conformed.rejected.collect() == []


@pytest.mark.parametrize(
    ("columns", "refusal"),
    [
        ({"a": "int) AS a, current_user() AS (b"}, ValueError),  # a type that would end the cast's SQL
        ({"a` , current_user() AS `b": "int"}, InvalidIdentifier),  # a name that would end its quotes
    ],
)
def test_conform_refuses_a_name_or_type_that_would_rewrite_its_cast_sql(spark, columns, refusal):
    # The casts are SQL text: a row that slipped past the catalog's checks is refused before any SQL is made.
    frame = spark.createDataFrame([("1",)], "a string")
    with pytest.raises(refusal):
        conform(frame, columns)


def test_deduplicate_keeps_the_latest_by_the_given_column(spark):
    frame = spark.createDataFrame(
        [("a", 1, "old"), ("a", 3, "new"), ("b", 2, "only")], "k string, v int, tag string"
    )
    kept = deduplicate(frame, ["k"], keep_latest_by="v")
    assert sorted(tuple(r) for r in kept.collect()) == [("a", 3, "new"), ("b", 2, "only")]


def test_redshift_sql_is_transpiled_for_spark(spark):
    sql = to_spark_sql(
        "SELECT NVL(a, 0) AS a, GETDATE() AS t, x::DATE AS d FROM t",
        "redshift",
        {"t": {"a": "int", "x": "string"}},
    )
    assert sql == (
        "SELECT COALESCE(t.a, 0) AS a, CURRENT_TIMESTAMP() AS t, CAST(t.x AS DATE) AS d FROM t AS t"
    )
    assert to_spark_sql("SELECT 1 AS one", "spark", {}) == "SELECT 1 AS one"


@pytest.mark.parametrize("name", ['a"b', "x;drop", "has space", "1abc", ""])
def test_identifiers_that_are_not_plain_names_are_refused(name):
    with pytest.raises(InvalidIdentifier):
        spark_identifier(name)
    with pytest.raises(InvalidIdentifier):
        quote_qualified(f"analytics.{name}")


def test_qualified_names_are_quoted_part_by_part():
    assert quote_qualified("analytics.daily") == '"analytics"."daily"'
    assert spark_identifier("event_id") == "`event_id`"


@pytest.mark.integration  # a fresh interpreter
def test_the_engine_imports_nothing_of_dagster():
    """DESIGN rule 2: ingest, transform, validate and load run anywhere, without the orchestrator."""
    script = (
        "import sys, medallion_assets.engine.stage; "
        "print(sorted(m for m in sys.modules if m.startswith('dagster')))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
