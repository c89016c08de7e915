"""Self-healing: each built-in action proven by injecting its real fault into a real run, and the rules'
checks.

Faults are real: objects that are not UTF-8, files with new fields, an empty prefix that fills later, a
warehouse backend killed with pg_terminate_backend, a leftover staging table, a result over Spark's driver
limit. The gold table must equal a fault-free run's, and every attempt must be in the audit log.
"""

from __future__ import annotations

import gzip
import json
import threading
import urllib.request

import boto3
import psycopg2
import pytest
from click.testing import CliRunner
from dagster import AssetKey, build_sensor_context, instance_for_test, materialize
from sqlalchemy import text

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.models import HealingAction, Stage
from medallion_assets.cli import main
from medallion_assets.control.healing.rules import ACTIONS, Fault, matching_rule
from medallion_assets.definitions import build_definitions
from medallion_assets.storage.objects import read_bytes
from medallion_assets.storage.warehouse import warehouse_from_url
from tests.conftest import RAW
from tests.fixtures.drills import (
    drill_a_warehouse_connection_lost_mid_load,
    healing_entry,
    kill_the_load_once,
    new_events,
    put_events,
)
from tests.reference import expected_daily_revenue, expected_daily_user_events

STAGE = Stage(
    pipeline_id="user_events_etl",
    stage_order=1,
    stage_name="bronze_ingest",
    input_id="user_events_raw",
    target_id="bronze_user_events",
)


def healing_trail(medallion, stage_name: str) -> list[tuple]:
    """(event, status) of every audit entry of a stage, in order: attempts, healing, retries."""
    return [(e["event"], e["status"]) for e in medallion.store.audit_entries(stage_name=stage_name)]


def test_an_unknown_action_or_invalid_pattern_is_refused_at_load_and_nothing_is_written(medallion, tmp_path):
    bad = tmp_path / "bad_rules.yaml"
    bad.write_text("""
healing_actions:
  - {healing_id: run_a_script, error_code: ValueError, action: shell_exec, params: {cmd: "rm -rf /"}}
  - {healing_id: broken_pattern, message_pattern: "([unclosed", action: quarantine_object}
  - {healing_id: bad_params, error_code: ValueError, action: wait_for_upstream, params: {deadline_sec: -1}}
  - {healing_id: fine, error_code: ValueError, action: reconnect_warehouse}
""")
    before = medallion.store.table_rows("healing_actions")
    with pytest.raises(CatalogInvalid) as refused:
        medallion.load(bad)
    message = str(refused.value)
    known = ", ".join(sorted(ACTIONS))
    assert (
        f"bad_rules.yaml:3: healing_actions[run_a_script].action: unknown action 'shell_exec'; "
        f"registered actions: {known}"
    ) in message
    assert "bad_rules.yaml:4: healing_actions[broken_pattern].message_pattern: " in message
    assert "invalid regular expression '([unclosed'" in message
    assert (
        "bad_rules.yaml:5: healing_actions[bad_params].params: params for wait_for_upstream: "
        "deadline_sec: Input should be greater than 0"
    ) in message
    assert medallion.store.table_rows("healing_actions") == before  # "fine" was not written either


def test_healing_actions_lists_every_registered_action_with_its_parameters():
    result = CliRunner().invoke(main, ["healing", "actions", "--json"])
    assert result.exit_code == 0, result.output
    listed = {action["name"]: action for action in json.loads(result.output)}
    assert set(listed) == {
        "evolve_schema",
        "load_in_batches",
        "quarantine_object",
        "reconnect_warehouse",
        "recreate_staging",
        "rerun_from_failure",
        "rollback_dataset",
        "trip_circuit_breaker",
        "wait_for_upstream",
    }
    assert listed["wait_for_upstream"]["params"]["deadline_sec"]["default"] == 600
    assert listed["rerun_from_failure"]["scope"] == "run (healing sensor)"


def rule(healing_id: str, **fields) -> HealingAction:
    return HealingAction(healing_id=healing_id, action=fields.pop("action", "quarantine_object"), **fields)


