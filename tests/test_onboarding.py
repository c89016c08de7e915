"""SQL onboarding: accuracy on a hand-written corpus, the command's behaviour, and the loop closed through
Dagster.

The closing-the-loop test onboards SQL only (the seed's gold stage, and COPY → cleaning INSERT → aggregate
CTAS), materializes the generated assets on real Spark against a loopback S3 API, and compares gold with the
same SQL run directly on PostgreSQL over the same rows.
"""

from __future__ import annotations

import csv
import io
import json
import random
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import psycopg2
import pytest
from click.testing import CliRunner

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.models import LOADABLE, Stage
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.cli import main
from medallion_assets.engine.transform import run_sql
from medallion_assets.onboarding import parse
from medallion_assets.onboarding.lineage import SqlAnalyzer
from medallion_assets.onboarding.onboard import onboard
from medallion_assets.onboarding.statements import split_statements
from medallion_assets.sample_data import write_sample_data
from medallion_assets.storage.objects import list_objects, read_bytes
from tests.onboarding_accuracy import ALL_CORPORA, CORPUS, DOCS_CORPUS, NO_DDL_CORPUS, corpus_files, score

SEED_GOLD_SQL = """\
INSERT INTO analytics.daily_user_events
SELECT event_ts::DATE AS event_date,
       COUNT(*) AS total_events,
       COUNT(DISTINCT user_id) AS unique_users
FROM silver_user_events
GROUP BY 1;
"""


def chain_statements(bucket: str) -> list[str]:
    """Raw orders CSV → bronze (COPY) → cleaned silver (INSERT) → daily gold aggregate (CTAS), as SQL only."""
    return [
        "CREATE SCHEMA IF NOT EXISTS shop_raw",
        "CREATE TABLE shop_raw.orders (order_id VARCHAR(20), customer_id VARCHAR(20), order_ts VARCHAR(40), "
        "amount VARCHAR(20))",
        f"COPY shop_raw.orders FROM 's3://{bucket}/orders/' IAM_ROLE default FORMAT AS CSV IGNOREHEADER 1 "
        "MAXERROR 100",
        "CREATE TABLE shop_clean.orders (order_id VARCHAR(20), customer_id VARCHAR(20), order_ts TIMESTAMP, "
        "amount DECIMAL(12,2))",
        "INSERT INTO shop_clean.orders\n"
        "SELECT DISTINCT order_id, customer_id, CAST(order_ts AS TIMESTAMP), CAST(amount AS DECIMAL(12,2))\n"
        "FROM shop_raw.orders\n"
        "WHERE amount ~ '^[0-9]+([.][0-9]+)?$'",
        "CREATE TABLE shop_mart.daily_orders AS\n"
        "SELECT CAST(order_ts AS DATE) AS order_date, COUNT(*) AS orders,\n"
        "       COUNT(DISTINCT customer_id) AS customers, SUM(amount) AS revenue\n"
        "FROM shop_clean.orders\n"
        "GROUP BY 1",
        "GRANT SELECT ON shop_mart.daily_orders TO GROUP analysts",
    ]


def no_ddl_chain_statements(bucket: str) -> list[str]:
    """Raw orders without any CREATE TABLE: the COPY lists the columns, CTAS makes the rest."""
    return [
        f"COPY lake_raw.orders (order_id, customer_id, order_ts, amount) FROM 's3://{bucket}/no_ddl/orders/' "
        "IAM_ROLE default CSV IGNOREHEADER 1 MAXERROR 100",
        "CREATE TABLE lake_clean.orders AS\n"
        "SELECT DISTINCT order_id, customer_id, order_ts::TIMESTAMP AS order_ts, amount::DECIMAL(12,2) AS "
        "amount\nFROM lake_raw.orders\n"
        "WHERE amount ~ '^[0-9]+([.][0-9]+)?$'",
        "CREATE TABLE lake_mart.customer_days AS\n"
        "SELECT DATE(order_ts) AS order_date, COUNT(DISTINCT customer_id) AS customers, SUM(amount) AS "
        "revenue\nFROM (SELECT customer_id, order_ts, amount,\n"
        "             ROW_NUMBER() OVER (PARTITION BY order_id ORDER BY order_ts) AS copy_number\n"
        "      FROM lake_clean.orders) AS deduplicated\n"
        "WHERE copy_number = 1\n"
        "GROUP BY DATE(order_ts)",
    ]


def write_sql(path: Path, statements: list[str]) -> Path:
    path.write_text(";\n\n".join(statements) + ";\n")
    return path


@pytest.fixture
def store(tmp_path) -> CatalogStore:
    catalog = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    catalog.migrate()
    return catalog


@pytest.fixture
def cli(store, monkeypatch):
    """`medallion …` in process, on the test's catalog."""
    monkeypatch.setenv("MEDALLION_CATALOG_URL", store.url)
    runner = CliRunner()
    return lambda *args: runner.invoke(main, [str(a) for a in args], catch_exceptions=False)


def all_rows(store: CatalogStore) -> dict[str, list[dict]]:
    return {table: sorted(store.table_rows(table), key=repr) for table in LOADABLE}


# --- accuracy ---------------------------------------------------------------------------------------------


def test_corpus_lineage_matches_the_hand_written_expectations(store):
    report = onboard(corpus_files(), store, pipeline_id="corpus", dry_run=True)
    scores = score(report.as_json()["statements"])
    print(
        f"\ncorpus: {scores.lineage_statements} lineage statements of {scores.statements}; "
        f"table P={scores.table.precision:.3f} R={scores.table.recall:.3f}; "
        f"column P={scores.column.precision:.3f} R={scores.column.recall:.3f}"
    )
    assert scores.lineage_statements >= 40
    assert (scores.table.precision, scores.table.recall) == (1.0, 1.0), scores.differences
    assert scores.column.precision >= 0.95 and scores.column.recall >= 0.95, scores.differences
    # Kinds, statuses, targets and lines are all as expected: only column kinds may differ.
    assert [d for d in scores.differences if ": columns: " not in d] == []
    assert not report.failed


