"""Lineage versions: recorded whenever a catalog write changes how a dataset is made, whoever writes; shown by
`medallion lineage history` with their diffs; followed by the asset's code_version. The seed's forecast
example (metadata_seed/revenue_forecast.v1/v2.yaml.example) shows a forecast that starts to read the
weather."""

from __future__ import annotations

import json

import pytest
from alembic import command
from alembic.config import Config
from click.testing import CliRunner
from sqlalchemy import insert, text

from medallion_assets.catalog.schema import lineage_versions
from medallion_assets.catalog.store import MIGRATIONS, CatalogStore
from medallion_assets.catalog.versions import record_lineage_versions
from medallion_assets.cli import main
from medallion_assets.definitions import build_definitions
from tests.conftest import SEED

FORECAST = "gold_revenue_forecast"
V1, V2 = SEED / "revenue_forecast.v1.yaml.example", SEED / "revenue_forecast.v2.yaml.example"


@pytest.fixture
def catalog_url(tmp_path, monkeypatch) -> str:
    url = f"sqlite:///{tmp_path}/catalog.db"
    monkeypatch.setenv("MEDALLION_CATALOG_URL", url)
    return url


def load(*paths) -> None:
    loaded = CliRunner().invoke(main, ["catalog", "load", *map(str, paths)])
    assert loaded.exit_code == 0, loaded.output


def history(dataset: str) -> list[dict]:
    shown = CliRunner().invoke(main, ["lineage", "history", dataset, "--json"])
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.stdout)["versions"]