def test_the_most_specific_enabled_rule_matches_by_class_along_the_cause_chain_and_by_message():
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise RuntimeError("object s3://b/k is unreadable") from inner
    except RuntimeError as error:
        fault = Fault.of(error, STAGE, "bronze", attempt=1)
    rules = [
        rule("any_lookup", error_code="LookupError"),
        rule("by_message", message_pattern=r"unreadable", layer="bronze"),
        rule("other_stage", message_pattern=r"unreadable", layer="bronze", stage_name="silver_clean"),
        rule("disabled", error_code="KeyError", message_pattern="unreadable", layer="bronze", enabled=False),
    ]
    assert matching_rule(rules, fault).healing_id == "by_message"  # two fields beat one; scope must fit
    assert matching_rule(rules[:1], fault).healing_id == "any_lookup"  # KeyError is a LookupError, as a cause
    assert matching_rule([rule("gold_only", error_code="KeyError", layer="gold")], fault) is None
    assert matching_rule([rule("rerun", error_code="KeyError", action="rerun_from_failure")], fault) is None


def moto_recorder(endpoint: str, command: str) -> str:
    """moto's own request recorder: `reset-recording`, `start-recording`, `stop-recording` or
    `download-recording` (the requests recorded since, one JSON line each). It writes to the working
    folder."""
    request = urllib.request.Request(
        f"{endpoint}/moto-api/recorder/{command}", method="GET" if command == "download-recording" else "POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read().decode()


def test_upstream_data_not_there_yet_is_waited_for_with_backoff(
    medallion, raw_data, tmp_path, s3_endpoint, monkeypatch
):
    s3 = boto3.resource("s3")
    parked = {
        item.key: item.get()["Body"].read()
        for item in s3.Bucket("medallion-raw").objects.filter(Prefix="user_events/")
    }
    s3.Bucket("medallion-raw").objects.filter(Prefix="user_events/").delete()
    fast = tmp_path / "fast.yaml"
    fast.write_text("""
healing_actions:
  - {healing_id: upstream_not_there_yet, error_code: NoAvailablePath, message_pattern: "holds no objects",
     layer: bronze, action: wait_for_upstream,
     params: {deadline_sec: 60, first_wait_sec: 0.2, max_wait_sec: 1}}
""")
    medallion.load(fast)

    monkeypatch.chdir(tmp_path)  # where moto's recorder writes
    run_over = threading.Event()

    def deliver_once_healing_has_looked():
        """The data arrives only after the stage failed and the action then looked under the empty prefix."""
        while not medallion.store.audit_entries(stage_name="bronze_ingest", event="stage"):
            if run_over.wait(0.05):
                return
        moto_recorder(s3_endpoint, "reset-recording")
        moto_recorder(s3_endpoint, "start-recording")
        try:
            while "prefix=user_events" not in moto_recorder(s3_endpoint, "download-recording"):
                if run_over.wait(0.05):
                    return
        finally:
            moto_recorder(s3_endpoint, "stop-recording")
        for key, body in parked.items():
            boto3.client("s3").put_object(Bucket="medallion-raw", Key=key, Body=body)

    courier = threading.Thread(target=deliver_once_healing_has_looked)
    courier.start()
    report = medallion.run("user_events_etl")
    run_over.set()
    courier.join()
    assert report.status == "success", report
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)
    assert healing_trail(medallion, "bronze_ingest") == [
        ("stage", "failed"),
        ("healing", "retry"),
        ("retry", "scheduled"),
        ("stage", "success"),
    ]
    waited = healing_entry(medallion, "upstream_not_there_yet")
    assert waited["details"]["action"] == "wait_for_upstream" and waited["details"]["attempt"] == 1
    assert waited["details"]["detail"].startswith("objects under s3://medallion-raw/user_events/ after ")
    assert "holds no objects" in waited["error"]