def test_no_ddl_corpus_meets_the_goals_and_says_what_every_statement_became(store):
    report = onboard(corpus_files(NO_DDL_CORPUS), store, pipeline_id="no_ddl", dry_run=True)
    scores = score(report.as_json()["statements"], NO_DDL_CORPUS)
    print(
        f"\nno-DDL corpus: {scores.lineage_statements} lineage statements of {scores.statements}; "
        f"table P={scores.table.precision:.3f} R={scores.table.recall:.3f}; "
        f"column P={scores.column.precision:.3f} R={scores.column.recall:.3f}"
    )
    assert scores.statements >= 60 and scores.lineage_statements >= 45
    assert scores.table.precision >= 0.98 and scores.table.recall >= 0.98, scores.differences
    assert scores.column.precision >= 0.95 and scores.column.recall >= 0.95, scores.differences
    assert [d for d in scores.differences if ": columns: " not in d] == []
    # The refused loads fail with what to change; every other statement is onboarded or skipped with a reason.
    failed = {s.line: s.error.removeprefix(f"{s.file}:") for s in report.statements if s.status == "failed"}
    assert failed == {
        22: "22: COPY ORC: the bronze ingest cannot read ORC files (it reads CSV, JSON lines and parquet: "
        "export them as parquet)",
        24: "25: COPY MANIFEST: the bronze ingest cannot read manifests, which list the files to load (point "
        "the COPY at the files' prefix instead)",
    }
    assert all(s.reason for s in report.statements if s.status == "skipped")


def test_docs_corpus_meets_the_goals_and_refuses_only_what_the_bronze_ingest_cannot_read(store):
    report = onboard(corpus_files(DOCS_CORPUS), store, pipeline_id="docs", dry_run=True)
    scores = score(report.as_json()["statements"], DOCS_CORPUS)
    print(
        f"\ndocs corpus: {scores.lineage_statements} lineage statements of {scores.statements}; "
        f"table P={scores.table.precision:.3f} R={scores.table.recall:.3f}; "
        f"column P={scores.column.precision:.3f} R={scores.column.recall:.3f}"
    )
    assert scores.statements >= 60 and scores.lineage_statements >= 45
    assert scores.table.precision >= 0.98 and scores.table.recall >= 0.98, scores.differences
    assert scores.column.precision >= 0.98 and scores.column.recall >= 0.98, scores.differences
    assert [d for d in scores.differences if ": columns: " not in d] == []
    failed = {s.line: s.error.removeprefix(f"{s.file}:") for s in report.statements if s.status == "failed"}
    reads = "it reads CSV, JSON lines and parquet"
    assert failed == {
        5: "5: COPY JSON s3://docs-raw/jsonpaths.json: JSONPaths files are not supported, use 'auto'",
        7: f"7: COPY AVRO: the bronze ingest cannot read Avro files ({reads}: export them as parquet)",
        8: f"8: COPY ORC: the bronze ingest cannot read ORC files ({reads}: export them as parquet)",
        9: f"9: COPY FIXEDWIDTH: the bronze ingest cannot read fixed-width files ({reads}: export them "
        "delimited)",
        13: "13: COPY LZOP: the bronze ingest cannot read lzop-compressed files (it reads gzip, bzip2 and "
        "zstd)",
        14: "14: COPY MANIFEST: the bronze ingest cannot read manifests, which list the files to load (point "
        "the COPY at the files' prefix instead)",
        17: "17: COPY must read FROM one 's3://…' path",
    }
    by_place = {(Path(s.file).name, s.line): s for s in report.statements}
    assert by_place["06_ctes_and_derived.sql", 6].warnings[0] == (
        "column 1 of public.one_row (1) has no name: it is _col_0 (give it one with AS)"
    )
    assert by_place["02_merge.sql", 20].warnings[0] == (
        "column lineage unavailable (the MERGE's INSERT lists no columns and those of public.archive are "
        "unknown: list them (INSERT (a, b) VALUES …) or declare them with CREATE TABLE before the MERGE): "
        "lineage to the whole target only"
    )


# --- statements and errors --------------------------------------------------------------------------------


def test_a_statement_that_fails_in_a_way_nobody_foresaw_is_its_own_error(store, tmp_path, monkeypatch):
    """Stand-ins for bugs, one while reading a statement and one while analysing another: each is that
    statement's error with the exception's message, and the statements around them are onboarded."""
    analyze = SqlAnalyzer._analyze

    def failing_analysis(self, transformation):
        if transformation.target == "silver.boom":
            raise KeyError("properties")
        return analyze(self, transformation)

    def failing_update(statement, update):
        raise AttributeError("'bool' object has no attribute 'expressions'")

    monkeypatch.setattr(SqlAnalyzer, "_analyze", failing_analysis)
    monkeypatch.setattr(parse, "_update", failing_update)
    sql = write_sql(
        tmp_path / "mixed.sql",
        [
            "CREATE TABLE silver.a AS SELECT id FROM raw.a",
            "CREATE TABLE silver.boom AS SELECT id FROM raw.a",
            "UPDATE silver.a SET id = 1",
            "CREATE TABLE silver.b AS SELECT id FROM silver.a",
        ],
    )
    report = onboard([sql], store, pipeline_id="mixed", dry_run=True)
    assert [(s.line, s.status, s.error) for s in report.statements] == [
        (1, "onboarded", None),
        (3, "failed", f"{sql}:3: KeyError: 'properties'"),
        (5, "failed", f"{sql}:5: AttributeError: 'bool' object has no attribute 'expressions'"),
        (7, "onboarded", None),
    ]


@pytest.mark.parametrize("corpus", ALL_CORPORA, ids=["with_ddl", "no_ddl", "docs"])
def test_onboard_prints_json_for_every_statement_of_sql_cut_at_random_points(cli, tmp_path, corpus):
    """Every statement of the corpora cut at a random point (seeded): whatever is left, `medallion onboard`
    gives each piece a line, as JSON."""
    chance = random.Random(25)
    files = []
    for path in corpus_files(corpus):
        cut = [
            statement.text[: chance.randint(1, len(statement.text))]
            for statement in split_statements(str(path), path.read_text())
        ]
        files.append(write_sql(tmp_path / path.name, cut))
    result = cli("onboard", *files, "--json", "--dry-run")
    assert result.exit_code in (0, 1), result.output
    statements = json.loads(result.stdout)["statements"]
    pieces = [
        (str(path), statement.line)
        for path in files
        for statement in split_statements(str(path), path.read_text())
    ]
    assert [(s["file"], s["line"]) for s in statements] == pieces
    assert all(s["status"] != "failed" or s["error"] for s in statements)


