"""Seed pipelines materialized through a real Dagster instance: raw files on a loopback S3 API → warehouse.

Gold is compared with an independent computation from the raw files (tests/reference.py), and the counts
in the audit log reconcile: rows read = rows written + rows quarantined, at every layer.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal

import boto3
import pytest
from dagster import AssetKey, instance_for_test, materialize

from medallion_assets.catalog.models import ControlFlag
from medallion_assets.definitions import build_definitions
from medallion_assets.runner import PipelineReport
from medallion_assets.sample_data import write_weather_sample
from medallion_assets.storage.objects import read_bytes
from medallion_assets.storage.warehouse import warehouse_from_url
from tests.conftest import RAW, SEED
from tests.reference import expected_daily_revenue, expected_daily_user_events


def statuses(report: PipelineReport) -> dict[str, str]:
    return {asset.key: asset.status for asset in report.assets}


def test_user_events_gold_equals_an_independent_computation(medallion, raw_data):
    report = medallion.run("user_events_etl")
    assert report.status == "success"
    assert statuses(report) == {
        "bronze/user_events": "success",
        "silver/user_events": "success",
        "gold/daily_user_events": "success",
    }
    gold = medallion.gold("analytics.daily_user_events")
    assert gold == expected_daily_user_events(RAW)
    assert sum(row["total_events"] for row in gold) == (
        raw_data.event_lines
        - raw_data.malformed_events
        - raw_data.bad_timestamp_events
        - raw_data.duplicate_events
    )

    [bronze] = medallion.stage_audit("bronze_ingest")
    assert bronze["rows_read"] == raw_data.event_lines == 3000
    assert bronze["rows_quarantined"] == raw_data.malformed_events
    assert bronze["rows_read"] == bronze["rows_written"] + bronze["rows_quarantined"]
    [silver] = medallion.stage_audit("silver_clean")
    assert silver["rows_read"] == bronze["rows_written"]
    assert silver["rows_quarantined"] == raw_data.bad_timestamp_events
    assert (
        silver["rows_read"] - silver["rows_quarantined"] - silver["rows_written"] == raw_data.duplicate_events
    )
    checks = {c["name"]: c["passed"] for a in report.assets for c in a.checks}
    assert checks["unique_event_id"] and checks["schema_match"] and all(checks.values())


def events_after(folder, earlier: set, last: set[tuple[str, str]]) -> list[dict]:
    """The OpenLineage events written to `folder` since `earlier`, once the (eventType, job) pairs `last` are
    in: the emitter is asynchronous."""
    deadline = time.monotonic() + 20
    while True:
        ours = [json.loads(path.read_text()) for path in set(folder.iterdir()) - earlier]
        if last <= {(e["eventType"], e["job"]["name"]) for e in ours}:
            return ours
        assert time.monotonic() < deadline, f"missing events: {last}"
        time.sleep(0.1)


def test_every_stage_reports_openlineage_events_under_the_pipeline_run(medallion, medallion_home):
    folder = medallion_home / "openlineage"
    earlier = set(folder.iterdir())  # the folder is shared by the whole session
    report = medallion.run("user_events_etl")
    assert report.status == "success"
    ours = events_after(
        folder,
        earlier,
        {("COMPLETE", "user_events_etl.gold_daily_user_events"), ("COMPLETE", "user_events_etl")},
    )
    [pipeline_run] = {e["run"]["runId"] for e in ours if e["job"]["name"] == "user_events_etl"}
    for layer_job in ("bronze_user_events", "silver_user_events", "gold_daily_user_events"):
        [start] = [
            e
            for e in ours
            if e["job"]["name"] == f"user_events_etl.{layer_job}" and e["eventType"] == "START"
        ]
        assert start["run"]["facets"]["parent"]["run"]["runId"] == pipeline_run
    query = next(e for e in ours if e["job"]["name"] == "user_events_etl.gold_daily_user_events.query_1")
    assert query["run"]["facets"]["parent"]["job"]["name"] == "user_events_etl.gold_daily_user_events"
    assert query["run"]["facets"]["parent"]["root"]["run"]["runId"] == pipeline_run


def test_quarantined_records_name_their_file_and_line(medallion, raw_data):
    medallion.run("user_events_etl")
    quarantine = medallion.rows("bronze.user_events_quarantine")
    assert len(quarantine) == raw_data.malformed_events
    for record in quarantine:
        line = read_bytes(record["_source_file"]).decode().split("\n")[record["_source_line"] - 1]
        assert line == record["raw"]
        with pytest.raises(ValueError):
            assert isinstance(json.loads(line), dict)
        assert record["reason"].startswith("malformed JSON")
    silver_rejects = medallion.rows("silver.user_events_quarantine")
    assert {r["reason"] for r in silver_rejects} == {"event_ts: cannot cast not-a-date to timestamp"}


def test_a_rerun_ingests_nothing_twice(medallion, raw_data):
    medallion.run("user_events_etl")
    first_gold = medallion.gold("analytics.daily_user_events")
    second = medallion.run("user_events_etl")
    assert second.status == "success"
    first_bronze, second_bronze = medallion.stage_audit("bronze_ingest")
    assert (second_bronze["rows_read"], second_bronze["details"]["objects_new"]) == (0, 0)
    assert second_bronze["details"]["objects_seen"] == first_bronze["details"]["objects_new"] == 3
    assert len(medallion.rows("bronze.user_events")) == first_bronze["rows_written"]
    assert medallion.gold("analytics.daily_user_events") == first_gold
    # Bronze's row count (Dagster's dagster/row_count) is its dataset's, as its checks judge, not the empty
    # batch.
    assert second_bronze["details"]["rows_in_dataset"] == first_bronze["rows_written"]
    assert second.assets[0].rows == 0 and second.assets[0].checks == [
        {"name": "row_count", "passed": True, "severity": "error"},
        {"name": "dq_rate", "passed": True, "severity": "warn"},  # no rows read, none rejected
    ]


def test_orders_join_and_merge_into_postgres(medallion, raw_data, pg_database):
    medallion.warehouse_url = pg_database
    report = medallion.run("orders_etl")
    assert report.status == "success", report
    expected = expected_daily_revenue(RAW)
    assert medallion.gold("analytics.daily_revenue_by_country") == expected
    medallion.run("orders_etl")
    assert medallion.gold("analytics.daily_revenue_by_country") == expected
    [bronze, _] = medallion.stage_audit("bronze_orders_ingest")
    assert bronze["rows_quarantined"] == raw_data.wrong_field_count_orders
    [silver, _] = medallion.stage_audit("silver_orders_enrich")
    assert silver["rows_quarantined"] == raw_data.bad_amount_orders


def test_a_failing_blocking_check_keeps_bad_data_out_of_gold(medallion, tmp_path):
    strict = tmp_path / "strict.yaml"
    strict.write_text("""