def test_an_upstream_that_never_comes_gives_up_at_the_deadline(medallion, tmp_path):
    boto3.resource("s3").Bucket("medallion-raw").objects.filter(Prefix="user_events/").delete()
    fast = tmp_path / "fast.yaml"
    fast.write_text("""
healing_actions:
  - {healing_id: upstream_not_there_yet, error_code: NoAvailablePath, message_pattern: "holds no objects",
     action: wait_for_upstream, params: {deadline_sec: 1, first_wait_sec: 0.3, max_wait_sec: 0.3}}
""")
    medallion.load(fast)
    report = medallion.run("user_events_etl")
    assert report.status == "failed"
    assert healing_trail(medallion, "bronze_ingest") == [("stage", "failed"), ("healing", "give_up")]
    gave_up = healing_entry(medallion, "upstream_not_there_yet")["details"]["detail"]
    assert gave_up.startswith("still waiting for objects under s3://medallion-raw/user_events/ after ")
    assert gave_up.endswith(
        "(deadline 1 s): source user_events_raw: s3://medallion-raw/user_events/ holds no objects"
    )


def test_a_corrupt_object_is_moved_to_quarantine_and_the_rest_is_ingested(medallion, raw_data):
    corrupt = gzip.compress(b'{"event_id": "e1"}\n' * 100)  # gzip bytes in a .jsonl: not UTF-8 text
    boto3.client("s3").put_object(Bucket="medallion-raw", Key="user_events/zz-late.jsonl", Body=corrupt)
    report = medallion.run("user_events_etl")
    assert report.status == "success", report
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)
    assert healing_trail(medallion, "bronze_ingest") == [
        ("stage", "failed"),
        ("healing", "retry"),
        ("retry", "scheduled"),
        ("stage", "success"),
    ]
    kept = (
        medallion.lake
        / "_quarantine"
        / "bronze_user_events"
        / "objects"
        / "medallion-raw"
        / "user_events"
        / "zz-late.jsonl"
    )
    assert kept.read_bytes() == corrupt
    entry = healing_entry(medallion, "corrupt_source_object")
    assert entry["error"].startswith(
        "CorruptSourceObject: source user_events_raw: object "
        "s3://medallion-raw/user_events/zz-late.jsonl is unreadable: not UTF-8 text (byte "
    )
    bookmarks = {b["object_key"]: b["batch_id"] for b in medallion.store.table_rows("ingestion_bookmarks")}
    assert bookmarks["s3://medallion-raw/user_events/zz-late.jsonl"] == "quarantined"
    [bronze] = [e for e in medallion.stage_audit("bronze_ingest") if e["status"] == "success"]
    assert (
        bronze["rows_read"] == raw_data.event_lines
    )  # nothing of the corrupt object, nothing lost of the rest
    assert read_bytes("s3://medallion-raw/user_events/zz-late.jsonl") == corrupt  # the producer's file stays


def test_a_breaking_source_change_is_refused_with_a_clear_error_and_never_retried(medallion, raw_data):
    boto3.client("s3").put_object(
        Bucket="medallion-raw",
        Key="orders/zz-renamed.csv",
        Body=b"order_id,customer_id,order_ts,total\no1,c1,2024-01-01T00:00:00Z,3.50\n",
    )
    report = medallion.run("orders_etl")
    assert report.status == "failed"
    [failed] = [e for e in medallion.stage_audit("bronze_orders_ingest") if e["status"] == "failed"]
    assert failed["error"] == (
        "BreakingSourceSchemaChange: source orders_raw: s3://medallion-raw/orders/zz-renamed.csv:1 "
        "header lacks declared column(s) amount; header is order_id, customer_id, order_ts, total"
    )
    assert medallion.store.audit_entries(stage_name="bronze_orders_ingest", event="retry") == []
    assert medallion.store.snapshot().sources["orders_raw"].columns == {
        "order_id": "string",
        "customer_id": "string",
        "order_ts": "string",
        "amount": "string",
    }


@pytest.fixture(autouse=True)
def quick_retries(request):
    """Healed work is retried under the seed's std_retry policy; with no backoff here, so tests stay quick."""
    if "medallion" in request.fixturenames:
        request.getfixturevalue("medallion").set_retries(3, backoff_sec=0)


PASS_THROUGH_GOLD = """
targets:
  - {target_id: gold_user_events_copy, layer: gold, kind: warehouse, location: analytics.user_events_copy,
     description: "silver's events as they are, in the warehouse"}
stages:
  - {pipeline_id: user_events_etl, stage_order: 4, stage_name: gold_events_copy, input_id: silver_user_events,
     target_id: gold_user_events_copy}
"""