def test_statements_are_split_at_semicolons_outside_strings_and_comments():
    text = (
        "-- a comment; not a statement\n"
        "SELECT 'a;b' AS x, \"odd;name\" FROM t;\n"
        "\n"
        "/* block ; comment */ INSERT INTO u\n"
        "SELECT 'it''s; fine', $$ body; $$ FROM t;SELECT 3\n"
    )
    statements = split_statements("f.sql", text)
    assert [(s.line, s.text) for s in statements] == [
        (2, "SELECT 'a;b' AS x, \"odd;name\" FROM t"),
        (4, "INSERT INTO u\nSELECT 'it''s; fine', $$ body; $$ FROM t"),
        (5, "SELECT 3"),
    ]


def test_a_bad_statement_is_reported_with_file_line_and_reason_and_the_others_are_onboarded(
    cli, store, tmp_path
):
    sql = write_sql(
        tmp_path / "mixed.sql",
        [
            "CREATE TABLE silver.a AS SELECT 1 AS x",
            "INSERT INTO silver.b\nSELECT x FROM silver.a WHERE (x > 1",
            "INSERT INTO silver.c SELECT 'never closed FROM silver.a",
        ],
    )
    sql.write_text(sql.read_text() + "INSERT INTO silver.d SELECT x FROM silver.a;\n")
    result = cli("onboard", sql, "--json")
    assert result.exit_code == 1
    statements = json.loads(result.stdout)["statements"]
    assert [(s["line"], s["status"]) for s in statements] == [
        (1, "onboarded"),
        (3, "failed"),
        (6, "failed"),
        (7, "onboarded"),
    ]
    bad = statements[1]
    assert bad["error"] == f"{sql}:4: does not parse as redshift: Expecting )"
    assert statements[2]["error"].startswith(f"{sql}:6: cannot be tokenized as redshift: ")
    assert [s["target"] for s in statements] == ["silver.a", None, None, "silver.d"]
    targets = {t.location for t in store.snapshot().targets.values()}
    assert targets == {"silver.a", "silver.d"}


def test_statements_that_transform_nothing_are_skipped_and_listed(cli, store, tmp_path):
    sql = write_sql(
        tmp_path / "maintenance.sql",
        [
            "GRANT SELECT ON analytics.t TO bob",
            "VACUUM analytics.t",
            "ANALYZE analytics.t",
            "SET search_path TO analytics",
            "SELECT 1",
        ],
    )
    result = cli("onboard", sql, "--json")
    assert result.exit_code == 0, result.output
    statements = json.loads(result.stdout)["statements"]
    assert [(s["kind"], s["status"]) for s in statements] == [
        ("grant", "skipped"),
        ("vacuum", "skipped"),
        ("analyze", "skipped"),
        ("set", "skipped"),
        ("select", "skipped"),
    ]
    assert all(rows == [] for rows in all_rows(store).values())


def test_without_ddl_columns_resolve_by_scope_and_a_truly_ambiguous_one_is_reported(cli, tmp_path):
    sql = write_sql(
        tmp_path / "unknown.sql",
        [
            "INSERT INTO mart.mystery SELECT l.a, b, c FROM ext.left_t l JOIN ext.right_t r ON l.id = r.id "
            "WHERE l.b > 0",
            "INSERT INTO mart.whole SELECT * FROM ext.left_t",
        ],
    )
    result = cli("onboard", sql, "--json")
    assert result.exit_code == 0
    joined, starred = json.loads(result.stdout)["statements"]
    assert joined["sources"] == ["ext.left_t", "ext.right_t"]
    # a is l's outright; b is l's because l is shown to hold it; c may be either table's.
    assert joined["columns"] == [
        {"target": "a", "sources": ["ext.left_t.a"], "transformations": {"ext.left_t.a": "identity"}},
        {"target": "b", "sources": ["ext.left_t.b"], "transformations": {"ext.left_t.b": "identity"}},
        {
            "target": "c",
            "sources": ["ext.left_t.c", "ext.right_t.c"],
            "transformations": {"ext.left_t.c": "ambiguous", "ext.right_t.c": "ambiguous"},
        },
        {
            "target": "*",
            "sources": ["ext.left_t.b", "ext.left_t.id", "ext.right_t.id"],
            "transformations": {
                "ext.left_t.b": "filter",
                "ext.left_t.id": "join_key",
                "ext.right_t.id": "join_key",
            },
        },
    ]
    assert joined["warnings"][0] == (
        "target column c: c is ambiguous, it may be ext.left_t.c or ext.right_t.c "
        "(their columns are unknown); qualify it with its table"
    )
    # SELECT * over a table of unknown columns cannot be expanded: table level only, and it says why.
    assert starred["sources"] == ["ext.left_t"] and starred["columns"] == []
    assert starred["warnings"][0] == (
        "column lineage unavailable (SELECT * over a table whose columns are "
        "unknown): table-level lineage only"
    )


def test_columns_shown_in_one_run_resolve_bare_columns_in_the_next_through_the_catalog(store, tmp_path):
    first = write_sql(
        tmp_path / "first.sql",
        [
            "CREATE TABLE silver.orders_clean AS SELECT order_id, amount::DECIMAL(12,2) AS amount FROM "
            "staging.feed"
        ],
    )
    assert not onboard([first], store, pipeline_id="p").failed
    second = write_sql(
        tmp_path / "second.sql",
        [
            "CREATE TABLE gold.noted AS SELECT o.order_id, amount, note "
            "FROM silver.orders_clean o JOIN staging.notes n ON n.order_id = o.order_id"
        ],
    )
    [statement] = onboard([second], store, pipeline_id="p").statements
    by_target = {c["target"]: c["transformations"] for c in statement.columns}
    # The catalog's lineage of the first run shows silver.orders_clean has amount; nothing shows who has note.
    assert by_target["amount"] == {"silver.orders_clean.amount": "identity"}
    assert by_target["note"] == {"silver.orders_clean.note": "ambiguous", "staging.notes.note": "ambiguous"}
    rows = {
        (r.upstream, r.upstream_column)
        for r in store.snapshot().tables["column_lineage"].values()
        if r.downstream == statement.dataset and r.downstream_column in ("amount", "note")
    }
    assert rows == {("silver_orders_clean", "amount")}  # ambiguous edges stay out of the catalog


