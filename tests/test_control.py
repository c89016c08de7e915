"""Kill switches: flipped by CLI or plain SQL alike, recorded, and obeyed before launch, at stage start,
before a load commits, and by the control sensor for queued runs."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from dagster import (
    AssetSelection,
    DagsterRunStatus,
    build_sensor_context,
    instance_for_test,
    materialize,
)
from sqlalchemy import text

from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.cli import main
from medallion_assets.control.steering.flags import (
    UnknownEntity,
    add_missing_flags,
    disabled_reason,
    read_control_state,
    set_flag,
)
from medallion_assets.control.steering.throttles import CatalogThrottles
from medallion_assets.dagster_compat import (
    RegisteredCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from medallion_assets.definitions import build_definitions
from medallion_assets.engine.stage import StageRunner
from medallion_assets.errors import StageHalted
from medallion_assets.loading import validate_files
from medallion_assets.recovery.routes import CatalogRoutes
from medallion_assets.sensors.control import cancel_disabled_queued_runs
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables
from medallion_assets.storage.warehouse import warehouse_from_url
from tests.conftest import SEED


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def store(request, tmp_path) -> CatalogStore:
    url = (
        f"sqlite:///{tmp_path}/catalog.db"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_database")
    )
    store = CatalogStore(url)
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    yield store
    store.engine.dispose()


def gold_stage(store):
    return store.snapshot().stages("user_events_etl")[2]


def test_cli_and_plain_sql_flips_have_the_same_effect_and_history(store):
    stage = gold_stage(store)
    snapshot = store.snapshot()
    set_flag(store, "pipeline", "user_events_etl", False, "maintenance window", who="alice")
    assert disabled_reason(snapshot, read_control_state(store), stage) == (
        "pipeline user_events_etl disabled by alice: maintenance window"
    )
    set_flag(store, "pipeline", "user_events_etl", True, who="alice")
    assert disabled_reason(snapshot, read_control_state(store), stage) is None
    with store.engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE control_flags SET flag_value = false, reason = 'bucket migration' "
                "WHERE entity_type = 'pipeline' AND entity_id = 'user_events_etl'"
            )
        )
    assert disabled_reason(snapshot, read_control_state(store), stage).endswith(": bucket migration")
    history = [
        (h["old_value"], h["new_value"], h["reason"], h["changed_by"])
        for h in store.table_rows("control_flag_history")
    ]
    sql_user = "sql" if store.engine.dialect.name == "sqlite" else "postgres"
    assert history == [
        (None, False, "maintenance window", "alice"),
        (False, True, "", "alice"),
        (True, False, "bucket migration", sql_user),
    ]


def test_the_readme_update_finds_rows_made_on_load_and_keeps_the_author_it_names(store):
    added = add_missing_flags(store)
    assert sorted((f.entity_type, f.entity_id) for f in added if f.entity_type != "stage") == [
        ("pipeline", "customer_changes_etl"),
        ("pipeline", "orders_etl"),
        ("pipeline", "user_events_etl"),
        ("source", "customer_changes_raw"),
        ("source", "customers_raw"),
        ("source", "orders_raw"),
        ("source", "orders_raw_replica"),
        ("source", "user_events_raw"),
    ]
    assert len([f for f in added if f.entity_type == "stage"]) == 10
    assert add_missing_flags(store) == []  # idempotent: existing rows, flipped or not, stay as they are
    with store.engine.begin() as connection:
        updated = connection.execute(
            text(
                "UPDATE control_flags SET flag_value = false, reason = 'bucket migration', updated_by = "
                "'alice' WHERE entity_type = 'pipeline' AND entity_id = 'user_events_etl'"
            )
        )
        assert updated.rowcount == 1
        connection.execute(
            text(
                "UPDATE control_flags SET flag_value = false, reason = 'replica rebuild' "
                "WHERE entity_type = 'source' AND entity_id = 'orders_raw_replica'"
            )
        )
    snapshot, state = store.snapshot(), read_control_state(store)
    assert disabled_reason(snapshot, state, gold_stage(store)) == (
        "pipeline user_events_etl disabled by alice: bucket migration"
    )
    sql_user = "sql" if store.engine.dialect.name == "sqlite" else "postgres"
    flipped = [
        (h["entity_id"], h["new_value"], h["reason"], h["changed_by"])
        for h in store.table_rows("control_flag_history")
        if h["old_value"] is not None
    ]
    assert flipped == [
        ("user_events_etl", False, "bucket migration", "alice"),
        ("orders_raw_replica", False, "replica rebuild", sql_user),
    ]
    rows = {(r["entity_type"], r["entity_id"]): r["updated_by"] for r in store.table_rows("control_flags")}
    assert rows[("pipeline", "user_events_etl")] == "alice"
    assert rows[("source", "orders_raw_replica")] == sql_user


def test_a_new_row_inserted_by_sql_disables_a_source_system(store):
    with store.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO control_flags (entity_type, entity_id, flag_name, flag_value, reason) "
                "VALUES ('source', 'medallion_raw', 'enabled', false, 'S3 outage')"
            )
        )
    snapshot, state = store.snapshot(), read_control_state(store)
    reasons = {s.stage_name: disabled_reason(snapshot, state, s) for s in snapshot.stages()}
    assert reasons == {
        "bronze_customer_changes_ingest": "source medallion_raw disabled: S3 outage",
        "silver_customer_history_apply": None,
        "gold_daily_revenue_by_segment": None,
        "bronze_orders_ingest": "source medallion_raw disabled: S3 outage",
        "bronze_customers_ingest": "source medallion_raw disabled: S3 outage",
        "silver_orders_enrich": None,
        "gold_daily_revenue": None,
        "bronze_ingest": "source medallion_raw disabled: S3 outage",
        "silver_clean": None,
        "gold_daily_aggregate": None,
    }


def test_flags_for_unknown_ids_are_refused_with_the_known_ones(store):
    with pytest.raises(UnknownEntity) as raised:
        set_flag(store, "pipeline", "user_event_etl", False, "typo")
    assert str(raised.value) == (
        "unknown pipeline 'user_event_etl'; known: customer_changes_etl, orders_etl, user_events_etl"
    )
    assert store.table_rows("control_flags") == []


def test_cli_disable_then_run_exits_3_and_launches_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_HOME", str(tmp_path))
    runner = CliRunner()
    assert runner.invoke(main, ["catalog", "load", str(SEED)]).exit_code == 0
    flipped = runner.invoke(
        main, ["disable", "stage", "user_events_etl.silver_clean", "--reason", "bad upstream"]
    )
    assert flipped.exit_code == 0 and "stage user_events_etl.silver_clean disabled by " in flipped.stdout
    unknown = runner.invoke(main, ["disable", "stage", "user_events_etl.nope", "--reason", "x"])
    assert (
        unknown.exit_code == 2
        and "known: customer_changes_etl.bronze_customer_changes_ingest" in unknown.stderr
    )
    monkeypatch.setattr(
        "medallion_assets.runner._in_process", lambda *args: pytest.fail("nothing may launch")
    )
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    set_flag(store, "pipeline", "user_events_etl", False, "frozen")
    result = runner.invoke(main, ["run", "user_events_etl"])
    assert result.exit_code == 3
    assert "bronze/user_events" in result.stdout and "(pipeline user_events_etl disabled by " in result.stdout
    # The halt is audited, as a halt inside a run is, for `medallion audit` to show.
    halts = [(e["stage_name"], e["status"], e["error"]) for e in store.audit_entries(event="stage")]
    assert [stage for stage, _, _ in halts] == ["bronze_ingest", "silver_clean", "gold_daily_aggregate"]
    assert all(status == "halted" for _, status, _ in halts)
    assert halts[0][2].startswith(
        "halted by a kill switch before start: pipeline user_events_etl disabled by "
    )


def test_a_stage_disabled_after_launch_halts_at_its_start(tmp_path, s3_endpoint, spark):
    """Bypass the launcher's own check: the asset itself must notice the switch and halt, saying so."""
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    defs = build_definitions(store.url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
    set_flag(store, "dataset", "silver_user_events", False, "late data", who="ops")
    gold = MedallionTranslator().get_asset_key(store.snapshot().targets["gold_daily_user_events"])
    silver = MedallionTranslator().get_asset_key(store.snapshot().targets["silver_user_events"])
    with instance_for_test() as instance:
        result = materialize(
            list(defs.assets),
            resources=defs.resources,
            instance=instance,
            selection=AssetSelection.assets(silver, gold),
            raise_on_error=False,
        )
        run = instance.get_run_by_id(result.run_id)
    # A halt is not a success: the step fails with the reason as its message, the run's tags say why.
    reason = "dataset silver_user_events disabled by ops: late data"
    assert not result.success
    [failure] = result.get_step_failure_events()
    assert (
        failure.step_failure_data.user_failure_data.description
        == f"halted by a kill switch before start: {reason}"
    )
    assert (run.tags["medallion/status"], run.tags["medallion/halt_reason"]) == ("halted", reason)
    assert result.get_asset_materialization_events() == []
    # Dagster skips gold: its upstream yielded no materialization in this run.
    halts = [(h["dataset"], h["error"]) for h in store.audit_entries(status="halted")]
    assert halts == [("silver_user_events", "dataset silver_user_events disabled by ops: late data")]
    assert [e["dataset"] for e in store.audit_entries(event="stage")] == ["silver_user_events"]


def test_a_switch_flipped_during_a_stage_stops_it_before_the_load(tmp_path, spark):
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    snapshot = store.snapshot()
    lake = tmp_path / "lake"
    silver = spark.createDataFrame(
        [("e1", "u1", "view", "2026-11-01 10:00:00", 1.0)],
        "event_id string, user_id string, event_type string, event_ts string, value double",
    ).selectExpr("event_id", "user_id", "event_type", "CAST(event_ts AS TIMESTAMP) AS event_ts", "value")
    tables, silver_table = LakeTables(spark, Lake.resolve(lake)), TableRef("lake", "silver", "user_events")
    tables.ensure(silver_table, silver.schema, None)
    tables.append(silver_table, silver, "b1")
    warehouse = warehouse_from_url(f"duckdb:///{tmp_path}/wh.duckdb")
    asked = []

    def halt_reason(stage):  # the switch went down while the gold SQL ran
        asked.append(stage.stage_name)
        return "target warehouse disabled by ops: failover"

    runner = StageRunner(
        spark,
        snapshot,
        store,
        Lake.resolve(lake),
        warehouse,
        halt_reason,
        throttle=CatalogThrottles(store),
        recovery=CatalogRoutes(store, snapshot),
    )
    with pytest.raises(StageHalted, match="failover"):
        runner.run_stage(gold_stage(store))
    assert asked == ["gold_daily_aggregate"]
    assert warehouse.query(
        "SELECT count(*) AS n FROM information_schema.tables WHERE table_schema = 'analytics'"
    ) == [{"n": 0}]
    warehouse.close()


def test_the_control_sensor_cancels_queued_runs_of_disabled_work(store, tmp_path):
    defs = build_definitions(store.url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
    job = defs.resolve_implicit_global_asset_job_def()
    snapshot = store.snapshot()
    events_gold = MedallionTranslator().get_asset_key(snapshot.targets["gold_daily_user_events"])
    orders_gold = MedallionTranslator().get_asset_key(snapshot.targets["gold_daily_revenue"])
    overrides = {"run_coordinator": {"module": "dagster", "class": "QueuedRunCoordinator"}}
    with instance_for_test(overrides=overrides) as instance:
        # Queued runs point at the code location the daemon will launch them from, as the UI's runs do.
        origin = RemoteJobOrigin(
            RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("medallion"), "__repository__"), job.name
        )
        queued = {
            key: instance.create_run_for_job(
                job_def=job,
                asset_selection=frozenset({key}),
                status=DagsterRunStatus.QUEUED,
                remote_job_origin=origin,
            ).run_id
            for key in (events_gold, orders_gold)
        }
        context = build_sensor_context(instance=instance)
        assert cancel_disabled_queued_runs(context, snapshot, store, MedallionTranslator()) == []
        with store.engine.begin() as connection:
            connection.execute(
                text("UPDATE pipelines SET enabled = false WHERE pipeline_id = 'user_events_etl'")
            )
        assert cancel_disabled_queued_runs(context, snapshot, store, MedallionTranslator()) == [
            queued[events_gold]
        ]
        assert instance.get_run_by_id(queued[events_gold]).status in (
            DagsterRunStatus.CANCELED,
            DagsterRunStatus.CANCELING,
        )
        assert instance.get_run_by_id(queued[orders_gold]).status == DagsterRunStatus.QUEUED
        reason = "pipeline user_events_etl is disabled in the pipelines table"
        tags = instance.get_run_by_id(queued[events_gold]).tags
        assert (tags["medallion/status"], tags["medallion/halt_reason"]) == ("cancelled", reason)
        messages = [entry.message for entry in instance.all_logs(queued[events_gold])]
        assert f"cancelled by the medallion_control sensor: {reason}" in messages
    [cancel] = store.audit_entries(event="cancel")
    assert (cancel["run_id"], cancel["error"]) == (
        queued[events_gold],
        "pipeline user_events_etl is disabled in the pipelines table",
    )
