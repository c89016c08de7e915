"""The command line as a user runs it: a separate process, real S3 API, catalog, Spark and Dagster."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3

from medallion_assets.sample_data import write_sample_data
from tests.conftest import SEED
from tests.reference import expected_daily_user_events

MEDALLION = [sys.executable, "-m", "medallion_assets.cli"]


def medallion(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([*MEDALLION, *args], env=env, capture_output=True, text=True, timeout=600)


def test_catalog_load_then_run_with_json_report(tmp_path, s3_endpoint):
    bucket = boto3.resource("s3").Bucket("medallion-raw")
    if bucket.creation_date is None:
        bucket.create()
    bucket.objects.all().delete()
    summary = write_sample_data("s3://medallion-raw", rows=1000)
    env = {**os.environ, "MEDALLION_HOME": str(tmp_path / "home")}
    env.pop("DAGSTER_HOME", None)

    loaded = medallion("catalog", "load", str(SEED), env=env)
    assert loaded.returncode == 0, loaded.stderr
    run = medallion("run", "user_events_etl", "--json", env=env)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["pipeline"] == "user_events_etl" and report["status"] == "success"
    assets = {a["key"]: a for a in report["assets"]}
    assert list(assets) == ["bronze/user_events", "silver/user_events", "gold/daily_user_events"]
    assert assets["bronze/user_events"]["rows"] == summary.event_lines - summary.malformed_events
    assert assets["gold/daily_user_events"]["rows"] == len(expected_daily_user_events("s3://medallion-raw"))
    assert {"name": "unique_event_id", "passed": True, "severity": "error"} in assets["silver/user_events"]["checks"]

    audit = medallion("audit", "--pipeline", "user_events_etl", "--json", env=env)
    entries = [(e["stage_name"], e["event"], e["status"], e["rows_read"]) for e in json.loads(audit.stdout)]
    assert entries == [("bronze_ingest", "stage", "success", summary.event_lines),
                       ("silver_clean", "stage", "success", summary.event_lines - summary.malformed_events),
                       ("gold_daily_aggregate", "stage", "success", assets["silver/user_events"]["rows"])]

    unknown = medallion("run", "no_such_pipeline", env=env)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "unknown pipeline 'no_such_pipeline'; pipelines: orders_etl, user_events_etl"