def test_names_that_are_not_plain_identifiers_are_refused_with_the_statement_line(cli, store, tmp_path):
    sql = write_sql(
        tmp_path / "names.sql",
        [
            "CREATE TABLE silver.ok AS SELECT 1 AS x",
            'CREATE TABLE silver.bad AS SELECT x AS "x; DROP TABLE y" FROM silver.ok',
        ],
    )
    result = cli("onboard", sql, "--json")
    assert result.exit_code == 1
    bad = json.loads(result.stdout)["statements"][1]
    assert bad["error"] == (
        f"{sql}:3: cannot become catalog rows: column of silver.bad 'x; drop table y' is not "
        "a plain name (letters, digits and underscores, not starting with a digit)"
    )
    assert {t.location for t in store.snapshot().targets.values()} == {"silver.ok"}


def test_copy_options_become_the_raw_source_and_unreadable_formats_are_refused(store, tmp_path):
    sql = write_sql(
        tmp_path / "loads.sql",
        [
            "CREATE TABLE raw.a (id INT, label VARCHAR(10), amount DECIMAL(8,2), at TIMESTAMP)",
            "COPY raw.a FROM 's3://b/a/' IAM_ROLE default CSV DELIMITER ';' QUOTE AS '''' IGNOREHEADER 1 "
            "NULL AS 'none' MAXERROR 5 BLANKSASNULL",
            "COPY raw.j (id, label) FROM 's3://b/j/' IAM_ROLE default FORMAT AS JSON 'auto'",
            "COPY raw.a FROM 's3://b/zipped/' IAM_ROLE default CSV\nGZIP",
            "COPY raw.a FROM 's3://b/bz/' IAM_ROLE default CSV BZIP2",
            "COPY raw.j (id) FROM 's3://b/zst/' IAM_ROLE default JSON 'auto' ZSTD",
            "COPY raw.a FROM 's3://b/avro/' IAM_ROLE default FORMAT AS AVRO 'auto'",
            "COPY raw.a FROM 's3://b/orc/' IAM_ROLE default FORMAT AS ORC",
            "COPY raw.a FROM 's3://b/a.manifest' IAM_ROLE default CSV MANIFEST",
            "COPY raw.a FROM 's3://b/fixed/' IAM_ROLE default FIXEDWIDTH 'id:8,label:10'",
            "COPY raw.p FROM 's3://b/p/' IAM_ROLE default FORMAT AS PARQUET",
            "CREATE EXTERNAL TABLE spectrum.j (id INT) ROW FORMAT SERDE 'org.openx.data.jsonserde.JsonSerDe' "
            "LOCATION 's3://b/json/'",
            "CREATE EXTERNAL TABLE spectrum.c (id INT) ROW FORMAT SERDE "
            "'org.apache.hadoop.hive.serde2.OpenCSVSerde' WITH SERDEPROPERTIES ('separatorChar' = ',') "
            "STORED AS TEXTFILE LOCATION 's3://b/c/'",
        ],
    )
    report = onboard([sql], store, pipeline_id="loads")
    errors = [s.error for s in report.statements if s.error]
    assert errors == [
        f"{sql}:14: COPY AVRO: the bronze ingest cannot read Avro files (it reads CSV, JSON lines and "
        "parquet: export them as parquet)",
        f"{sql}:16: COPY ORC: the bronze ingest cannot read ORC files (it reads CSV, JSON lines and parquet: "
        "export them as parquet)",
        f"{sql}:18: COPY MANIFEST: the bronze ingest cannot read manifests, which list the files to load "
        "(point the COPY at the files' prefix instead)",
        f"{sql}:20: COPY FIXEDWIDTH: the bronze ingest cannot read fixed-width files (it reads CSV, JSON "
        "lines and parquet: export them delimited)",
        f"{sql}:24: CREATE EXTERNAL TABLE: only ROW FORMAT DELIMITED text, STORED AS TEXTFILE or STORED AS "
        "PARQUET with a LOCATION 's3://…' become sources (a SerDe is not read)",
        f"{sql}:26: CREATE EXTERNAL TABLE: only ROW FORMAT DELIMITED text, STORED AS TEXTFILE or STORED AS "
        "PARQUET with a LOCATION 's3://…' become sources (a SerDe is not read)",
    ]
    assert report.statements[1].warnings == [
        "COPY option BLANKSASNULL is not carried over to the bronze ingest"
    ]
    # Parquet of unknown columns: its S3 source is kept, with table-level lineage.
    parquet = report.statements[10]
    assert (parquet.status, parquet.sources, parquet.columns) == ("onboarded", ["s3://b/p/"], [])
    assert parquet.warnings == [
        "column lineage unavailable (the columns of raw.p are unknown: list them in the COPY "
        "(raw.p (a, b, …) FROM …) or declare them with CREATE TABLE before it): table-level lineage only"
    ]
    sources = {s.s3_path: s for s in store.snapshot().sources.values()}
    csv_source, json_source = sources["s3://b/a/"], sources["s3://b/j/"]
    assert (csv_source.source_id, csv_source.file_format, csv_source.options) == (
        "a_raw",
        "csv",
        {"delimiter": ";", "quote": "'", "header": True, "nullValue": "none"},
    )
    assert csv_source.columns == {"id": "int", "label": "string", "amount": "decimal(8,2)", "at": "timestamp"}
    assert (json_source.file_format, json_source.options, json_source.columns) == (
        "jsonl",
        {},
        {"id": "string", "label": "string"},
    )
    assert {path: (source.file_format, source.compression) for path, source in sources.items()} == {
        "s3://b/a/": ("csv", "auto"),
        "s3://b/j/": ("jsonl", "auto"),
        "s3://b/zipped/": ("csv", "gzip"),
        "s3://b/bz/": ("csv", "bzip2"),
        "s3://b/zst/": ("jsonl", "zstd"),
        "s3://b/p/": ("parquet", "auto"),
    }
    stages = {s.target_id: s for s in store.snapshot().stages("loads")}
    assert stages["bronze_a"].input_id == "a_raw" and stages["bronze_a"].transform_sql is None