validation_rules:
  - rule_set_id: silver_user_events_rules
    check_def:
      - {type: accepted_values, column: event_type, values: [view, purchase, signup]}
""")
    medallion.load(strict)
    report = medallion.run("user_events_etl")
    assert report.status == "failed"
    assert statuses(report) == {
        "bronze/user_events": "success",
        "silver/user_events": "failed",
        "gold/daily_user_events": "skipped",
    }
    assert report.assets[1].checks == [
        {"name": "accepted_values_event_type", "passed": False, "severity": "error"},
        {"name": "dq_rate", "passed": True, "severity": "warn"},  # a check that fails drops no row
    ]
    [silver] = medallion.stage_audit("silver_clean")
    assert silver["status"] == "failed"
    assert silver["error"].startswith("blocking rule(s) failed: accepted_values_event_type: ")
    assert silver["error"].endswith(" rows have event_type not in ['view', 'purchase', 'signup']")
    assert not (medallion.lake / "gold").exists()


def test_a_missing_bucket_names_the_source_and_path(medallion):
    medallion.move_source("user_events_raw", "s3://no-such-bucket/user_events/")
    medallion.set_retries(0)
    report = medallion.run("user_events_etl")
    assert report.status == "failed"
    [bronze] = medallion.stage_audit("bronze_ingest")
    assert bronze["error"] == (
        "NoAvailablePath: no available path to bronze_user_events:\n"
        "  1. user_events_raw → bronze_user_events (cost 1) down: user_events_raw: source user_events_raw: "
        "s3://no-such-bucket/user_events/ does not exist (bucket no-such-bucket not found)"
    )
    assert not (medallion.lake / "bronze").exists()


def test_drill_primary_bucket_down_the_run_reads_the_replica(
    medallion, raw_data, pg_database, medallion_home
):
    """orders_raw's objects are gone (the primary prefix is blocked); the replica holds a copy."""
    expected = expected_daily_revenue(RAW)  # what a run on the intact primary must give
    s3 = boto3.resource("s3")
    replica = s3.Bucket("medallion-replica")
    if replica.creation_date is None:
        replica.create()
    replica.objects.all().delete()
    primary = s3.Bucket("medallion-raw")
    for item in list(primary.objects.filter(Prefix="orders/")):
        replica.copy({"Bucket": "medallion-raw", "Key": item.key}, item.key)
        item.delete()
    medallion.warehouse_url = pg_database
    earlier = set((medallion_home / "openlineage").iterdir())
    report = medallion.run("orders_etl")
    assert report.status == "success", report
    events = events_after(medallion_home / "openlineage", earlier, {("COMPLETE", "orders_etl.bronze_orders")})
    read = {e["eventType"]: e["inputs"] for e in events if e["job"]["name"] == "orders_etl.bronze_orders"}
    assert [(i["namespace"], i["name"]) for i in read["START"]] == [("s3://medallion-raw", "orders")]
    assert [(i["namespace"], i["name"]) for i in read["COMPLETE"]] == [("s3://medallion-replica", "orders")]
    [reroute] = medallion.store.audit_entries(event="reroute")
    assert reroute["details"] == {
        "from": "orders_raw",
        "to": "orders_raw_replica",
        "path": ["orders_raw_replica", "bronze_orders"],
        "cost": 2.0,
    }
    assert reroute["error"] == "source orders_raw: s3://medallion-raw/orders/ holds no objects"
    [bronze] = medallion.stage_audit("bronze_orders_ingest")
    assert bronze["details"]["source"] == "orders_raw_replica"
    assert medallion.gold("analytics.daily_revenue_by_country") == expected