def asset_code_version(catalog_url: str, tmp_path, key: str) -> str:
    defs = build_definitions(catalog_url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
    return next(
        spec.code_version for spec in defs.resolve_all_asset_specs() if spec.key.to_user_string() == key
    )


def test_the_forecast_gains_a_version_when_it_starts_reading_the_weather(catalog_url, tmp_path):
    load(SEED)
    load(V1)
    first_code_version = asset_code_version(catalog_url, tmp_path, "gold/revenue_forecast")
    load(V2)
    load(V2)  # loading the same definition again records nothing

    v1, v2 = history(FORECAST)
    assert (v1["version"], v1["inputs"], v1["via"]) == (
        1,
        ["gold_daily_revenue"],
        "revenue_forecast.gold_revenue_forecast",
    )
    assert v1["columns"] == {
        "forecast_date": "date",
        "country": "string",
        "forecast_revenue": "decimal(18,2)",
    }
    assert "DATE_ADD(order_date, 7)" in v1["transform_sql"]
    assert (v2["version"], v2["inputs"]) == (2, ["gold_daily_revenue", "silver_weather"])
    assert {
        k: v2[k]
        for k in (
            "inputs_added",
            "inputs_removed",
            "columns_added",
            "columns_removed",
            "columns_retyped",
            "changed",
        )
    } == {
        "inputs_added": ["silver_weather"],
        "inputs_removed": [],
        "columns_added": ["rain_mm"],
        "columns_removed": [],
        "columns_retyped": [],
        "changed": ["transform"],
    }
    assert v1["created_at"] < v2["created_at"]

    # The asset's code_version is the lineage version's: Dagster sees v1's materializations as stale.
    assert first_code_version == v1["code_version"] != v2["code_version"]
    assert asset_code_version(catalog_url, tmp_path, "gold/revenue_forecast") == v2["code_version"]

    text = CliRunner().invoke(main, ["lineage", "history", FORECAST]).stdout.splitlines()
    assert text == [
        f"v1  {v1['created_at']}  {v1['code_version']}  inputs: gold_daily_revenue",
        f"v2  {v2['created_at']}  {v2['code_version']}  inputs: gold_daily_revenue, silver_weather"
        "  (+silver_weather; columns +rain_mm; transform changed)",
    ]
    # The weather pipeline's datasets got their first versions in the same load.
    assert [v["inputs"] for v in history("silver_weather")] == [["bronze_weather"]]


def test_every_writer_is_versioned_and_only_changes_to_the_data_count(catalog_url):
    store = CatalogStore(catalog_url)
    store.migrate()
    load(SEED)
    gold = store.snapshot().targets["gold_daily_revenue"]
    # Descriptions, owners and retry policies decide no rows: no new version.
    store.upsert({"targets": [gold.model_copy(update={"description": "renamed", "owner": "someone"})]})
    assert [v.version for v in store.lineage_versions("gold_daily_revenue")] == [1]

    store.upsert(
        {
            "targets": [
                gold.model_copy(update={"columns": {**gold.columns, "orders": "int", "avg_order": "double"}})
            ]
        }
    )
    rules = store.snapshot().rule_sets["gold_daily_revenue_rules"]
    store.upsert({"validation_rules": [rules.model_copy(update={"check_def": rules.check_def[:1]})]})
    stage = store.snapshot().stage_producing("silver_orders")
    store.upsert({"stages": [stage.model_copy(update={"inputs": []})]})

    shown = {v["version"]: v for v in history("gold_daily_revenue")}
    assert (shown[2]["columns_added"], shown[2]["columns_retyped"], shown[2]["changed"]) == (
        ["avg_order"],
        ["orders: bigint → int"],
        [],
    )
    assert (shown[3]["inputs_added"], shown[3]["changed"]) == ([], ["rules"])
    [*_, silver] = history("silver_orders")
    assert (silver["version"], silver["inputs_removed"]) == (2, ["bronze_customers"])
    with store.engine.begin() as connection:
        assert record_lineage_versions(connection, store.snapshot()) == []


def test_a_write_and_the_versions_it_causes_commit_together_or_not_at_all(catalog_url):
    store = CatalogStore(catalog_url)
    store.migrate()
    load(SEED)
    stage = store.snapshot().stage_producing("silver_orders")
    with store.engine.begin() as connection:  # the database itself refuses the next version
        connection.execute(
            text(
                "CREATE TRIGGER refuse_versions BEFORE INSERT ON lineage_versions "
                "BEGIN SELECT RAISE(ABORT, 'versions refused'); END"
            )
        )
    with pytest.raises(Exception, match="versions refused"):
        store.upsert({"stages": [stage.model_copy(update={"inputs": []})]})
    assert store.snapshot().stage_producing("silver_orders").inputs == stage.inputs
    assert [v.version for v in store.lineage_versions("silver_orders")] == [1]


def test_history_of_an_unknown_dataset_offers_close_matches(catalog_url):
    load(SEED)
    unknown = CliRunner().invoke(main, ["lineage", "history", "gold_daily_revenu"])
    assert unknown.exit_code == 2
    assert unknown.stderr == (
        "unknown dataset 'gold_daily_revenu'; did you mean: gold_daily_revenue, gold_daily_user_events, "
        "gold_daily_revenue_by_segment?\n"
    )
    never = CliRunner().invoke(main, ["lineage", "history", "orders_raw"])
    assert never.stdout == "no lineage versions recorded for orders_raw\n"


def test_postgres_catalog_records_the_same_versions(pg_database, tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_CATALOG_URL", pg_database)
    load(SEED)
    load(V1)
    load(V2)
    assert [(v["version"], v["inputs_added"], v["columns_added"]) for v in history(FORECAST)] == [
        (1, ["gold_daily_revenue"], ["forecast_date", "country", "forecast_revenue"]),
        (2, ["silver_weather"], ["rain_mm"]),
    ]
    CatalogStore(pg_database).engine.dispose()


def test_versions_written_before_migration_0004_still_show(catalog_url):
    store = CatalogStore(catalog_url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0003")
        connection.execute(
            insert(lineage_versions).values(
                dataset="gold_old",
                version=1,
                fingerprint="a1b2c3",
                inputs=["silver_old"],
                transform_sql="SELECT 1",
            )
        )
    store.migrate()
    [old] = history("gold_old")
    assert (old["code_version"], old["inputs"], old["columns"], old["via"]) == (
        "a1b2c3",
        ["silver_old"],
        {},
        None,
    )