def test_every_statement_kind_gets_a_line_saying_what_it_became_or_why_not(cli, store, tmp_path):
    sql = write_sql(
        tmp_path / "kinds.sql",
        [
            "INSERT INTO ref.country (code, name) VALUES ('DE', 'Germany'), ('FR', 'France')",
            "CALL etl.refresh_sales(1, 'x')",
            "CREATE OR REPLACE PROCEDURE etl.refresh() AS $$ BEGIN INSERT INTO a SELECT * FROM b; END; $$ "
            "LANGUAGE plpgsql",
            "CREATE EXTERNAL TABLE spectrum.sales (salesid INTEGER, listid INTEGER, saletime TIMESTAMP) "
            "ROW FORMAT DELIMITED FIELDS TERMINATED BY '\\t' STORED AS TEXTFILE LOCATION 's3://tickit/sales/'",
            "CREATE TABLE core.sales AS SELECT salesid, listid, saletime FROM spectrum.sales",
            "ALTER TABLE core.sales APPEND FROM core.sales_staging IGNOREEXTRA",
            "UPDATE core.sales SET listid = f.listid FROM core.fixes f WHERE sales.salesid = f.salesid",
            "UNLOAD ('SELECT salesid, saletime FROM core.sales WHERE listid > 3') TO 's3://out/sales_' "
            "IAM_ROLE default PARQUET",
            "VACUUM core.sales",
        ],
    )
    result = cli("onboard", sql)
    assert result.exit_code == 0, result.output
    lines = [line.split("  ", 3)[1:] for line in result.stdout.splitlines() if line.startswith(str(sql))]
    assert [line[:2] for line in lines] == [
        ["insert_values", "ref.country ← (no tables)"],
        [
            "call",
            "skipped: a stored procedure's body is not in the statement: onboard the SQL it runs (its "
            "CREATE PROCEDURE body) as statements of their own",
        ],
        [
            "create_procedure",
            "skipped: a procedure body runs only when called: onboard the SQL it runs as "
            "statements of their own",
        ],
        ["create_external_table", "spectrum.sales ← s3://tickit/sales/"],
        ["create_table_as", "core.sales ← spectrum.sales"],
        ["alter_table_append", "core.sales ← core.sales_staging"],
        ["update", "core.sales ← core.fixes"],
        ["unload", "s3://out/sales_ ← core.sales"],
        ["vacuum", "skipped: moves no rows between tables"],
    ]
    snapshot = store.snapshot()
    spectrum = next(s for s in snapshot.sources.values() if s.s3_path == "s3://tickit/sales/")
    assert (spectrum.file_format, spectrum.options, spectrum.columns) == (
        "csv",
        {"delimiter": "\t", "header": False},
        {"salesid": "int", "listid": "int", "saletime": "timestamp"},
    )
    assert snapshot.targets["bronze_sales"].location == "spectrum.sales"
    assert "ref.country" in {t.location for t in snapshot.targets.values()}
    # APPEND moves columns by name: from a source of unknown columns, the target's.
    appended = {
        (row.upstream_column, row.downstream_column)
        for row in snapshot.tables["column_lineage"].values()
        if row.upstream == "silver_sales_staging"
    }
    assert appended == {("salesid", "salesid"), ("listid", "listid"), ("saletime", "saletime")}


# --- layers, stages, rules --------------------------------------------------------------------------------


def test_layers_follow_the_graph_then_conventions_then_the_override(store, tmp_path):
    sql = write_sql(
        tmp_path / "layers.sql",
        [
            "CREATE TABLE landing.visits (visit_id VARCHAR(20), page VARCHAR(100), ms INT)",
            "COPY landing.visits FROM 's3://b/visits/' IAM_ROLE default FORMAT AS PARQUET",
            "CREATE TABLE work.visits AS SELECT visit_id, LOWER(page) AS page, ms FROM landing.visits WHERE "
            "ms >= 0",
            "CREATE TABLE work.page_times AS SELECT page, AVG(ms) AS avg_ms FROM work.visits GROUP BY page",
            "CREATE TABLE mart.slow_visits AS SELECT visit_id, page FROM work.visits WHERE ms > 1000",
            "CREATE TABLE work.visit_copy AS SELECT visit_id, page FROM work.visits",
            "CREATE TABLE work.top_pages AS SELECT page, avg_ms FROM work.page_times",
        ],
    )
    report = onboard([sql], store, pipeline_id="visits", layer_overrides={"work.visit_copy": "gold"})
    layers = {s.target: (s.layer, s.layer_reason) for s in report.statements if s.layer}
    assert layers == {
        "landing.visits": ("bronze", f"loaded from raw files by COPY at {sql}:3"),
        "work.visits": ("silver", "cleans bronze table landing.visits"),
        "work.page_times": ("gold", f"aggregates (GROUP BY or aggregate functions) at {sql}:7"),
        "mart.slow_visits": ("gold", "schema 'mart' is a gold schema by naming convention"),
        "work.visit_copy": ("gold", "set by --layer for work.visit_copy"),
        "work.top_pages": ("gold", "reads gold table work.page_times"),
    }
    targets = store.snapshot().targets
    assert {
        t: (targets[t].kind, targets[t].location)
        for t in ("bronze_visits", "silver_visits", "gold_page_times")
    } == {
        "bronze_visits": ("lake", "landing.visits"),
        "silver_visits": ("lake", "work.visits"),
        "gold_page_times": ("warehouse", "work.page_times"),
    }
    again = onboard([sql], store, pipeline_id="visits")
    assert {s.target: s.layer_reason for s in again.statements if s.layer}[
        "work.visits"
    ] == "already in the catalog as silver (silver_visits)"