def mark_unavailable(medallion, *datasets: str) -> None:
    medallion.store.upsert(
        {
            "control_flags": [
                ControlFlag(
                    entity_type="dataset",
                    entity_id=dataset,
                    flag_name="available",
                    flag_value=False,
                    reason="files corrupted",
                    updated_by="ops",
                )
                for dataset in datasets
            ]
        }
    )


def materialize_only(medallion, key: str):
    defs = build_definitions(medallion.store.url, str(medallion.lake), medallion.warehouse_url)
    with instance_for_test() as instance:
        return materialize(
            list(defs.assets),
            resources=defs.resources,
            instance=instance,
            raise_on_error=False,
            selection=[AssetKey(key.split("/"))],
        )


def test_an_unavailable_silver_input_is_rebuilt_from_bronze_for_gold(medallion, raw_data, medallion_home):
    assert medallion.run("user_events_etl").status == "success"
    shutil.rmtree(medallion.lake / "silver" / "user_events" / "data")  # silver's files are gone
    mark_unavailable(medallion, "silver_user_events")
    with warehouse_from_url(medallion.warehouse_url) as warehouse:
        warehouse.query("DELETE FROM analytics.daily_user_events")
    earlier = set((medallion_home / "openlineage").iterdir())

    assert materialize_only(medallion, "gold/daily_user_events").success
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)
    [rebuilt] = medallion.store.audit_entries(event="reroute")
    assert (rebuilt["stage_name"], rebuilt["status"], rebuilt["error"]) == (
        "gold_daily_aggregate",
        "rebuilt",
        "dataset silver_user_events marked unavailable by ops: files corrupted",
    )
    assert rebuilt["details"] == {
        "dataset": "silver_user_events",
        "rebuilt_by": "user_events_etl.silver_clean",
        "from": ["bronze_user_events"],
    }
    # Rebuilt in the run, never written.
    assert not (medallion.lake / "silver" / "user_events" / "data").exists()
    events = events_after(
        medallion_home / "openlineage", earlier, {("COMPLETE", "user_events_etl.gold_daily_user_events")}
    )
    [complete] = [
        e
        for e in events
        if e["job"]["name"] == "user_events_etl.gold_daily_user_events" and e["eventType"] == "COMPLETE"
    ]
    assert [i["name"].rsplit("/", 2)[-2:] for i in complete["inputs"]] == [["bronze", "user_events"]]


