"""The asset factory: the generated definitions for the seed catalog, and pipelines added by rows alone."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from dagster import AssetKey, AssetSpec, DagsterInstance, Definitions, EnvVar, serialize_value

from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.models import Pipeline, Source, Target
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.dagster_compat import RepositorySnap
from medallion_assets.definitions import build_definitions
from medallion_assets.loading import validate_files
from medallion_assets.sensors.launcher import Launcher
from tests.conftest import SEED

SNAPSHOT = Path(__file__).with_name("snapshots") / "seed_definitions.json"


@pytest.fixture
def catalog_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path}/catalog.db"
    store = CatalogStore(url)
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    return url


def describe(defs: Definitions) -> dict:
    """What a user sees in the Dagster UI: keys, deps, groups, kinds, pools, checks and whether they block."""
    graph = defs.resolve_asset_graph()
    described = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        checks = sorted(
            (check.name, graph.get_check_spec(check).blocking)
            for check in graph.get_check_keys_for_assets({key})
        )
        described[key.to_user_string()] = {
            "group": node.group_name,
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "kinds": sorted(node.kinds),
            "materializable": node.is_materializable,
            "pools": sorted(node.pools or []),
            "checks": [list(check) for check in checks],
            "code_version": bool(node.code_version),
        }
    return described


def test_seed_definitions_match_the_snapshot(catalog_url, tmp_path):
    defs = build_definitions(catalog_url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
    Definitions.validate_loadable(defs)
    described = describe(defs)
    recorded = json.loads(SNAPSHOT.read_text())
    # Rewriting is for a deliberate change; the run that rewrites it still fails, on the snapshot it replaced.
    if described != recorded and os.environ.get("MEDALLION_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(described, indent=2) + "\n")
    assert described == recorded, (
        f"{SNAPSHOT.name} differs: review, then rewrite it with MEDALLION_UPDATE_SNAPSHOTS=1 and run again"
    )


class Prefixed(MedallionTranslator):
    """A user's naming: every key under `acme/`, and groups named for the team that owns each pipeline."""

    def get_asset_key(self, target: Target) -> AssetKey:
        return super().get_asset_key(target).with_prefix("acme")

    def get_source_asset_key(self, source: Source) -> AssetKey:
        return super().get_source_asset_key(source).with_prefix("acme")

    def get_group_name(self, pipeline: Pipeline) -> str:
        return f"team_{pipeline.pipeline_id}"