def test_merges_become_merge_loads_with_suggested_rules(store, tmp_path):
    sql = write_sql(
        tmp_path / "merge.sql",
        [
            "CREATE TABLE raw.updates (id INT, email VARCHAR(50), country CHAR(2))",
            "COPY raw.updates FROM 's3://b/updates/' IAM_ROLE default FORMAT AS PARQUET",
            "MERGE INTO silver.people AS p USING raw.updates u ON p.id = u.id\n"
            "WHEN MATCHED THEN UPDATE SET email = u.email, country = u.country\n"
            "WHEN NOT MATCHED THEN INSERT (id, email, country) VALUES (u.id, u.email, u.country)",
            "DELETE FROM silver.contacts USING raw.updates u WHERE contacts.id = u.id",
            "INSERT INTO silver.contacts SELECT id, email FROM raw.updates",
            "CREATE TABLE gold.by_country AS SELECT c.country, COUNT(*) AS people FROM silver.people c "
            "JOIN silver.contacts k ON k.id = c.id GROUP BY c.country",
        ],
    )
    report = onboard([sql], store, pipeline_id="people")
    assert not report.failed
    snapshot = store.snapshot()
    people, contacts = snapshot.targets["silver_people"], snapshot.targets["silver_contacts"]
    assert (people.keys, people.load_mode, contacts.keys, contacts.load_mode) == (
        ["id"],
        "merge",
        ["id"],
        "merge",
    )
    stages = {s.target_id: s for s in snapshot.stages("people")}
    assert 'FROM "bronze_updates" AS "u"' in stages["silver_people"].transform_sql
    rules = snapshot.rule_sets["silver_people_suggested"]
    assert rules.description.startswith("SUGGESTED by medallion onboard")
    assert [(r.type, r.column or r.columns, r.severity) for r in rules.check_def] == [
        ("row_count", None, "warn"),
        ("not_null", "id", "warn"),
        ("unique", ["id"], "warn"),
    ]
    gold_rules = snapshot.rule_sets["gold_by_country_suggested"].check_def
    assert [(r.type, r.column) for r in gold_rules] == [("row_count", None), ("not_null", "country")]
    assert stages["gold_by_country"].validation_set_id == "gold_by_country_suggested"
    delete = next(s for s in report.statements if s.kind == "delete")
    assert delete.warnings == [
        "DELETE … USING then INSERT is a merge on id: the stage loads with load_mode merge"
    ]


def test_generated_stage_sql_gives_what_the_original_sql_gives(spark, store, tmp_path, pg_database):
    """Temporary tables inlined as CTEs, a MERGE's rows, a UNION of two INSERTs: run the stages' SQL on Spark
    over a few rows and the original statements on PostgreSQL over the same rows."""
    schema = [
        "CREATE TABLE raw.orders (order_id INT, customer_id INT, amount DECIMAL(10,2))",
        "CREATE TABLE raw.customers (customer_id INT, country VARCHAR(2))",
    ]
    statements = [
        "CREATE TEMP TABLE big_orders AS SELECT customer_id, amount FROM raw.orders WHERE amount > 10",
        "CREATE TEMP TABLE big_totals AS SELECT customer_id, SUM(amount) AS total FROM big_orders GROUP BY "
        "customer_id",
        "CREATE TABLE analytics.country_totals AS SELECT c.country, SUM(t.total) AS total, COUNT(*) AS "
        "customers FROM big_totals t JOIN raw.customers c ON c.customer_id = t.customer_id GROUP BY "
        "c.country",
        "CREATE TABLE analytics.ids (id INT, role VARCHAR(10))",
        "INSERT INTO analytics.ids SELECT order_id, 'order' FROM raw.orders",
        "INSERT INTO analytics.ids SELECT customer_id, 'customer' FROM raw.customers",
        "CREATE TABLE analytics.countries (customer_id INT, country VARCHAR(2))",
        "MERGE INTO analytics.countries AS k USING raw.customers c ON k.customer_id = c.customer_id "
        "WHEN MATCHED THEN UPDATE SET country = c.country "
        "WHEN NOT MATCHED THEN INSERT (customer_id, country) VALUES (c.customer_id, c.country)",
    ]
    sql = write_sql(
        tmp_path / "stages.sql",
        schema
        + [
            "COPY raw.orders FROM 's3://b/orders/' IAM_ROLE default FORMAT AS PARQUET",
            "COPY raw.customers FROM 's3://b/customers/' IAM_ROLE default FORMAT AS PARQUET",
            *statements,
        ],
    )
    report = onboard([sql], store, pipeline_id="stages")
    assert not report.failed, [s.error for s in report.statements]
    orders = [
        (1, 10, Decimal("5.00")),
        (2, 10, Decimal("20.00")),
        (3, 11, Decimal("30.00")),
        (4, 12, Decimal("40.00")),
        (5, 12, Decimal("50.00")),
    ]
    customers = [(10, "DE"), (11, "FR"), (12, "DE")]
    frames = {
        "bronze_orders": spark.createDataFrame(orders, "order_id int, customer_id int, amount decimal(10,2)"),
        "bronze_customers": spark.createDataFrame(customers, "customer_id int, country string"),
    }
    stages = {s.target_id: s for s in store.snapshot().stages("stages")}
    assert "big_orders" in stages["gold_country_totals"].transform_sql
    assert "UNION ALL" in stages["silver_ids"].transform_sql

    def on_spark(target_id):
        stage = stages[target_id]
        rows = run_sql(spark, frames, stage.transform_sql, stage.sql_dialect).collect()
        return sorted(tuple(r) for r in rows)

    with psycopg2.connect(pg_database) as connection, connection.cursor() as cursor:
        cursor.execute("CREATE SCHEMA raw; CREATE SCHEMA analytics; " + ";".join(schema))
        cursor.executemany("INSERT INTO raw.orders VALUES (%s, %s, %s)", orders)
        cursor.executemany("INSERT INTO raw.customers VALUES (%s, %s)", customers)
        cursor.execute(";".join(statements))
        cursor.execute("SELECT * FROM analytics.country_totals")
        country_totals = sorted(cursor.fetchall())
        cursor.execute("SELECT * FROM analytics.ids")
        ids = sorted(cursor.fetchall())
        cursor.execute("SELECT * FROM analytics.countries")
        countries = sorted(cursor.fetchall())
    assert on_spark("gold_country_totals") == country_totals == [("DE", 110, 2), ("FR", 30, 1)]
    assert on_spark("silver_ids") == ids
    # Into an empty table a MERGE inserts its source rows: what the merge stage loads, by key.
    assert on_spark("silver_countries") == countries
    assert store.snapshot().targets["silver_countries"].load_mode == "merge"


