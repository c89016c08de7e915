"""The catalog: migrations, idempotent loading, and invalid YAML reported in full with nothing written."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from click.testing import CliRunner
from sqlalchemy import text

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.models import LOADABLE
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import MIGRATIONS, CatalogStore, change_count, migration_heads
from medallion_assets.cli import main
from medallion_assets.loading import validate_files
from tests.conftest import SEED


def counts(store: CatalogStore) -> dict[str, int]:
    return {name: len(rows) for name, rows in store.snapshot().tables.items()}


@pytest.fixture
def store(tmp_path) -> CatalogStore:
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    return store


def test_seed_loads_idempotently(store):
    first = store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    after_first = counts(store)
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    assert counts(store) == after_first
    assert first == {
        "retry_policies": 2,
        "pipelines": 3,
        "sources": 5,
        "targets": 10,
        "validation_rules": 7,
        "stages": 10,
        "healing_actions": 7,
        "profiles": 2,
        "dataset_lineage": 1,
        "notifications": 1,
        "stage_tests": 3,
    }
    stages = store.snapshot().stages("orders_etl")
    assert [s.stage_name for s in stages] == [
        "bronze_orders_ingest",
        "bronze_customers_ingest",
        "silver_orders_enrich",
        "gold_daily_revenue",
    ]
    assert stages[2].input_ids() == ["bronze_orders", "bronze_customers"]


def test_postgres_catalog_holds_the_same_seed(store, pg_database):
    postgres = CatalogStore(pg_database)
    postgres.migrate()
    postgres.migrate()
    for target in (store, postgres):
        target.upsert(validate_files(target.snapshot(), [SEED]).rows)
    assert postgres.snapshot().tables == store.snapshot().tables
    postgres.engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def test_migration_0010_renames_type_and_source_id_keeping_the_rows(backend, tmp_path, request):
    url = f"sqlite:///{tmp_path}/old.db" if backend == "sqlite" else request.getfixturevalue("pg_database")
    store = CatalogStore(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0009")
        connection.execute(
            text(
                "INSERT INTO targets (target_id, layer, type, location) "
                "VALUES ('gold_t', 'gold', 'warehouse', 'analytics.t')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO stages (pipeline_id, stage_order, stage_name, source_id, target_id) "
                "VALUES ('p', 1, 'load', 'silver_t', 'gold_t')"
            )
        )
    store.migrate()
    assert [(t.target_id, t.kind, t.location) for t in store.read_table("targets")] == [
        ("gold_t", "warehouse", "analytics.t")
    ]
    assert [(s.stage_name, s.input_ids()) for s in store.read_table("stages")] == [("load", ["silver_t"])]
    store.engine.dispose()


def test_the_newest_migration_is_the_one_alembic_upgrades_to():
    """A catalog whose version is one of these is not migrated again (alembic is not even imported)."""
    assert migration_heads() == set(ScriptDirectory(str(MIGRATIONS)).get_heads())


def test_an_unchanged_stage_sql_is_checked_again_when_its_input_loses_a_column_it_names(store, tmp_path):
    """Validation skips the SQL of stages the stored catalog holds as they are, but not one whose input's
    declared columns change."""
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    folder = tmp_path / "seed"
    shutil.copytree(SEED, folder)
    events = folder / "user_events_etl.yaml"
    declared = "columns: {event_id: string, user_id: string, event_type: string, event_ts: timestamp"
    events.write_text(events.read_text().replace(declared, declared.replace(" user_id: string,", "")))
    with pytest.raises(CatalogInvalid) as invalid:
        validate_files(store.snapshot(), [folder])
    said = [str(p).split(": ", 1)[1] for p in invalid.value.problems if p.field == "transform_sql"]
    assert said == [
        "stages[user_events_etl.gold_daily_aggregate].transform_sql: names column 'user_id', which its input "
        "does not have; it has event_id, event_ts, event_type, value"
    ]


def test_update_of_a_row_replaces_it(store, tmp_path):
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    change = tmp_path / "change.yaml"
    change.write_text("retry_policies:\n  - {retry_id: std_retry, max_retries: 5, backoff_sec: 1}\n")
    store.upsert(validate_files(store.snapshot(), [change]).rows)
    policy = store.snapshot().retry_policies["std_retry"]
    assert (policy.max_retries, policy.backoff_sec, policy.backoff) == (5, 1, "fixed")


BAD = textwrap.dedent("""\
    pipelines:
      - {pipeline_id: p1, default_retry_id: missing_retry}
      - {pipeline_id: "p1; DROP TABLE pipelines"}
    sources:
      - {source_id: raw_a, s3_path: "s3://b/a/", file_format: xml, columns: {a: string}}
      - {source_id: raw_b, s3_path: "s3://b/b/", file_format: jsonl, columns: {"bad col": string}}
      - {source_id: raw_c, s3_path: "s3://b/c/", file_format: jsonl, columns: {a: string}}
    targets:
      - {target_id: bronze_c, layer: bronze}
      - {target_id: bronze_c, layer: bronze}
      - {target_id: silver_x, layer: silver}
      - {target_id: silver_y, layer: silver}
    validation_rules:
      - {rule_set_id: rs, check_def: [{type: telepathy}]}
    stages:
      - {pipeline_id: p1, stage_order: 1, stage_name: ingest, input_id: raw_c, target_id: bronze_c}
      - {pipeline_id: p1, stage_order: 2, stage_name: x, input_id: silver_y, target_id: silver_x}
      - {pipeline_id: p1, stage_order: 3, stage_name: y, input_id: silver_x, target_id: silver_y}
      - {pipeline_id: p1, stage_order: 4, stage_name: z, input_id: nowhere, target_id: silver_z}
    """)


def test_invalid_yaml_lists_every_problem_and_writes_nothing(store, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    before = counts(store)
    with pytest.raises(CatalogInvalid) as raised:
        validate_files(store.snapshot(), [bad])
    messages = [str(p).replace(str(tmp_path) + "/", "") for p in raised.value.problems]
    assert messages == [
        "bad.yaml:3: pipelines[p1; DROP TABLE pipelines].pipeline_id: Value error, identifier "
        "'p1; DROP TABLE pipelines' is not a plain name (letters, digits and underscores, not starting with "
        "a digit)",
        "bad.yaml:5: sources[raw_a].file_format: Input should be 'jsonl', 'csv' or 'parquet'; got 'xml'",
        "bad.yaml:6: sources[raw_b].columns: Value error, column 'bad col' is not a plain name "
        "(letters, digits and underscores, not starting with a digit)",
        "bad.yaml:10: targets[bronze_c]: duplicate key, first defined at bad.yaml:9",
        "bad.yaml:14: validation_rules[rs].check_def.0.type: Input should be 'row_count', 'not_null', "
        "'unique', 'accepted_values', 'range', 'regex', 'schema_match', 'freshness', 'great_expectations', "
        "'scd2_one_current' or 'scd2_no_overlap'; "
        "got 'telepathy'",
        "bad.yaml:2: pipelines[p1].default_retry_id: unknown retry policy 'missing_retry'",
        "bad.yaml:19: stages[p1.z].target_id: unknown target 'silver_z'",
        "bad.yaml:19: stages[p1.z].input_id: unknown source or target 'nowhere'",
        "bad.yaml:17: stages[p1.x].input_id: cycle between stages: silver_y → silver_x → silver_y",
    ]
    assert counts(store) == before


def test_a_bad_rule_is_pointed_at_on_its_own_line_with_its_value_and_no_knock_on_error(store, tmp_path):
    bad = tmp_path / "rules.yaml"
    bad.write_text(
        textwrap.dedent("""\
        pipelines:
          - {pipeline_id: p1}
        sources:
          - {source_id: raw_c, s3_path: "s3://b/c/", file_format: jsonl, columns: {a: string}}
        targets:
          - {target_id: bronze_c, layer: bronze}
        validation_rules:
          - rule_set_id: rs
            check_def:
              - {name: enough, type: row_count, min: 1}
              - name: known
                type: accepted_values
                column: a
                severity: fatal
        stages:
          - {pipeline_id: p1, stage_order: 1, stage_name: ingest, input_id: raw_c, target_id: bronze_c,
             validation_set_id: rs}
        """)
    )
    with pytest.raises(CatalogInvalid) as raised:
        validate_files(store.snapshot(), [bad])
    messages = [str(p).replace(str(tmp_path) + "/", "") for p in raised.value.problems]
    # The rule's own line, not the rule set's (8); the stage naming the broken rule set is not reported too.
    assert [m.split(": ", 2)[:2] for m in messages] == [
        ["rules.yaml:14", "validation_rules[rs].check_def.1.severity"]
    ]
    assert messages[0].endswith("; got 'fatal'")


OLD_NAMES = """\
pipelines: [{pipeline_id: p}]
sources:
  - {source_id: raw_t, s3_path: "s3://b/t/", file_format: jsonl, columns: {a: string}}