def test_with_bronze_down_too_silver_is_rebuilt_from_bronze_as_it_was_before(medallion, raw_data):
    assert medallion.run("user_events_etl").status == "success"
    [bronze_version] = medallion.store.lake_commits("bronze_user_events")
    mark_unavailable(medallion, "silver_user_events", "bronze_user_events")
    with warehouse_from_url(medallion.warehouse_url) as warehouse:
        warehouse.query("DELETE FROM analytics.daily_user_events")
    assert materialize_only(medallion, "gold/daily_user_events").success
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)
    reroutes = [(e["status"], e["details"]) for e in medallion.store.audit_entries(event="reroute")]
    assert reroutes == [
        ("time_travel", {"dataset": "bronze_user_events", "snapshot_id": str(bronze_version["snapshot_id"])}),
        (
            "rebuilt",
            {
                "dataset": "silver_user_events",
                "rebuilt_by": "user_events_etl.silver_clean",
                "from": ["bronze_user_events"],
            },
        ),
    ]


def test_with_bronze_down_before_it_was_ever_written_the_rebuild_fails_listing_every_path(medallion):
    mark_unavailable(medallion, "silver_user_events", "bronze_user_events")
    medallion.set_retries(0)
    assert not materialize_only(medallion, "gold/daily_user_events").success
    [failed] = [
        e for e in medallion.store.audit_entries(stage_name="gold_daily_aggregate") if e["status"] == "failed"
    ]
    assert failed["error"] == (
        "NoAvailablePath: no available path to silver_user_events:\n"
        "  1. user_events_raw → bronze_user_events → silver_user_events (cost 2) down: "
        "bronze_user_events: dataset bronze_user_events marked unavailable by ops: files corrupted"
    )
    assert medallion.store.audit_entries(event="reroute") == []


def test_the_forecast_example_runs_in_both_lineage_versions(medallion, raw_data):
    """v1: the revenue of the same day a week before; v2 also reads the weather and takes a fifth off rainy
    days."""
    medallion.set_retries(3, backoff_sec=0)
    assert medallion.run("orders_etl").status == "success"
    medallion.load(SEED / "revenue_forecast.v1.yaml.example")
    assert medallion.run("revenue_forecast").status == "success"
    week = timedelta(days=7)
    baseline = {
        (row["order_date"] + week, row["country"]): row["revenue"] for row in expected_daily_revenue(RAW)
    }
    forecast = medallion.gold("analytics.revenue_forecast")
    assert [(r["forecast_date"], r["country"], r["forecast_revenue"]) for r in forecast] == [
        (day, country, revenue) for (day, country), revenue in sorted(baseline.items())
    ]

    weather_url = write_weather_sample(RAW)
    medallion.load(SEED / "revenue_forecast.v2.yaml.example")
    assert medallion.run("weather_etl").status == "success"
    assert medallion.run("revenue_forecast").status == "success"
    rain = {
        (date.fromisoformat(w["weather_date"]), w["country"]): w["rain_mm"]
        for w in map(json.loads, read_bytes(weather_url).decode().splitlines())
    }
    rainy = Decimal("0.8")
    assert [
        (r["forecast_date"], r["country"], r["forecast_revenue"], r["rain_mm"])
        for r in medallion.gold("analytics.revenue_forecast")
    ] == [
        (
            day,
            country,
            (revenue * (rainy if rain[day, country] >= 10 else 1)).quantize(Decimal("0.01"), ROUND_HALF_UP),
            rain[day, country],
        )
        for (day, country), revenue in sorted(baseline.items())
    ]
    assert sum(rain[key] >= 10 for key in baseline) > 0  # the rain adjustment is exercised
    versions = [
        v["version"]
        for v in medallion.store.table_rows("lineage_versions")
        if v["dataset"] == "gold_revenue_forecast"
    ]
    assert sorted(versions) == [1, 2]