# --- idempotence, diff, JSON ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "corpus, refused",
    [(CORPUS, []), (NO_DDL_CORPUS, [22, 24]), (DOCS_CORPUS, [5, 7, 8, 9, 13, 14, 17])],
    ids=["with_ddl", "no_ddl", "docs"],
)
def test_onboarding_the_same_sql_again_changes_nothing(store, corpus, refused):
    first = onboard(corpus_files(corpus), store, pipeline_id="corpus")
    assert first.written
    # Only the refused loads fail.
    assert [s.line for s in first.statements if s.status == "failed"] == refused
    before = all_rows(store)
    second = onboard(corpus_files(corpus), store, pipeline_id="corpus")
    assert second.changes == [] and not second.written
    assert all_rows(store) == before


def test_changed_sql_replaces_the_stage_sql_and_its_lineage(store, tmp_path):
    load = [
        "CREATE TABLE raw.s (a INT, b INT, c INT)",
        "COPY raw.s FROM 's3://b/s/' IAM_ROLE default FORMAT AS PARQUET",
    ]
    sql = write_sql(tmp_path / "t.sql", [*load, "CREATE TABLE silver.t AS SELECT a, b FROM raw.s"])
    onboard([sql], store, pipeline_id="p")
    write_sql(sql, [*load, "CREATE TABLE silver.t AS SELECT a, c AS b FROM raw.s"])
    changes = onboard([sql], store, pipeline_id="p").changes
    assert [(c.action, c.table, c.key) for c in changes] == [
        ("~", "stages", ("p", 2)),
        ("+", "column_lineage", ("silver_t", "b", "bronze_s", "c")),
        ("-", "column_lineage", ("silver_t", "b", "bronze_s", "b")),
    ]
    lineage = {
        (r["downstream"], r["downstream_column"], r["upstream_column"])
        for r in store.table_rows("column_lineage")
    }
    assert lineage == {("bronze_s", c, c) for c in "abc"} | {("silver_t", "a", "a"), ("silver_t", "b", "c")}


def test_dry_run_prints_the_diff_and_writes_nothing(cli, store, tmp_path):
    load = ["CREATE TABLE raw.s (a INT)", "COPY raw.s FROM 's3://b/s/' IAM_ROLE default FORMAT AS PARQUET"]
    sql = write_sql(tmp_path / "dry.sql", [*load, "CREATE TABLE work.t AS SELECT a FROM raw.s"])
    result = cli("onboard", sql, "--dry-run", "--pipeline", "dry")
    assert result.exit_code == 0, result.output
    assert all(rows == [] for rows in all_rows(store).values())
    lines = result.stdout.splitlines()
    assert (
        f"{sql}:5  create_table_as  work.t ← raw.s  [silver: cleans bronze table raw.s]  stage dry.silver_t"
        in lines
    )
    assert "catalog: 12 rows added, 0 changed, 0 removed (dry run: nothing written)" in lines
    assert "+ targets[silver_t]" in lines and "+   location: work.t" in lines
    assert "+ column_lineage[silver_t, a, bronze_s, a]" in lines
    cli("onboard", sql, "--pipeline", "dry")
    write_sql(sql, [*load, "CREATE TABLE work.t AS SELECT a + 1 AS a FROM raw.s"])
    changed = cli("onboard", sql, "--dry-run").stdout.splitlines()
    assert "~ column_lineage[silver_t, a, bronze_s, a]" in changed
    assert ["-   transformation: identity", "+   transformation: expression"] == changed[
        changed.index("~ column_lineage[silver_t, a, bronze_s, a]") + 1 :
    ][:2]


def test_json_reports_each_statement_as_the_issue_specifies(cli, store, tmp_path):
    sql = tmp_path / "gold.sql"
    sql.write_text(SEED_GOLD_SQL)
    cli("catalog", "load", Path(__file__).resolve().parents[1] / "metadata_seed")
    result = cli("onboard", sql, "--json")
    assert result.exit_code == 0, result.output
    [statement] = json.loads(result.stdout)["statements"]
    assert statement == {
        "file": str(sql),
        "line": 1,
        "kind": "insert",
        "status": "onboarded",
        "target": "analytics.daily_user_events",
        "dataset": "gold_daily_user_events",
        "sources": ["public.silver_user_events"],
        "layer": "gold",
        "layer_reason": "already in the catalog as gold (gold_daily_user_events)",
        "stage": "user_events_etl.gold_daily_aggregate",
        "columns": [
            {
                "target": "event_date",
                "sources": ["public.silver_user_events.event_ts"],
                "transformations": {"public.silver_user_events.event_ts": "expression"},
            },
            {"target": "total_events", "sources": [], "transformations": {}},
            {
                "target": "unique_users",
                "sources": ["public.silver_user_events.user_id"],
                "transformations": {"public.silver_user_events.user_id": "aggregate"},
            },
        ],
        "warnings": [],
        "error": None,
        "reason": None,
    }


def test_a_broken_catalog_is_reported_and_nothing_is_written(store, tmp_path):
    store.upsert(
        {"stages": [Stage(pipeline_id="ghost", stage_order=1, stage_name="s", input_id="x", target_id="y")]}
    )
    sql = write_sql(tmp_path / "ok.sql", ["CREATE TABLE silver.t AS SELECT 1 AS a"])
    with pytest.raises(CatalogInvalid, match="unknown pipeline 'ghost'"):
        onboard([sql], store, pipeline_id="p")
    assert store.table_rows("targets") == []


# --- closing the loop -------------------------------------------------------------------------------------


def csv_rows_copy_would_load(url: str) -> list[tuple]:
    """Rows of the CSV files under `url` that COPY … CSV IGNOREHEADER 1 MAXERROR loads: the header's width."""
    rows = []
    for info in list_objects(url):
        reader = csv.reader(io.StringIO(read_bytes(info.url).decode("utf-8"), newline=""))
        header = next(reader)
        rows += [tuple(row) for row in reader if len(row) == len(header)]
    return rows


