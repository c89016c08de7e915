"""The command line as a user runs it: a separate process, real S3 API, catalog, Spark and Dagster."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys

import boto3
import pytest
from dagster import DagsterInstance, DagsterRunStatus

from medallion_assets.config import daemon_silence_seconds
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
    assert {"name": "unique_event_id", "passed": True, "severity": "error"} in assets["silver/user_events"][
        "checks"
    ]

    audit = medallion("audit", "--pipeline", "user_events_etl", "--json", env=env)
    entries = [(e["stage_name"], e["event"], e["status"], e["rows_read"]) for e in json.loads(audit.stdout)]
    assert entries == [
        ("bronze_ingest", "stage", "success", summary.event_lines),
        ("silver_clean", "stage", "success", summary.event_lines - summary.malformed_events),
        # The load records which gold version the warehouse now holds, before the stage's own row.
        ("gold_daily_aggregate", "warehouse_load", "success", None),
        ("gold_daily_aggregate", "stage", "success", assets["silver/user_events"]["rows"]),
    ]

    unknown = medallion("run", "no_such_pipeline", env=env)
    assert unknown.returncode == 2
    assert (
        unknown.stderr.strip()
        == "unknown pipeline 'no_such_pipeline'; pipelines: customer_changes_etl, orders_etl, user_events_etl"
    )


def test_run_with_dagster_home_of_dagsters_defaults_runs_in_process(tmp_path, s3_endpoint, monkeypatch):
    """DAGSTER_HOME exported to an empty folder, as Dagster's docs set it up: Dagster's defaults queue runs,
    but no daemon runs for them, so the run goes in process, as `dagster asset materialize` would."""
    bucket = boto3.resource("s3").Bucket("medallion-raw")
    if bucket.creation_date is None:
        bucket.create()
    bucket.objects.all().delete()
    write_sample_data("s3://medallion-raw", rows=500)
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    env = {**os.environ, "MEDALLION_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(dagster_home)}
    assert medallion("catalog", "load", str(SEED), env=env).returncode == 0
    # A silence shorter than the daemon's heartbeat interval would take every daemon for stopped.
    refused = medallion("run", "user_events_etl", env={**env, "MEDALLION_DAEMON_SILENCE_SECONDS": "20"})
    assert refused.returncode == 5
    assert refused.stderr.splitlines()[-1] == (  # after Dagster's note that the folder has no dagster.yaml
        "MEDALLION_DAEMON_SILENCE_SECONDS='20' is not a whole number of seconds over 30 (dagster-daemon's "
        "heartbeat interval)"
    )
    assert "Traceback" not in refused.stderr

    run = medallion("run", "user_events_etl", "--json", env=env)

    assert run.returncode == 0, run.stderr
    assert (
        "user_events_etl: running in this process: no dagster-daemon has sent a heartbeat for the Dagster "
        f"instance configured in {dagster_home / 'dagster.yaml'} in the last {daemon_silence_seconds()} s"
    ) in run.stderr.splitlines()  # after Dagster's own note that the folder has no dagster.yaml
    assert json.loads(run.stdout)["status"] == "success"
    assert "Traceback" not in run.stderr, run.stderr  # PySpark's workers closing are no error of the run
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    with DagsterInstance.get() as instance:
        assert [r.status for r in instance.get_runs()] == [DagsterRunStatus.SUCCESS]


@pytest.mark.integration  # the demo and the commands the README and docs/ print, each a process
def test_after_the_demo_the_readme_commands_work_in_a_new_shell(tmp_path):
    """`medallion demo`, then the commands the README and docs/ print, from the same folder, with no variable
    exported: the raw objects outlive the demo (kept on disk, served on a loopback S3 API again), and one home
    holds it all."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MEDALLION_", "AWS_ENDPOINT_URL")) and name != "DAGSTER_HOME"
    }

    def shell(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*MEDALLION, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
        )

    demo = shell("demo", "--rows", "1000")
    assert demo.returncode == 0, demo.stderr
    assert "18 kill switch row(s) added (one per new pipeline, stage and source" in demo.stdout
    home = tmp_path / ".medallion"
    assert sorted(p.name for p in home.iterdir()) == [
        "catalog.db",
        "dagster",
        "lake",
        "s3",
        "warehouse.duckdb",
    ]

    rerun = shell("run", "user_events_etl", "--json")
    assert rerun.returncode == 0, rerun.stderr
    assets = {a["key"]: a for a in json.loads(rerun.stdout)["assets"]}
    # Every object was ingested by the demo: the bookmarks (by ETag) still match the objects served again.
    assert (assets["bronze/user_events"]["rows_read"], assets["bronze/user_events"]["rows"]) == (0, 0)
    silver = [
        (e["rows_read"], e["rows_written"], e["rows_quarantined"])
        for e in json.loads(shell("audit", "--pipeline", "user_events_etl", "--json").stdout)
        if e["stage_name"] == "silver_clean"
    ]
    # Silver reads only what bronze appended since its last run, which is nothing; the report says what the
    # audit says.
    assert silver[1][0] == 0 < silver[0][0]
    assert silver[1] == (
        assets["silver/user_events"]["rows_read"],
        assets["silver/user_events"]["rows"],
        assets["silver/user_events"]["rows_quarantined"],
    )

    # Raw objects written into the folder the home's S3 serves (the same names, other content) are the next
    # run's: served again at its start, with new ETags.
    more = shell("sample-data", "--rows", "500", "--seed", "8", "--to", ".medallion/s3/medallion-raw")
    assert more.returncode == 0, more.stderr
    written = {name: int(value) for name, value in re.findall(r"(\w+)=(\d+)", more.stdout)}
    fresh = {a["key"]: a for a in json.loads(shell("run", "user_events_etl", "--json").stdout)["assets"]}
    bronze = fresh["bronze/user_events"]
    assert (bronze["rows_read"], bronze["rows_quarantined"]) == (
        written["event_lines"],
        written["malformed_events"],
    )

    paths = json.loads(shell("paths", "gold_daily_revenue", "--json").stdout)
    assert paths["active"][0] == "orders_raw"
    lineage = shell("lineage", "show", "gold_daily_revenue", "--upstream")
    assert lineage.returncode == 0 and "orders_raw" in lineage.stdout
    audit = json.loads(shell("audit", "--pipeline", "user_events_etl", "--json").stdout)
    assert [e["status"] for e in audit if e["event"] == "stage"] == ["success"] * 9

    with sqlite3.connect(home / "catalog.db") as connection:  # the README's plain SQL kill switch
        updated = connection.execute(
            "UPDATE control_flags SET flag_value = false, reason = 'bucket migration' "
            "WHERE entity_type = 'pipeline' AND entity_id = 'user_events_etl'"
        ).rowcount
    assert updated == 1
    halted = shell("run", "user_events_etl")
    assert halted.returncode == 3
    assert "(pipeline user_events_etl disabled by sql: bucket migration)" in halted.stdout
    enabled = shell("enable", "pipeline", "user_events_etl")
    assert enabled.returncode == 0 and enabled.stdout.startswith("pipeline user_events_etl enabled by ")
    flags = shell("catalog", "show", "control_flags")
    assert (
        "entity_type=pipeline  entity_id=user_events_etl  flag_name=enabled  flag_value=True" in flags.stdout
    )