def test_schema_drift_new_source_fields_flow_nullable_through_silver_into_the_warehouse(
    medallion, raw_data, tmp_path
):
    (tmp_path / "copy.yaml").write_text(PASS_THROUGH_GOLD)
    medallion.load(tmp_path / "copy.yaml")
    assert medallion.run("user_events_etl").status == "success"
    put_events("user_events/zz-drift.jsonl", new_events(40, device="ios", app_build=412))

    report = medallion.run("user_events_etl")
    assert report.status == "success", report
    snapshot = medallion.store.snapshot()
    assert list(snapshot.sources["user_events_raw"].columns)[-2:] == ["device", "app_build"]
    assert snapshot.sources["user_events_raw"].columns["app_build"] == "bigint"
    assert snapshot.targets["silver_user_events"].columns["device"] == "string"
    copied = medallion.gold("analytics.user_events_copy")
    assert {row["device"] for row in copied} == {"ios", None}
    assert sum(row["device"] == "ios" and row["app_build"] == 412 for row in copied) == 40
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)
    drift = healing_entry(medallion, "source_schema_drift")
    assert drift["error"] == (
        "SourceSchemaDrift: source user_events_raw: s3://medallion-raw/user_events/zz-drift.jsonl "
        "has fields not in the catalog: device (string), app_build (bigint)"
    )
    assert drift["details"]["detail"] == "declared device, app_build in user_events_raw, silver_user_events"
    assert healing_trail(medallion, "gold_events_copy")[-5:] == [
        ("stage", "failed"),
        ("healing", "retry"),
        ("retry", "scheduled"),
        ("warehouse_load", "success"),  # the gold version the warehouse now holds
        ("stage", "success"),
    ]
    warehouse_drift = healing_entry(medallion, "warehouse_schema_drift")
    assert warehouse_drift["details"]["overrides"] == {"evolve_warehouse_schema": True}


def test_a_warehouse_connection_lost_mid_load_reconnects_with_no_duplicates(medallion, raw_data, pg_database):
    def run_user_events() -> None:
        report = medallion.run("user_events_etl")
        assert report.status == "success", report

    drill_a_warehouse_connection_lost_mid_load(medallion, pg_database, run_user_events)


def test_a_leftover_staging_table_from_a_crashed_load_is_recreated(medallion, raw_data, pg_database):
    medallion.warehouse_url = pg_database
    with psycopg2.connect(pg_database) as connection, connection.cursor() as cursor:
        cursor.execute(
            "CREATE SCHEMA IF NOT EXISTS analytics; "
            'CREATE TABLE analytics."daily_revenue_by_country__medallion_stage" (half_written int)'
        )
    report = medallion.run("orders_etl")
    assert report.status == "success", report
    assert medallion.gold("analytics.daily_revenue_by_country") == expected_daily_revenue(RAW)
    entry = healing_entry(medallion, "leftover_staging_table")
    assert (
        entry["details"]["detail"]
        == "dropped leftover staging table analytics.daily_revenue_by_country__medallion_stage"
    )
    with psycopg2.connect(pg_database) as connection, connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name LIKE '%medallion_stage'"
        )
        assert cursor.fetchone() == (0,)


def test_a_result_too_large_for_the_driver_is_loaded_partition_by_partition(medallion, raw_data, tmp_path):
    (tmp_path / "fanout.yaml").write_text("""
targets:
  - {target_id: gold_event_fanout, layer: gold, kind: warehouse, location: analytics.event_fanout}
stages:
  - {pipeline_id: user_events_etl, stage_order: 4, stage_name: gold_fanout, input_id: silver_user_events,
     target_id: gold_event_fanout,
     transform_sql: "SELECT s.event_id, r.id AS copy, repeat('x', 40) AS padding
       FROM silver_user_events s CROSS JOIN range(100) r"}
""")
    medallion.load(tmp_path / "fanout.yaml")
    report = medallion.run("user_events_etl")
    assert report.status == "success", report
    [silver] = medallion.stage_audit("silver_clean")
    with warehouse_from_url(medallion.warehouse_url) as warehouse:
        rows = warehouse.query(
            "SELECT count(*) AS n, count(DISTINCT event_id) AS ids FROM analytics.event_fanout"
        )
    assert rows == [{"n": silver["rows_written"] * 100, "ids": silver["rows_written"]}]
    entry = healing_entry(medallion, "result_too_large_for_driver")
    assert "is bigger than spark.driver.maxResultSize (8.0 MiB)" in entry["error"]
    assert entry["details"]["overrides"] == {"load_partitions": 16}