targets:
  - {target_id: bronze_t, layer: bronze}
  - target_id: gold_t
    layer: gold
    type: redshift
    location: analytics.t
stages:
  - {pipeline_id: p, stage_order: 1, stage_name: ingest, source_id: raw_t, target_id: bronze_t}
"""


def test_renamed_fields_load_under_their_old_names_with_a_warning_naming_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_CATALOG_URL", f"sqlite:///{tmp_path}/catalog.db")
    old = tmp_path / "old.yaml"
    old.write_text(OLD_NAMES)
    loaded = CliRunner().invoke(main, ["catalog", "load", str(old)])
    assert loaded.exit_code == 0, loaded.output
    assert loaded.stderr.splitlines() == [
        f"warning: {old}:8: targets: field 'type' is deprecated, write 'kind'",
        f"warning: {old}:8: target gold_t: kind 'redshift' is deprecated, write 'warehouse' "
        "(the warehouse may be DuckDB, PostgreSQL or Redshift)",
        f"warning: {old}:11: stages: field 'source_id' is deprecated, write 'input_id'",
    ]
    targets = json.loads(CliRunner().invoke(main, ["catalog", "show", "targets", "--json"]).stdout)
    assert sorted((t["target_id"], t["kind"]) for t in targets) == [
        ("bronze_t", "lake"),
        ("gold_t", "warehouse"),
    ]
    stages = json.loads(CliRunner().invoke(main, ["catalog", "show", "stages", "--json"]).stdout)
    assert [(s["stage_name"], s["input_id"]) for s in stages] == [("ingest", "raw_t")]


def test_a_row_with_both_the_old_and_the_new_name_is_refused(tmp_path):
    both = tmp_path / "both.yaml"
    both.write_text("targets:\n  - {target_id: t, layer: silver, type: lake, kind: lake}\n")
    with pytest.raises(CatalogInvalid) as raised:
        validate_files(CatalogSnapshot(), [both])
    assert [str(p).replace(str(tmp_path) + "/", "") for p in raised.value.problems] == [
        "both.yaml:2: targets[t]: Value error, type is the deprecated name of kind: write only kind"
    ]


def test_cli_exit_code_2_and_problems_on_stderr(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_CATALOG_URL", f"sqlite:///{tmp_path}/catalog.db")
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    result = CliRunner().invoke(main, ["catalog", "load", str(bad)])
    assert result.exit_code == 2
    assert "9 problem(s) in the catalog" in result.stderr
    assert "unknown source or target 'nowhere'" in result.stderr
    shown = CliRunner().invoke(main, ["catalog", "show", "pipelines", "--json"])
    assert shown.exit_code == 0 and shown.stdout.strip() == "[]"


def test_cli_load_then_show(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_CATALOG_URL", f"sqlite:///{tmp_path}/catalog.db")
    runner = CliRunner()
    assert runner.invoke(main, ["catalog", "init"]).exit_code == 0
    validated = runner.invoke(main, ["catalog", "validate", str(SEED)])
    assert validated.exit_code == 0 and validated.stdout == "valid: 51 rows\n"
    loaded = runner.invoke(main, ["catalog", "load", str(SEED)])
    assert loaded.stdout.startswith("loaded: retry_policies 2, pipelines 3, sources 5, targets 10")
    assert loaded.stdout.endswith(
        "; 18 kill switch row(s) added (one per new pipeline, stage and source, enabled: `medallion disable` "
        "halts it); recovery paths refreshed for 15 dataset(s)\n"
    )
    paths = runner.invoke(main, ["paths", "gold_daily_revenue", "--json"])
    assert json.loads(paths.stdout)["paths"][0]["nodes"][-1] == "gold_daily_revenue"
    shown = runner.invoke(main, ["catalog", "show", "sources"])
    assert "source_id=customers_raw" in shown.stdout and "file_format=parquet" in shown.stdout
    unknown = runner.invoke(main, ["catalog", "show", "nope"])
    assert unknown.exit_code == 2 and "unknown catalog table 'nope'" in unknown.stderr


def test_stage_sql_that_does_not_parse_is_reported(store, tmp_path):
    bad = tmp_path / "sql.yaml"
    bad.write_text((SEED / "user_events_etl.yaml").read_text().replace("GROUP BY 1", "GROUP BY (((1"))
    with pytest.raises(CatalogInvalid) as raised:
        validate_files(store.snapshot(), [SEED / "common.yaml", bad])
    [problem] = raised.value.problems
    # The file line of the SQL's fifth line, GROUP BY (((1, where the query stops parsing.
    assert (problem.line, problem.table, problem.key, problem.field) == (
        74,
        "stages",
        "user_events_etl.gold_daily_aggregate",
        "transform_sql",
    )
    assert problem.message.startswith("does not parse as redshift")


HISTORY_READ_BY_GOLD = """\
pipelines: [{pipeline_id: crm}]
sources:
  - {source_id: changes_raw, s3_path: "s3://crm/changes/", file_format: jsonl,
     columns: {id: string, op: string, at: string, tier: string}}
