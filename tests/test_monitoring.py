"""Monitoring end to end: SLAs as Dagster freshness policies, a volume drop raising one warning check, the
DQ-rate check, and a pipeline whose source stays empty past its SLA producing exactly one "SLA missed"
notification through the real sensor on a real Dagster instance."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from dagster import AssetCheckKey, AssetKey, FreshnessPolicy, build_sensor_context, instance_for_test

from medallion_assets.catalog.models import Notification, Sla, VolumeBand
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.monitoring.anomalies import judge_volume
from medallion_assets.control.monitoring.notifications import Message, enqueue
from medallion_assets.control.monitoring.sla import judge
from medallion_assets.definitions import build_definitions
from medallion_assets.loading import validate_files
from medallion_assets.runner import run_pipeline
from tests.fixtures.webhook import HOOK_ENV

BRONZE = AssetKey(["bronze", "clicks"])


def clicks_catalog(bucket: str, pipeline_extra: str = "", notifications: str = "") -> str:
    return f"""
pipelines:
  - {{pipeline_id: clicks_etl, owner: "team:web"{pipeline_extra}}}
sources:
  - {{source_id: clicks_raw, s3_path: "s3://{bucket}/clicks/", file_format: jsonl,
     columns: {{click_id: string, page: string}}}}
targets:
  - {{target_id: clicks, layer: bronze, sla: {{max_stale_minutes: 120, warn_stale_minutes: 60}}}}
  - {{target_id: pages, layer: silver, keys: [page]}}