def test_a_circuit_breaker_disables_the_pipeline_after_repeated_failures(medallion, tmp_path):
    medallion.move_source("user_events_raw", "s3://never-there/user_events/")
    (tmp_path / "breaker.yaml").write_text("""
healing_actions:
  - {healing_id: stop_hammering, error_code: NoAvailablePath, pipeline_id: user_events_etl,
     action: trip_circuit_breaker, params: {failures: 2, window_minutes: 10}}
""")
    medallion.load(tmp_path / "breaker.yaml")
    report = medallion.run("user_events_etl")
    assert report.status == "failed"
    # The report says why, as the audit does: the error under Dagster's wrappers, by its class name.
    assert [(a.key, a.reason.split(" ", 1)[0]) for a in report.assets if a.status == "failed"] == [
        ("bronze/user_events", "NoAvailablePath:")
    ]
    assert [a.reason for a in report.assets if a.status == "skipped"] == [
        "an upstream asset did not materialize in this run"
    ] * 2
    assert healing_trail(medallion, "bronze_ingest") == [
        ("stage", "failed"),
        ("healing", "retry"),
        ("retry", "scheduled"),
        ("stage", "failed"),
        ("healing", "give_up"),
    ]
    [flag] = [f for f in medallion.store.table_rows("control_flags") if f["entity_type"] == "pipeline"]
    assert (flag["entity_id"], flag["flag_value"], flag["updated_by"]) == (
        "user_events_etl",
        False,
        "medallion-healing",
    )
    assert flag["reason"].startswith(
        "circuit breaker stop_hammering: 2 failures in 10 min, last NoAvailablePath: "
    )
    history = medallion.store.table_rows("control_flag_history")
    assert [(h["entity_id"], h["new_value"], h["changed_by"]) for h in history] == [
        ("user_events_etl", False, "medallion-healing")
    ]
    assert medallion.run("user_events_etl").status == "halted"
    shown = CliRunner().invoke(
        main, ["audit", "--pipeline", "user_events_etl"], env={"MEDALLION_CATALOG_URL": medallion.store.url}
    )
    healing_lines = [line for line in shown.output.splitlines() if " healing:" in line]
    assert (
        healing_lines[0]
        .split("  ", 1)[1]
        .startswith(
            "user_events_etl.bronze_ingest  healing:retry  attempt 1: rule stop_hammering → "
            "trip_circuit_breaker: 1 of 2 failures in 10 min  NoAvailablePath: "
        )
    )
    assert (
        " healing:give_up  attempt 2: rule stop_hammering → trip_circuit_breaker: pipeline user_events_etl "
        "disabled" in healing_lines[1]
    )