def test_a_translator_subclass_renames_the_definitions_and_their_sensors_follow(catalog_url, tmp_path):
    urls = (catalog_url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
    renamed = build_definitions(*urls, translator=Prefixed())
    Definitions.validate_loadable(renamed)
    default = describe(build_definitions(*urls))
    assert describe(renamed) == {
        f"acme/{key}": {
            **node,
            "group": f"team_{node['group']}",
            "deps": [f"acme/{dep}" for dep in node["deps"]],
        }
        for key, node in default.items()
    }
    # The launcher selects the keys the definitions have, not the default's.
    store = CatalogStore(catalog_url)
    launcher = Launcher(DagsterInstance.ephemeral(), logging.getLogger(), store.snapshot(), store, Prefixed())
    assert [key.to_user_string() for key in launcher.runnable_assets("user_events_etl")] == [
        "acme/bronze/user_events",
        "acme/silver/user_events",
        "acme/gold/daily_user_events",
    ]
    # A run worker builds its definitions again with a new translator: the one built first must be found.
    assert (
        Prefixed() == Prefixed()
        and hash(Prefixed()) == hash(Prefixed())
        and Prefixed() != MedallionTranslator()
    )


def test_gold_asset_carries_table_metadata(catalog_url, tmp_path):
    defs = build_definitions(catalog_url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
    spec = next(s for s in defs.resolve_all_asset_specs() if s.key.path == ["gold", "daily_user_events"])
    assert spec.metadata["dagster/table_name"] == "analytics.daily_user_events"
    assert [c.name for c in spec.metadata["dagster/column_schema"].columns] == [
        "event_date",
        "total_events",
        "unique_users",
    ]
    assert spec.metadata["dagster/column_schema"].columns[2].description == "distinct user_id values that day"
    assert spec.owners == ["team:growth-data"]
    raw = next(s for s in defs.resolve_all_asset_specs() if s.key.path == ["raw", "user_events_raw"])
    assert raw.owners == ["team:growth-data"]  # a source without an owner of its own has its pipeline's
    owners = MedallionTranslator().get_owners
    assert owners("Data Platform") == ["team:Data-Platform"] and owners("a@b.io") == ["a@b.io"]
    # Gold says how it is built: by the days silver's changes touch, its key an expression of a column.
    assert spec.description == (
        "Events and distinct users per day\n\nIncremental: recomputes only the groups "
        "(event_date = CAST(event_ts AS DATE)) that silver's changes touch (whole on a first build, a "
        "definition change, a rollback, over fewer than 5,000,000 silver rows, or when changes touch a third "
        "of its groups or more)."
    )


def test_a_pipeline_added_to_the_catalog_appears_after_reload(catalog_url, tmp_path):
    lake, warehouse = str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb"
    before = {
        s.key.to_user_string()
        for s in build_definitions(catalog_url, lake, warehouse).resolve_all_asset_specs()
    }
    added = tmp_path / "clicks.yaml"
    added.write_text("""
pipelines: [{pipeline_id: clicks_etl}]
sources: [{source_id: clicks_raw, s3_path: "s3://medallion-raw/clicks/", file_format: jsonl,
           columns: {id: string}}]
targets: [{target_id: bronze_clicks, layer: bronze}]
stages: [{pipeline_id: clicks_etl, stage_order: 1, stage_name: ingest, input_id: clicks_raw,
          target_id: bronze_clicks}]
""")
    store = CatalogStore(catalog_url)
    store.upsert(validate_files(store.snapshot(), [added]).rows)
    after = {
        s.key.to_user_string(): s
        for s in build_definitions(catalog_url, lake, warehouse).resolve_all_asset_specs()
    }
    assert set(after) - before == {"raw/clicks_raw", "bronze/clicks"}
    assert after["bronze/clicks"].group_name == "clicks_etl"


def test_changing_a_stage_changes_its_code_version_only(catalog_url, tmp_path):
    lake, warehouse = str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb"

    def versions() -> dict[str, str | None]:
        return {
            s.key.to_user_string(): s.code_version
            for s in build_definitions(catalog_url, lake, warehouse).resolve_all_asset_specs()
        }

    before = versions()
    changed = tmp_path / "changed.yaml"
    changed.write_text(
        (SEED / "user_events_etl.yaml")
        .read_text()
        .replace("COUNT(*) AS total_events", "COUNT(1) AS total_events")
    )
    store = CatalogStore(catalog_url)
    store.upsert(validate_files(store.snapshot(), [changed]).rows)
    after = versions()
    assert {k for k in before if before[k] != after[k]} == {"gold/daily_user_events"}


def test_hand_written_specs_and_generated_assets_agree_on_keys(catalog_url, tmp_path):
    defs = build_definitions(catalog_url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
    keys = {s.key for s in defs.resolve_all_asset_specs()}
    assert all(isinstance(key.path, list) and len(key.path) == 2 for key in keys)
    assert {key.path[0] for key in keys} == {"raw", "bronze", "silver", "gold"}
    assert AssetSpec(key=["gold", "daily_revenue"]).key in keys


def test_an_empty_catalog_loads_with_the_control_sensor_only(tmp_path):
    defs = build_definitions(
        f"sqlite:///{tmp_path}/empty.db", str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb"
    )
    Definitions.validate_loadable(defs)
    assert [sensor.name for sensor in defs.sensors] == ["medallion_control"]


def test_the_seed_loads_with_all_four_sensors_on_dagsters_own_asset_job(catalog_url, tmp_path):
    defs = build_definitions(catalog_url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
    Definitions.validate_loadable(defs)
    jobs = {sensor.name: [target.job_name for target in sensor.targets] for sensor in defs.sensors}
    assert jobs == {
        "medallion_control": [],
        "medallion_launcher": ["__ASSET_JOB"],
        "medallion_healing": ["__ASSET_JOB"],
        "medallion_notifications": [],
    }
    assert [job.name for job in defs.get_repository_def().get_all_jobs()] == ["__ASSET_JOB"]
    # Opening the UI launches nothing unasked: the launcher waits to be turned on; the others run by default.
    statuses = {sensor.name: sensor.default_status.value for sensor in defs.sensors}
    assert statuses == {
        "medallion_control": "RUNNING",
        "medallion_launcher": "STOPPED",
        "medallion_healing": "RUNNING",
        "medallion_notifications": "RUNNING",
    }
    assert {sensor.minimum_interval_seconds for sensor in defs.sensors} == {30}


def test_the_sensors_tick_as_often_as_configured(catalog_url, tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_SENSOR_INTERVAL_SECONDS", "5")
    defs = build_definitions(catalog_url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
    assert {sensor.name: sensor.minimum_interval_seconds for sensor in defs.sensors} == {
        "medallion_control": 5,
        "medallion_launcher": 5,
        "medallion_healing": 5,
        "medallion_notifications": 5,
    }
    monkeypatch.setenv("MEDALLION_SENSOR_INTERVAL_SECONDS", "0.5")
    with pytest.raises(ValueError) as refused:
        build_definitions(catalog_url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
    assert str(refused.value) == (
        "MEDALLION_SENSOR_INTERVAL_SECONDS='0.5' is not a whole number of seconds of at least 1"
    )


def test_the_size_gold_goes_by_groups_from_is_configured_and_said_in_its_description(
    catalog_url, tmp_path, monkeypatch
):
    def gold_description() -> str:
        defs = build_definitions(catalog_url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
        spec = next(s for s in defs.resolve_all_asset_specs() if s.key.path == ["gold", "daily_user_events"])
        return spec.description or ""

    monkeypatch.setenv("MEDALLION_GOLD_GROUPS_FROM_ROWS", "20000000")
    assert "over fewer than 20,000,000 silver rows" in gold_description()
    monkeypatch.setenv("MEDALLION_GOLD_GROUPS_FROM_ROWS", "5e6")
    with pytest.raises(ValueError) as refused:
        gold_description()
    assert (
        str(refused.value)
        == "MEDALLION_GOLD_GROUPS_FROM_ROWS='5e6' is not a whole number of rows of at least 0"
    )


def test_urls_from_the_environment_reach_the_ui_by_name_never_their_password(
    catalog_url, tmp_path, monkeypatch
):
    monkeypatch.setenv("MEDALLION_CATALOG_URL", catalog_url)
    monkeypatch.setenv("MEDALLION_WAREHOUSE_URL", "postgresql://loader:s3cr3t-pw@127.0.0.1:5432/warehouse")
    defs = build_definitions(lake_root=str(tmp_path / "lake"))
    shown = serialize_value(RepositorySnap.from_def(defs.get_repository_def()))
    assert "MEDALLION_WAREHOUSE_URL" in shown and "s3cr3t-pw" not in shown
    assert defs.resources["warehouse"].url == EnvVar("MEDALLION_WAREHOUSE_URL")