def utc_naive(moment) -> datetime:
    """A parquet timestamp as PostgreSQL's TIMESTAMP holds it: naive, in UTC (Spark writes UTC instants)."""
    moment = moment.to_pydatetime() if hasattr(moment, "to_pydatetime") else moment
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def run_directly_on_postgres(
    url: str, statements: list[str], tables: dict[str, tuple[str, list[tuple]]], result_table: str
) -> list[dict]:
    """Create `tables` (DDL, rows), run `statements` verbatim, return `result_table` ordered by its first
    column."""
    with psycopg2.connect(url) as connection, connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'UTC'")
        for name, (ddl, rows) in tables.items():
            cursor.execute(ddl)
            cursor.executemany(f"INSERT INTO {name} VALUES ({', '.join(['%s'] * len(rows[0]))})", rows)
        for statement in statements:
            cursor.execute(statement)
        cursor.execute(f"SELECT * FROM {result_table} ORDER BY 1")
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def test_onboarded_sql_runs_through_dagster_and_gold_equals_the_sql_run_directly(
    medallion, bucket, pg_database, tmp_path
):
    write_sample_data(f"s3://{bucket}", rows=1000, lines_per_file=500)
    seed_gold = tmp_path / "seed_gold.sql"
    seed_gold.write_text(SEED_GOLD_SQL)
    statements = chain_statements(bucket)
    chain = write_sql(tmp_path / "orders_chain.sql", statements)

    report = onboard([seed_gold, chain], medallion.store, pipeline_id="orders_from_sql")
    assert not report.failed
    assert [(s.kind, s.status, s.layer, s.stage) for s in report.statements] == [
        ("insert", "onboarded", "gold", "user_events_etl.gold_daily_aggregate"),
        ("create_schema", "skipped", None, None),
        ("create_table", "schema", None, None),
        # bronze_orders and silver_orders are the seed's: the new datasets' ids take their schema.
        ("copy", "onboarded", "bronze", "orders_from_sql.bronze_shop_raw_orders"),
        ("create_table", "schema", None, None),
        ("insert", "onboarded", "silver", "orders_from_sql.silver_shop_clean_orders"),
        ("create_table_as", "onboarded", "gold", "orders_from_sql.gold_daily_orders"),
        ("grant", "skipped", None, None),
    ]
    assert medallion.run("user_events_etl").status == "success"
    chain_run = medallion.run("orders_from_sql")
    assert chain_run.status == "success", chain_run
    assert [a.key for a in chain_run.assets] == [
        "bronze/shop_raw_orders",
        "silver/shop_clean_orders",
        "gold/daily_orders",
    ]

    silver_events = medallion.rows("silver.user_events")
    user_events_directly = run_directly_on_postgres(
        pg_database,
        [SEED_GOLD_SQL],
        {
            "silver_user_events": (
                "CREATE TABLE silver_user_events (event_id TEXT, user_id TEXT, event_type TEXT, event_ts "
                "TIMESTAMP, value DOUBLE PRECISION); CREATE SCHEMA analytics; CREATE TABLE "
                "analytics.daily_user_events (event_date DATE, total_events BIGINT, unique_users BIGINT)",
                [
                    (r["event_id"], r["user_id"], r["event_type"], utc_naive(r["event_ts"]), r["value"])
                    for r in silver_events
                ],
            )
        },
        "analytics.daily_user_events",
    )
    assert medallion.gold("analytics.daily_user_events") == user_events_directly
    assert user_events_directly

    # PostgreSQL cannot COPY from S3: the rows COPY would load are inserted instead, then every statement
    # after the COPY runs as written, but the GRANT (its group does not exist there).
    copy_index = next(i for i, s in enumerate(statements) if s.startswith("COPY"))
    orders_directly = run_directly_on_postgres(
        pg_database,
        statements[copy_index + 1 : -1],
        {
            "shop_raw.orders": (
                "CREATE SCHEMA shop_raw; CREATE SCHEMA shop_clean; CREATE SCHEMA shop_mart; " + statements[1],
                csv_rows_copy_would_load(f"s3://{bucket}/orders/"),
            )
        },
        "shop_mart.daily_orders",
    )
    assert medallion.gold("shop_mart.daily_orders") == orders_directly
    assert sum(row["orders"] for row in orders_directly) > 0

    # Without DDL: the columns come from the COPY's list and the CTAS outputs, lineage from one table in
    # scope. Its own raw files: a source's files are ingested once, and the orders above were.
    write_sample_data(f"s3://{bucket}/no_ddl", rows=1000, lines_per_file=500)
    no_ddl = no_ddl_chain_statements(bucket)
    report = onboard(
        [write_sql(tmp_path / "orders_no_ddl.sql", no_ddl)], medallion.store, pipeline_id="orders_no_ddl"
    )
    assert [(s.kind, s.status, s.layer) for s in report.statements] == [
        ("copy", "onboarded", "bronze"),
        ("create_table_as", "onboarded", "silver"),
        ("create_table_as", "onboarded", "gold"),
    ]
    assert report.statements[2].columns == [
        {
            "target": "order_date",
            "sources": ["lake_clean.orders.order_ts"],
            "transformations": {"lake_clean.orders.order_ts": "expression"},
        },
        {
            "target": "customers",
            "sources": ["lake_clean.orders.customer_id"],
            "transformations": {"lake_clean.orders.customer_id": "aggregate"},
        },
        {
            "target": "revenue",
            "sources": ["lake_clean.orders.amount"],
            "transformations": {"lake_clean.orders.amount": "aggregate"},
        },
        {
            "target": "*",
            "sources": ["lake_clean.orders.order_id", "lake_clean.orders.order_ts"],
            "transformations": {
                "lake_clean.orders.order_id": "filter",
                "lake_clean.orders.order_ts": "filter",
            },
        },
    ]
    no_ddl_run = medallion.run("orders_no_ddl")
    assert no_ddl_run.status == "success", no_ddl_run
    no_ddl_directly = run_directly_on_postgres(
        pg_database,
        no_ddl[1:],
        {
            "lake_raw.orders": (
                "CREATE SCHEMA lake_raw; CREATE SCHEMA lake_clean; CREATE SCHEMA lake_mart; "
                "CREATE TABLE lake_raw.orders (order_id TEXT, customer_id TEXT, order_ts TEXT, "
                "amount TEXT)",
                csv_rows_copy_would_load(f"s3://{bucket}/no_ddl/orders/"),
            )
        },
        "lake_mart.customer_days",
    )
    assert medallion.gold("lake_mart.customer_days") == no_ddl_directly
    assert sum(row["customers"] for row in no_ddl_directly) > 0