def test_the_healing_sensor_reexecutes_a_failed_run_from_failure_and_is_itself_monitored(medallion, tmp_path):
    medallion.move_source("user_events_raw", "s3://never-there/user_events/")
    (tmp_path / "rerun.yaml").write_text("""
healing_actions:
  - {healing_id: rerun_once, error_code: NoAvailablePath, action: rerun_from_failure, params: {max_reruns: 1}}
""")
    medallion.load(tmp_path / "rerun.yaml")
    medallion.set_retries(0)
    defs = build_definitions(medallion.store.url, str(medallion.lake), medallion.warehouse_url)
    sensor = defs.resolve_sensor_def("medallion_healing")
    keys = [
        AssetKey(["bronze", "user_events"]),
        AssetKey(["gold", "daily_user_events"]),
        AssetKey(["silver", "user_events"]),
    ]
    with instance_for_test() as instance:

        def tick(cursor=None):
            return sensor.evaluate_tick(
                build_sensor_context(instance=instance, cursor=cursor, definitions=defs)
            )

        def run(tags=None):
            return materialize(
                list(defs.assets),
                resources=defs.resources,
                instance=instance,
                selection=keys,
                raise_on_error=False,
                tags=tags or {},
            ).run_id

        failed = run()
        first = tick()
        [request] = first.run_requests
        assert sorted(request.asset_selection, key=lambda key: key.path) == keys
        assert request.tags == {
            "medallion/rerun_of": failed,
            "medallion/rerun": "1",
            "medallion/pipeline": "user_events_etl",
            "dagster/sensor_name": "medallion_healing",
        }
        assert tick(first.cursor).run_requests == []  # each failed run is looked at once

        rerun = run(request.tags)  # what the daemon launches; the bucket is still missing, so it fails again
        second = tick(first.cursor)
        assert second.run_requests == []
        run({"dagster/will_retry": "true"})  # Dagster's own run retry will take this one
        assert tick(second.cursor).run_requests == []

        with medallion.store.engine.begin() as connection:  # around the loader: plain SQL
            connection.execute(
                text(
                    "INSERT INTO healing_actions (healing_id, error_code, action, params, enabled) "
                    "VALUES ('sneaky', 'ValueError', 'shell_exec', '{}', true)"
                )
            )
        with pytest.raises(
            Exception, match="healing_actions rows the loader would refuse: sneaky: unknown action"
        ):
            tick(second.cursor)
    decisions = [
        (e["run_id"], e["status"], e["details"]["detail"])
        for e in medallion.store.audit_entries(event="healing")
    ]
    assert decisions == [(failed, "retry", "rerun 1 of 1"), (rerun, "give_up", "1 rerun(s) spent")]
    [sensor_failure] = medallion.store.audit_entries(event="healing_sensor")
    assert sensor_failure["status"] == "failed"
    assert sensor_failure["error"].startswith(
        "UnusableHealingRules: healing_actions rows the loader would refuse: "
        "sneaky: unknown action 'shell_exec'"
    )


def test_drill_three_faults_in_one_run_end_equal_to_a_fault_free_run(medallion, raw_data, pg_database):
    """A corrupt object, a new source field and a warehouse backend killed mid-load, all in one run."""
    medallion.warehouse_url = pg_database
    assert medallion.run("user_events_etl").status == "success"  # yesterday's run: the gold table exists
    corrupt = b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4
    boto3.client("s3").put_object(Bucket="medallion-raw", Key="user_events/zz-a-corrupt.jsonl", Body=corrupt)
    put_events("user_events/zz-b-drift.jsonl", new_events(60, device="android"))
    with kill_the_load_once(pg_database, "analytics.daily_user_events"):
        report = medallion.run("user_events_etl")

    assert report.status == "success", report
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)
    healed = [
        (e["details"]["rule"], e["details"]["attempt"], e["status"])
        for e in medallion.store.audit_entries(event="healing")
    ]
    assert healed == [
        ("corrupt_source_object", 1, "retry"),
        ("source_schema_drift", 2, "retry"),
        ("warehouse_connection_lost", 1, "retry"),
    ]
    # Every attempt is on record: the clean run's, then the drill's failed and healed ones.
    assert healing_trail(medallion, "bronze_ingest") == [
        ("stage", "success"),
        ("stage", "failed"),
        ("healing", "retry"),
        ("retry", "scheduled"),
        ("stage", "failed"),
        ("healing", "retry"),
        ("retry", "scheduled"),
        ("stage", "success"),
    ]
    assert healing_trail(medallion, "gold_daily_aggregate") == [
        ("warehouse_load", "success"),
        ("stage", "success"),
        ("stage", "failed"),
        ("healing", "retry"),
        ("retry", "scheduled"),
        ("warehouse_load", "success"),  # the load lost mid-way is sent again, and recorded once it commits
        ("stage", "success"),
    ]
    # Nothing lost: the drift file's 60 records are all in bronze; nothing duplicated: silver is unique.
    bronze = [e for e in medallion.stage_audit("bronze_ingest") if e["status"] == "success"]
    assert [(e["rows_read"], e["rows_written"] + e["rows_quarantined"]) for e in bronze] == [
        (raw_data.event_lines, raw_data.event_lines),
        (60, 60),
    ]
    silver = [e for e in medallion.stage_audit("silver_clean") if e["status"] == "success"]
    assert silver[-1]["rows_written"] == silver[0]["rows_written"] + 60
    assert all(check["passed"] for asset in report.assets for check in asset.checks)