stages:
  - {{pipeline_id: clicks_etl, stage_order: 1, stage_name: bronze_ingest, input_id: clicks_raw,
     target_id: clicks}}
  - {{pipeline_id: clicks_etl, stage_order: 2, stage_name: silver_pages, input_id: clicks, target_id: pages}}
{notifications}"""


class Installation:
    def __init__(self, tmp_path, bucket: str, catalog_text: str):
        self.store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
        self.store.migrate()
        path = tmp_path / "clicks.yaml"
        path.write_text(catalog_text)
        self.store.upsert(validate_files(self.store.snapshot(), [path]).rows)
        self.bucket = bucket
        self.defs = build_definitions(
            self.store.url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb"
        )

    def put_clicks(self, name: str, rows: int, malformed: int = 0) -> None:
        lines = [json.dumps({"click_id": f"{name}-{i}", "page": f"p{i % 7}"}) for i in range(rows)]
        body = "\n".join(lines + ["{not json"] * malformed)
        boto3.client("s3").put_object(Bucket=self.bucket, Key=f"clicks/{name}.jsonl", Body=body.encode())

    def run(self, instance):
        return run_pipeline(self.defs, self.store.snapshot(), self.store, "clicks_etl", instance)


def test_slas_become_dagster_freshness_policies(tmp_path, bucket):
    medallion = Installation(
        tmp_path,
        bucket,
        clicks_catalog(
            bucket, ', sla: {expected_by: "06:30", window_minutes: 90, timezone: "Europe/Berlin"}'
        ),
    )
    specs = {
        spec.key: spec
        for assets in medallion.defs.assets
        if hasattr(assets, "specs")
        for spec in assets.specs
    }
    # The target's own SLA wins over its pipeline's.
    assert specs[BRONZE].freshness_policy == FreshnessPolicy.time_window(
        fail_window=timedelta(hours=2), warn_window=timedelta(hours=1)
    )
    assert specs[AssetKey(["silver", "pages"])].freshness_policy == FreshnessPolicy.cron(
        deadline_cron="30 6 * * *", lower_bound_delta=timedelta(minutes=90), timezone="Europe/Berlin"
    )


def test_sla_rows_are_checked_at_load():
    with pytest.raises(ValueError, match="exactly one of max_stale_minutes and expected_by"):
        Sla(max_stale_minutes=10, expected_by="06:00")
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        Sla(expected_by="06:00", timezone="Mars/Olympus")
    with pytest.raises(ValueError, match="String should match pattern"):
        Sla(expected_by="25:00")


def test_sla_judgement_matches_dagster_semantics():
    now = datetime(2026, 11, 23, 7, 0, tzinfo=UTC)
    daily = Sla(expected_by="06:00", window_minutes=60)
    assert judge(daily, now - timedelta(minutes=65), now)[0] == "fresh"  # 05:55, inside 05:00–06:00
    state, explanation, episode = judge(daily, now - timedelta(hours=3), now)  # 04:00: too early
    assert (state, episode) == ("stale", "deadline 2026-11-23T06:00:00+00:00")
    assert explanation == (
        "expected between 2026-11-23 05:00 and 2026-11-23 06:00 UTC; last update 2026-11-23 04:00:00 UTC"
    )
    assert judge(daily, None, now)[:2] == (
        "stale",
        "expected between 2026-11-23 05:00 and 2026-11-23 06:00 UTC; never updated",
    )
    window = Sla(max_stale_minutes=120, warn_stale_minutes=60)
    assert [judge(window, now - timedelta(minutes=m), now)[0] for m in (30, 90, 150)] == [
        "fresh",
        "late",
        "stale",
    ]
    assert judge(window, None, now)[0] == "unknown"


def test_volume_band_is_median_plus_minus_k_mad_and_says_when_history_is_short():
    band = VolumeBand(k=3, runs=14, min_runs=5)
    history = [1000, 1010, 990, 1005, 995, 1000, 3000]  # one odd day does not move a robust band
    verdict = judge_volume("rows_read", 100, history, band)
    assert (verdict.status, verdict.median, verdict.mad, verdict.low, verdict.high) == (
        "anomaly",
        1000,
        5,
        985,
        1015,
    )
    assert verdict.explanation(band) == (
        "rows_read=100 is outside [985, 1015] = median 1000 ± 3·MAD 5 of the last 7 successful runs"
    )
    assert judge_volume("rows_read", 1003, history, band).status == "normal"
    short = judge_volume("rows_read", 100, history[:4], band)
    assert short.status == "insufficient_history"
    assert short.explanation(band) == (
        "rows_read=100: only 4 earlier successful run(s), 5 needed for a band; no verdict yet"
    )


def test_a_day_with_a_tenth_of_the_usual_rows_raises_one_volume_warning(tmp_path, bucket, spark, webhook):
    notify = (
        "notifications:\n  - {notification_id: web_hook, events: [volume_anomaly, check_failed], scope: "
        f"owner, scope_id: 'team:web', channel: webhook, params: {{url_env: {HOOK_ENV}}}}}\n"
    )
    medallion = Installation(
        tmp_path,
        bucket,
        clicks_catalog(
            bucket,
            ", volume_band: {k: 3, runs: 14, min_runs: 5}, min_dq_rate: 0.99, dq_severity: error",
            notify,
        ),
    )
    # Thirty days of history as earlier runs recorded it: about a thousand clicks a day.
    for day in range(30):
        for stage, rows in (("bronze_ingest", 1000 + day % 5), ("silver_pages", 7)):
            medallion.store.record_audit(
                run_id=f"day{day}",
                pipeline_id="clicks_etl",
                stage_name=stage,
                dataset="clicks" if stage == "bronze_ingest" else "pages",
                event="stage",
                status="success",
                rows_read=rows,
                rows_written=rows,
            )
    medallion.put_clicks("today", 100, malformed=2)  # 2 of 102 records quarantined: 98% quality
    with instance_for_test() as instance:
        report = medallion.run(instance)
        # Neither check blocks: the data is written, people are told, the run is no clean success.
        assert report.status == "success_with_warnings"
        checks = {(asset.key, c["name"]): c for asset in report.assets for c in asset.checks}
        assert checks["bronze/clicks", "volume_anomaly"] == {
            "name": "volume_anomaly",
            "passed": False,
            "severity": "warn",
        }
        assert checks["silver/pages", "volume_anomaly"]["passed"] is False  # it read a tenth too
        assert checks["bronze/clicks", "dq_rate"] == {"name": "dq_rate", "passed": False, "severity": "error"}
        assert checks["silver/pages", "dq_rate"]["passed"] is True  # deduplication is no quality problem

        def check_metadata(name: str) -> dict:
            (record,) = instance.event_log_storage.get_asset_check_execution_history(
                AssetCheckKey(BRONZE, name), limit=1
            )
            return {k: v.value for k, v in record.event.dagster_event.event_specific_data.metadata.items()}

        volume = check_metadata("volume_anomaly")
        # MAD 1 would make a band of ±3 rows; the band is at least 1% of the median wide on each side.
        assert volume["explanation"] == (
            "rows_read=102 is outside [991.98, 1012.02] = median 1002 ± 3·MAD 1 of the last 14 successful "
            "runs; rows_written=100 is outside [991.98, 1012.02] = median 1002 ± 3·MAD 1 of the last 14 "
            "successful runs"
        )
        assert volume["history_runs"] == 14
        quality = check_metadata("dq_rate")
        assert quality["message"] == "98.04% of 102 rows passed, 2 rejected (at least 99.00% required)"
        assert quality["rows_rejected"] == 2
        sensor = medallion.defs.resolve_sensor_def("medallion_notifications")
        sensor.evaluate_tick(build_sensor_context(instance=instance, definitions=medallion.defs))
    anomalies = medallion.store.audit_entries(event="volume_anomaly")
    assert [(a["stage_name"], a["status"]) for a in anomalies] == [
        ("bronze_ingest", "warn"),
        ("silver_pages", "warn"),
    ]
    sent = {r["body"]["medallion"]["event"]: r["body"]["text"] for r in webhook.received}
    assert (
        len(webhook.received) == 2
    )  # one volume anomaly for the run (where the drop came in), one failed check
    assert sent["volume_anomaly"].startswith(
        "[medallion] volume anomaly: clicks\nclicks_etl.bronze_ingest: rows_read=102"
    )
    assert sent["check_failed"] == (
        "[medallion] check failed: clicks\nclicks_etl.bronze_ingest: dq_rate: 98.04% of "
        "102 rows passed, 2 rejected (at least 99.00% required)"
    )


def test_a_source_empty_past_its_sla_sends_exactly_one_sla_missed(tmp_path, bucket, spark, webhook):
    notify = (
        "notifications:\n  - {notification_id: web_hook, events: [sla_missed], scope: owner, "
        f"scope_id: 'team:web', channel: webhook, params: {{url_env: {HOOK_ENV}}}}}\n"
    )
    # Due by midnight UTC every day: the last deadline has always passed, and nothing ever arrives.
    medallion = Installation(
        tmp_path,
        bucket,
        clicks_catalog(bucket, ', sla: {expected_by: "00:00"}', notify).replace(
            "sla: {max_stale_minutes: 120, warn_stale_minutes: 60}", "description: x"
        ),
    )
    with instance_for_test() as instance:
        report = medallion.run(instance)
        assert report.status == "failed"
        sensor = medallion.defs.resolve_sensor_def("medallion_notifications")
        first = sensor.evaluate_tick(build_sensor_context(instance=instance, definitions=medallion.defs))
        second = sensor.evaluate_tick(
            build_sensor_context(instance=instance, cursor=first.cursor, definitions=medallion.defs)
        )
        # A restarted sensor has lost its cursor: it reads the last hour again, and sends nothing twice.
        restarted = sensor.evaluate_tick(build_sensor_context(instance=instance, definitions=medallion.defs))
    assert "delivered 2" in first.skip_message
    assert "0 new delivery(ies); delivered 0" in second.skip_message
    assert "0 new delivery(ies); delivered 0" in restarted.skip_message
    texts = sorted(r["body"]["text"].splitlines()[0] for r in webhook.received)
    assert texts == ["[medallion] sla missed: clicks", "[medallion] sla missed: pages"]
    deadline = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert {r["body"]["medallion"]["key"] for r in webhook.received} == {
        f"sla:clicks:deadline {deadline.isoformat()}",
        f"sla:pages:deadline {deadline.isoformat()}",
    }


def test_status_and_notify_test_from_the_command_line(tmp_path, bucket, webhook, monkeypatch):
    from click.testing import CliRunner

    from medallion_assets.cli import main

    notify = (
        "notifications:\n  - {notification_id: web_hook, events: [run_failed], channel: webhook, "
        f"params: {{url_env: {HOOK_ENV}}}}}\n"
    )
    medallion = Installation(tmp_path, bucket, clicks_catalog(bucket, ", min_dq_rate: 0.99", notify))
    monkeypatch.setenv("MEDALLION_CATALOG_URL", medallion.store.url)
    an_hour_ago = datetime.now(UTC) - timedelta(minutes=90)
    medallion.store.record_audit(
        run_id="r7",
        pipeline_id="clicks_etl",
        stage_name="bronze_ingest",
        dataset="clicks",
        event="stage",
        status="success",
        rows_read=102,
        rows_written=100,
        details={"dq_rate": 0.980392},
        created_at=an_hour_ago,
    )
    medallion.store.record_audit(
        run_id="r7",
        pipeline_id="clicks_etl",
        stage_name="bronze_ingest",
        dataset="clicks",
        event="volume_anomaly",
        status="warn",
        error="rows_read=102 is outside [990, 1014]",
        created_at=an_hour_ago,
    )
    medallion.store.record_audit(
        run_id="r7",
        pipeline_id="clicks_etl",
        stage_name="silver_pages",
        dataset="pages",
        event="stage",
        status="failed",
        error="boom",
        created_at=an_hour_ago,
    )
    runner = CliRunner()
    assert (
        runner.invoke(main, ["disable", "pipeline", "clicks_etl", "--reason", "source migration"]).exit_code
        == 0
    )

    shown = runner.invoke(main, ["status", "--json"])
    assert shown.exit_code == 0, shown.output
    clicks = json.loads(shown.stdout)["pipelines"]["clicks_etl"]
    assert clicks["profile"] == "balanced"
    assert clicks["last_run"]["run_id"] == "r7" and clicks["last_run"]["status"] == "failed"
    assert clicks["last_run"]["dq_rate"] == {"bronze_ingest": 0.980392}
    assert clicks["last_run"]["anomalies"] == ["bronze_ingest: rows_read=102 is outside [990, 1014]"]
    assert [(f["dataset"], f["state"]) for f in clicks["freshness"]] == [
        ("clicks", "late")
    ]  # 90 of at most 120 min
    (switch,) = clicks["kill_switches"]
    assert switch.startswith("pipeline clicks_etl disabled by ") and switch.endswith(": source migration")
    screen = runner.invoke(main, ["status"]).stdout
    assert "clicks_etl  [balanced]  last run: failed" in screen
    assert "  LATE    clicks: 90 min since the last update; warns after 60" in screen
    assert "  DQ      bronze_ingest: 98.04%" in screen and "  ERROR   silver_pages: boom" in screen

    sent = runner.invoke(main, ["notify", "test", "web_hook"])
    assert (sent.exit_code, sent.stdout) == (0, "web_hook (webhook): delivered\n")
    assert webhook.received[0]["body"]["text"] == (
        "[medallion] test: medallion\ntest message for web_hook from medallion notify test"
    )
    monkeypatch.delenv(HOOK_ENV)
    failed = runner.invoke(main, ["notify", "test", "web_hook"])
    assert failed.exit_code == 1
    assert (
        "web_hook (webhook): not delivered: environment variable MEDALLION_TEST_WEBHOOK_URL is not set"
        in failed.output
    )
    unknown = runner.invoke(main, ["notify", "test", "pager"])
    assert (
        unknown.exit_code == 2 and "unknown notification 'pager'; notifications: web_hook" in unknown.output
    )


def test_metrics_endpoint_serves_what_the_audit_log_and_the_run_queue_hold(tmp_path, bucket):
    import urllib.request

    from dagster import DagsterRunStatus
    from prometheus_client.parser import text_string_to_metric_families

    from medallion_assets.control.monitoring.metrics import serve
    from medallion_assets.dagster_compat import (
        RegisteredCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )

    medallion = Installation(tmp_path, bucket, clicks_catalog(bucket))
    record = medallion.store.record_audit
    recent = datetime.now(UTC) - timedelta(minutes=30)
    for run, status, read, written, quarantined in (
        ("r1", "success", 100, 98, 2),
        ("r2", "failed", None, None, None),
        ("r3", "success", 50, 50, 0),
        ("r4", "halted", None, None, None),
    ):
        record(
            run_id=run,
            pipeline_id="clicks_etl",
            stage_name="bronze_ingest",
            dataset="clicks",
            event="stage",
            status=status,
            rows_read=read,
            rows_written=written,
            rows_quarantined=quarantined,
            duration_sec=2.5 if read else None,
            details={"dq_rate": 1.0} if run == "r3" else {"dq_rate": 0.98},
            created_at=recent,
        )
    record(
        run_id="r3",
        pipeline_id="clicks_etl",
        stage_name="bronze_ingest",
        event="throttle",
        status="waited",
        duration_sec=4.0,
    )
    ops = Notification(
        notification_id="ops", events=["run_failed"], channel="webhook", params={"url_env": HOOK_ENV}
    )
    enqueue(medallion.store, [ops], [Message(event="run_failed", key="run:r2", summary="run r2 failed")])
    job = medallion.defs.resolve_implicit_global_asset_job_def()
    origin = RemoteJobOrigin(
        RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("medallion"), "__repository__"), job.name
    )
    with instance_for_test() as instance:
        for _ in range(2):
            instance.create_run_for_job(
                job_def=job,
                asset_selection=frozenset({BRONZE}),
                status=DagsterRunStatus.QUEUED,
                remote_job_origin=origin,
                tags={"medallion/pipeline": "clicks_etl"},
            )
        server = serve(medallion.store, 0, "127.0.0.1", instance)
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{server.server_port}/metrics", timeout=10
            ) as response:
                text = response.read().decode()
        finally:
            server.shutdown()
            server.server_close()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    stage = (("pipeline", "clicks_etl"), ("stage", "bronze_ingest"))

    def value(name, *labels):
        return samples[name, tuple(sorted(stage + labels))]

    assert [
        value("medallion_stage_executions_total", ("status", s)) for s in ("success", "failed", "halted")
    ] == [2, 1, 1]
    assert value("medallion_stage_duration_seconds_total") == 5.0
    assert [value("medallion_stage_rows_total", ("kind", k)) for k in ("read", "written", "quarantined")] == [
        150,
        148,
        2,
    ]
    assert value("medallion_stage_dq_rate") == 1.0  # the latest successful run's
    assert (value("medallion_throttle_waits_total"), value("medallion_throttle_wait_seconds_total")) == (
        1,
        4.0,
    )
    assert samples["medallion_queue_depth", (("pipeline", "clicks_etl"),)] == 2
    lag = samples[
        "medallion_dataset_freshness_lag_seconds", (("dataset", "clicks"), ("pipeline", "clicks_etl"))
    ]
    assert 30 * 60 <= lag < 60 * 60
    assert (
        samples[
            "medallion_dataset_sla_state",
            (("dataset", "clicks"), ("pipeline", "clicks_etl"), ("state", "fresh")),
        ]
        == 1
    )
    assert samples["medallion_notification_deliveries", (("status", "pending"),)] == 1
    # The example dashboard asks only for series the endpoint serves.
    import re
    from pathlib import Path

    dashboard = (Path(__file__).resolve().parents[1] / "dashboards" / "medallion_grafana.json").read_text()
    assert set(re.findall(r"medallion_[a-z_]+", dashboard)) - {"medallion_pipelines"} <= {
        name for name, _ in samples
    }


def test_dagsters_freshness_daemon_judges_assets_by_their_slas(tmp_path, bucket, monkeypatch):
    """What the UI shows: Dagster's own freshness daemon, on the code location as Dagster loads it."""
    from dagster import AssetMaterialization

    from medallion_assets.dagster_compat import (
        FreshnessDaemon,
        InProcessCodeLocationOrigin,
        InProcessWorkspaceLoadTarget,
        LoadableTargetOrigin,
        WorkspaceProcessContext,
        freeze_time,
    )

    medallion = Installation(tmp_path, bucket, clicks_catalog(bucket, ', sla: {expected_by: "00:00"}'))
    monkeypatch.setenv("MEDALLION_CATALOG_URL", medallion.store.url)
    monkeypatch.setenv("MEDALLION_LAKE_URL", str(tmp_path / "lake"))
    monkeypatch.setenv("MEDALLION_WAREHOUSE_URL", f"duckdb:///{tmp_path}/wh.duckdb")
    pages = AssetKey(["silver", "pages"])
    with instance_for_test() as instance:
        # bronze/clicks written 90 minutes ago: late (warns after 60, stale after 120); silver/pages written
        # two days ago: it missed today's midnight deadline.
        for key, age in ((BRONZE, timedelta(minutes=90)), (pages, timedelta(days=2))):
            with freeze_time(datetime.now(UTC) - age):
                instance.report_runless_asset_event(AssetMaterialization(key))
        origin = InProcessCodeLocationOrigin(LoadableTargetOrigin(module_name="medallion_assets.definitions"))
        with WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as workspace:
            list(FreshnessDaemon().run_iteration(workspace))
        states = {
            key: record.freshness_state.value
            for key, record in instance.get_freshness_state_records([BRONZE, pages]).items()
        }
    assert states == {BRONZE: "WARN", pages: "FAIL"}


def test_metrics_once_prints_the_exposition_of_the_audit_log(tmp_path, monkeypatch):
    """`medallion metrics --once` prints what a scrape would get, and exits (no server, no Dagster
    instance)."""
    from click.testing import CliRunner
    from prometheus_client.parser import text_string_to_metric_families

    from medallion_assets.cli import main

    monkeypatch.setenv("MEDALLION_CATALOG_URL", f"sqlite:///{tmp_path}/catalog.db")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    for status in ("success", "success", "failed"):
        store.record_audit(run_id="r", pipeline_id="p", stage_name="s", event="stage", status=status)
    printed = CliRunner().invoke(main, ["metrics", "--once"])
    assert printed.exit_code == 0, printed.output
    executions = {
        sample.labels["status"]: sample.value
        for family in text_string_to_metric_families(printed.output)
        for sample in family.samples
        if sample.name == "medallion_stage_executions_total"
    }
    assert executions == {"success": 2.0, "failed": 1.0}