targets:
  - {target_id: bronze_changes, layer: bronze}
  - target_id: silver_history
    layer: silver
    columns: {id: string, op: string, at: timestamp, tier: string}
    keys: [id]
    cdc: {sequence_by: at, apply_as_deletes: "op = 'D'", except_columns: [op]}
    scd_type: 2
    validity_columns: {valid_from: since}
  - target_id: gold_tiers
    layer: gold
    columns: {id: string, tier: string, since: timestamp, current: boolean}
stages:
  - {pipeline_id: crm, stage_order: 1, stage_name: ingest, input_id: changes_raw, target_id: bronze_changes}
  - {pipeline_id: crm, stage_order: 2, stage_name: apply, input_id: bronze_changes, target_id: silver_history}
  - {pipeline_id: crm, stage_order: 3, stage_name: tiers, input_id: silver_history, target_id: gold_tiers,
     transform_sql: "SELECT id, TIER, since, __is_current AS current FROM silver_history
                     WHERE __valid_to IS NULL"}
"""


def test_sql_reads_a_type_2_history_with_its_validity_columns_and_without_the_columns_kept_out(
    store, tmp_path
):
    """The engine adds the validity columns (here `since`, `__valid_to`, `__is_current`), typed as the
    sequence, and leaves `op`, declared to type the events, out of the table (cdc.except_columns)."""
    catalog = tmp_path / "crm.yaml"
    catalog.write_text(HISTORY_READ_BY_GOLD.replace("TIER", "tier"))
    assert validate_files(store.snapshot(), [catalog]).rows["stages"][2].stage_name == "tiers"
    catalog.write_text(HISTORY_READ_BY_GOLD.replace("TIER", "op AS tier"))
    with pytest.raises(CatalogInvalid) as raised:
        validate_files(store.snapshot(), [catalog])
    [problem] = raised.value.problems
    assert (problem.key, problem.message) == (
        "crm.tiers",
        "names column 'op', which its input does not have; it has __is_current, __valid_to, at, id, since, "
        "tier",
    )


def test_pipelines_run_upstream_first(store, tmp_path):
    seed = validate_files(store.snapshot(), [SEED]).rows
    # customer_changes_etl's gold reads orders_etl's silver_orders; the forecast reads two other pipelines.
    with_forecast = validate_files(store.snapshot(), [SEED, SEED / "revenue_forecast.v2.yaml.example"]).rows
    assert store.snapshot().replaced(seed).pipelines_upstream_first() == [
        "orders_etl",
        "customer_changes_etl",
        "user_events_etl",
    ]
    assert store.snapshot().replaced(with_forecast).pipelines_upstream_first() == [
        "orders_etl",
        "customer_changes_etl",
        "user_events_etl",
        "weather_etl",
        "revenue_forecast",
    ]
    # alpha and beta each read the other's silver (no dataset cycle): no order satisfies both, they come
    # together after zeta, whose bronze both read.
    feeding_each_other = tmp_path / "cycle.yaml"
    feeding_each_other.write_text(
        textwrap.dedent("""\
            pipelines: [{pipeline_id: zeta}, {pipeline_id: beta}, {pipeline_id: alpha}]
            sources: [{source_id: raw, s3_path: "s3://b/raw/", file_format: jsonl, columns: {x: string}}]
            targets:
              - {target_id: bronze_x, layer: bronze}
              - {target_id: silver_a, layer: silver}
              - {target_id: silver_b, layer: silver}
              - {target_id: gold_a, layer: gold}
              - {target_id: gold_b, layer: gold}
            stages:
              - {pipeline_id: zeta, stage_order: 1, stage_name: ingest, input_id: raw, target_id: bronze_x}
              - {pipeline_id: alpha, stage_order: 1, stage_name: a, input_id: bronze_x, target_id: silver_a}
              - {pipeline_id: alpha, stage_order: 2, stage_name: ga, input_id: silver_b, target_id: gold_a}
              - {pipeline_id: beta, stage_order: 1, stage_name: b, input_id: bronze_x, target_id: silver_b}
              - {pipeline_id: beta, stage_order: 2, stage_name: gb, input_id: silver_a, target_id: gold_b}
        """)
    )
    cycle = validate_files(store.snapshot(), [feeding_each_other]).rows
    assert store.snapshot().replaced(cycle).pipelines_upstream_first() == ["zeta", "alpha", "beta"]


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def test_every_loadable_table_moves_the_change_count_and_runtime_tables_do_not(backend, tmp_path, request):
    """`lineage serve` keeps its graph while the count stands still: a loadable table without the
    trigger would let a change of structure go unseen, and a runtime table with one would make every run
    look like one."""
    url = (
        f"sqlite:///{tmp_path}/catalog.db" if backend == "sqlite" else request.getfixturevalue("pg_database")
    )
    store = CatalogStore(url)
    store.migrate()
    query = (
        "SELECT DISTINCT tbl_name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%\\_changed\\_%' "
        "ESCAPE '\\'"
        if backend == "sqlite"
        else "SELECT DISTINCT event_object_table FROM information_schema.triggers WHERE trigger_name LIKE "
        "'%\\_changed'"
    )
    with store.engine.connect() as connection:
        assert sorted(connection.execute(text(query)).scalars()) == sorted(LOADABLE)
    counted = []
    with store.engine.begin() as connection:
        counted.append(change_count(connection))
    store.record_audit(
        run_id="r1", pipeline_id="p", stage_name="s", dataset="d", event="stage", status="success"
    )
    store.record_bookmarks("raw", [("s3://b/k.jsonl", "etag", 1)], "batch")
    with store.engine.begin() as connection:
        counted.append(change_count(connection))
        connection.execute(
            text("UPDATE retry_policies SET max_retries = 2")
        )  # plain SQL, no row needed on PG
        connection.execute(text("INSERT INTO pipelines (pipeline_id) VALUES ('p')"))
        counted.append(change_count(connection))
    assert counted[0] == counted[1] < counted[2]
    store.engine.dispose()


def test_a_catalog_file_of_comments_only_holds_no_rows(tmp_path):
    """An empty file, or one whose rows are all commented out, loads as nothing rather than crashing."""
    empty, commented = tmp_path / "empty.yaml", tmp_path / "commented.yaml"
    empty.write_text("")
    commented.write_text("# pipelines:\n#   - {pipeline_id: p}\n")
    loaded = validate_files(CatalogSnapshot(), [empty, commented])
    assert {table: rows for table, rows in loaded.rows.items() if rows} == {}


def warehouse_target(tmp_path, table: str, column: str = "day"):
    path = tmp_path / "long.yaml"
    path.write_text(
        "targets:\n"
        f"  - {{target_id: gold_long, layer: gold, kind: warehouse, location: analytics.{table}, "
        f"columns: {{{column}: date}}}}\n"
    )
    return path


def test_warehouse_names_too_long_for_the_configured_warehouse_are_refused_at_validate(
    store, tmp_path, monkeypatch
):
    monkeypatch.delenv("MEDALLION_WAREHOUSE_URL", raising=False)
    table = "t" * 64
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [warehouse_target(tmp_path, table, "c" * 64)])
    assert [p.message for p in refused.value.problems] == [
        f"name {table!r} is 64 bytes; postgresql (the strictest warehouse supported; MEDALLION_WAREHOUSE_URL "
        f"is unset) keeps only 63, so it would be cut to {table[:63]!r}",
        f"name {'c' * 64!r} is 64 bytes; postgresql (the strictest warehouse supported; "
        f"MEDALLION_WAREHOUSE_URL is unset) keeps only 63, so it would be cut to {'c' * 63!r}",
    ]
    # A table whose own name fits may still be too long once a merge names its staging table after it.
    monkeypatch.setenv("MEDALLION_WAREHOUSE_URL", "postgresql://warehouse.example/analytics")
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [warehouse_target(tmp_path, "t" * 50)])
    assert [p.message for p in refused.value.problems] == [
        f"name {'t' * 50 + '__medallion_stage'!r} is 67 bytes; postgresql keeps only 63, so it would be cut "
        f"to {('t' * 50 + '__medallion_stage')[:63]!r}"
    ]
    # Redshift keeps 127 bytes, DuckDB any.
    for url in ("redshift://warehouse.example/analytics", "duckdb:///warehouse.duckdb"):
        monkeypatch.setenv("MEDALLION_WAREHOUSE_URL", url)
        validate_files(store.snapshot(), [warehouse_target(tmp_path, table, "c" * 64)])


def test_validate_knows_each_warehouses_identifier_limit():
    from medallion_assets.naming import IDENTIFIER_BYTES
    from medallion_assets.storage.warehouse.duckdb_file import DuckDBWarehouse
    from medallion_assets.storage.warehouse.postgres import PostgresWarehouse
    from medallion_assets.storage.warehouse.redshift import RedshiftWarehouse

    assert IDENTIFIER_BYTES == {
        "postgresql": PostgresWarehouse.max_identifier_bytes,
        "redshift": RedshiftWarehouse.max_identifier_bytes,
        "duckdb": DuckDBWarehouse.max_identifier_bytes,
    }


def test_validate_of_a_folder_without_catalog_files_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_CATALOG_URL", f"sqlite:///{tmp_path}/catalog.db")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["catalog", "validate", str(empty)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"catalog folder {empty} holds no .yaml or .yml file\n",
    )


def test_a_catalog_without_profiles_is_not_warned_about_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_CATALOG_URL", f"sqlite:///{tmp_path}/catalog.db")
    plain = tmp_path / "plain.yaml"
    plain.write_text("pipelines:\n  - {pipeline_id: plain}\n")
    result = CliRunner().invoke(main, ["catalog", "validate", str(plain)])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "valid: 1 rows\n", "")
    # Once the catalog uses profiles, one without is_default is worth a word.
    plain.write_text(plain.read_text() + "profiles:\n  - {profile_id: focus, is_default: false}\n")
    result = CliRunner().invoke(main, ["catalog", "validate", str(plain)])
    assert result.stderr == (
        "warning: no profile has is_default: pipelines without a pipeline_profiles row use balanced\n"
    )
