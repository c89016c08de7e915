"""A full refresh the user asks for: `medallion run --full-refresh [--from DATASET]`, or the run tag
`medallion/full_refresh` from wherever Dagster launches a run, rebuilds silver and gold whole from bronze in
one commit per table, equal to what the incremental runs built (maintenance between two of them keeps the
next incremental); a request naming no dataset writes nothing."""

from __future__ import annotations

import json
import re

import boto3
import pytest
from click.testing import CliRunner

from medallion_assets.cli.main import main
from medallion_assets.engine.refresh import FULL_REFRESH_TAG
from medallion_assets.runner import PipelineReport
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.metadata import table_info
from medallion_assets.storage.lake.root import Lake
from tests.lake import lake_rows, lake_snapshots

PIPELINE = "user_events_etl"
# A second silver dataset of bronze_user_events: neither upstream nor downstream of silver_user_events.
EVENT_USERS = """
targets:
  - {{target_id: silver_event_users, layer: silver, columns: {columns}, keys: [event_id]}}
stages:
  - {{pipeline_id: user_events_etl, stage_order: 4, stage_name: silver_event_users,
     input_id: bronze_user_events, target_id: silver_event_users}}
"""
# The lake tables of the pipeline, each with the key its rows are sorted by.
TABLES = {
    "bronze.user_events": ("_source_file", "_source_line"),
    "silver.user_events": ("event_id",),
    "silver.event_users": ("event_id",),
    "gold.daily_user_events": ("event_date",),
}
# A second day's object: new events, and copies of earlier ones that differ (the earliest ingested stays).
DAY_2 = "\n".join(
    [
        *(
            f'{{"event_id": "e9{i:08d}", "user_id": "u9{i:05d}", "event_type": "click", '
            f'"event_ts": "2026-11-08T0{i}:00:00Z", "value": {i}.5}}'
            for i in range(5)
        ),
        '{"event_id": "e000000002", "user_id": "u999999", "event_type": "view", '
        '"event_ts": "2026-11-08T09:00:00Z", "value": 1.0}',
        '{"event_id": "e000000003", "user_id": "u999998", "event_type": "signup", '
        '"event_ts": "2026-11-08T10:00:00Z", "value": null}',
    ]
)


# Maintenance of every table: compaction into files so small that every file is rewritten, then expiry of
# all but the last two snapshots.
MAINTENANCE = """
table_maintenance:
  - {dataset: default, target_file_size_bytes: 100, expire_after_days: 0.00001, keep_snapshots: 2}
"""

# How `medallion run` prints an asset's time.
TIMES = re.compile(r"    [\d.]+ s: Spark jobs [\d.]+ s, metadata commits [\d.]+ s, other [\d.]+ s")


def reasons(report: PipelineReport) -> dict[str, tuple[str | None, str | None]]:
    assert report.status == "success", report
    return {asset.key: (asset.mode, asset.why) for asset in report.assets}


def lake_state(medallion) -> tuple[dict[str, list[int]], dict[str, list[dict]]]:
    """Each table's snapshots, and its rows in key order."""
    snapshots = {table: lake_snapshots(medallion.lake, table) for table in TABLES}
    rows = {
        table: sorted(lake_rows(medallion.lake, table), key=lambda row: tuple(str(row[k]) for k in keys))
        for table, keys in TABLES.items()
    }
    return snapshots, rows


def test_a_full_refresh_rebuilds_in_one_commit_per_table_what_the_incremental_runs_built(
    medallion, tmp_path, monkeypatch
):
    monkeypatch.setenv("MEDALLION_GOLD_GROUPS_FROM_ROWS", "0")  # gold by groups over the seed's small silver
    definition = tmp_path / "event_users.yaml"
    definition.write_text(EVENT_USERS.format(columns="{event_id: string, user_id: string}"))
    medallion.load(definition)
    assert medallion.run(PIPELINE).status == "success"
    for name, value in (
        ("MEDALLION_CATALOG_URL", medallion.store.url),
        ("MEDALLION_LAKE_URL", str(medallion.lake)),
        ("MEDALLION_WAREHOUSE_URL", medallion.warehouse_url),
    ):
        monkeypatch.setenv(name, value)
    # Maintenance between the two batches, compaction (a `replace` snapshot of each table) and expiry,
    # changes no row: the next run stays incremental, and equals a full refresh (below).
    maintenance = tmp_path / "maintenance.yaml"
    maintenance.write_text(MAINTENANCE)
    medallion.load(maintenance)
    before_maintenance = lake_state(medallion)
    maintained = CliRunner().invoke(main, ["lake", "maintain", "--json"])
    assert maintained.exit_code == 0, maintained.output
    reported = {r["dataset"]: r["reported"] for r in json.loads(maintained.stdout)}
    assert lake_state(medallion)[1] == before_maintenance[1]
    for table in ("bronze.user_events", "silver.user_events", "gold.daily_user_events"):
        assert reported[table.replace(".", "_")]["compaction"]["rewritten_data_files_count"] > 0, reported
        compacted = table_info(Lake.resolve(medallion.lake), TableRef("lake", *table.split(".")))
        assert compacted is not None and compacted.history[-1].operation == "replace", table
    boto3.client("s3").put_object(Bucket="medallion-raw", Key="user_events/day2.jsonl", Body=DAY_2)
    # A new column is a new definition: the next run rebuilds that dataset whole, and its report says why.
    wider = "{event_id: string, user_id: string, event_type: string}"
    definition.write_text(EVENT_USERS.format(columns=wider))
    medallion.load(definition)
    incremental = reasons(medallion.run(PIPELINE))
    assert incremental["bronze/user_events"] == (None, None)
    bronze_read = before_maintenance[0]["bronze.user_events"][-1]  # compacted since
    assert incremental["silver/user_events"] == (
        "incremental",
        f"reads the rows bronze appended after snapshot {bronze_read}",
    )
    assert medallion.stage_audit("silver_clean")[-1]["details"]["mode"] == "incremental"
    assert incremental["silver/event_users"][0] == "full"
    assert incremental["silver/event_users"][1].startswith("the stage's definition changed (")
    # Gold recomputes the days silver's changes touched; the full refresh below must make the same rows.
    assert incremental["gold/daily_user_events"][0] == "incremental"
    assert incremental["gold/daily_user_events"][1].startswith(
        "recomputes the groups (event_date = CAST(event_ts AS DATE)) that silver's changes"
    )
    snapshots, rows = lake_state(medallion)
    warehouse = medallion.gold("analytics.daily_user_events")

    # As from the UI's launchpad: the tag alone, every dataset.
    asked = "a full refresh was asked for by the run tag medallion/full_refresh=*"
    refreshed = medallion.run(PIPELINE, tags={FULL_REFRESH_TAG: "*"})
    assert reasons(refreshed) == {
        "bronze/user_events": (None, None),
        "silver/user_events": ("full", asked),
        "gold/daily_user_events": ("full", asked),
        "silver/event_users": ("full", asked),
    }
    # Each asset's wall time, and where it went: Spark's jobs, metadata commits (publish, ledger), the rest.
    for asset in refreshed.assets:
        assert asset.duration_sec and asset.metadata_commits_sec and asset.other_sec is not None, asset
        assert asset.spark_jobs_sec is not None, asset
        assert asset.spark_jobs_sec > 0 or asset.key.startswith("bronze/"), asset  # bronze had nothing new
        measured = asset.spark_jobs_sec + asset.metadata_commits_sec
        assert measured <= asset.duration_sec + 0.002, asset  # each rounded to milliseconds
        assert measured + asset.other_sec == pytest.approx(asset.duration_sec, abs=0.003), asset
    refreshed_snapshots, refreshed_rows = lake_state(medallion)
    assert refreshed_rows == rows
    assert medallion.gold("analytics.daily_user_events") == warehouse
    # Bronze is not ingested again; every other table gains exactly one snapshot.
    assert refreshed_snapshots["bronze.user_events"] == snapshots["bronze.user_events"]
    for table in ("silver.user_events", "silver.event_users", "gold.daily_user_events"):
        assert refreshed_snapshots[table][:-1] == snapshots[table], table
    audited = medallion.stage_audit("silver_clean")[-1]["details"]
    assert (audited["mode"], audited["why"]) == ("full", asked)

    # From the command line, from silver_user_events: it and gold are rebuilt; the sibling and bronze are not.
    result = CliRunner().invoke(main, ["run", PIPELINE, "--full-refresh", "--from", "silver_user_events"])
    assert result.exit_code == 0, result.output
    asked = "a full refresh was asked for by `medallion run --full-refresh --from silver_user_events`"
    lines = result.stdout.splitlines()
    times = [line for line in lines if TIMES.fullmatch(line)]
    assert len(times) == 4, result.stdout
    modes = [line for line in lines if line.startswith(("    full:", "    incremental:"))]
    assert modes[:2] == [f"    full: {asked}", f"    full: {asked}"]
    assert modes[2].startswith("    incremental: reads the rows bronze appended after snapshot ")
    assert modes[2].endswith(": none") and len(modes) == 3
    from_silver_snapshots, from_silver_rows = lake_state(medallion)
    assert from_silver_rows == rows
    for table in ("bronze.user_events", "silver.event_users"):
        assert from_silver_snapshots[table] == refreshed_snapshots[table], table
    for table in ("silver.user_events", "gold.daily_user_events"):
        assert from_silver_snapshots[table][:-1] == refreshed_snapshots[table], table


def test_a_full_refresh_naming_no_dataset_of_the_pipeline_is_refused_before_any_stage_writes(
    medallion, monkeypatch
):
    monkeypatch.setenv("MEDALLION_CATALOG_URL", medallion.store.url)
    runner = CliRunner()
    datasets = "bronze_user_events, silver_user_events, gold_daily_user_events"
    for dataset in ("silver_user_event", "silver_orders"):  # a typo; a dataset of another pipeline
        refused = runner.invoke(main, ["run", PIPELINE, "--full-refresh", "--from", dataset])
        assert (refused.exit_code, refused.stderr) == (
            2,
            f"--from: '{dataset}' is not a dataset of pipeline user_events_etl; its datasets: {datasets}\n",
        )
    alone = runner.invoke(main, ["run", PIPELINE, "--from", "silver_user_events"])
    assert (alone.exit_code, alone.stderr) == (
        2,
        "--from needs one of --full-refresh and --restate, which exclude each other\n",
    )
    assert medallion.store.audit_entries() == []  # no run started

    # From the launchpad, a tag naming something else: every stage refuses it before writing anything.
    report = medallion.run(PIPELINE, tags={FULL_REFRESH_TAG: "silver_user_events,x'; DROP TABLE audit_log"})
    refusal = (
        'run tag medallion/full_refresh="silver_user_events,x\'; DROP TABLE audit_log" names '
        '"x\'; DROP TABLE audit_log", which is not a dataset: give * or dataset ids separated by commas '
        f"(pipeline user_events_etl has {datasets})"
    )
    assert report.status == "failed"
    assert [(asset.key, asset.status) for asset in report.assets] == [
        ("bronze/user_events", "failed"),
        ("silver/user_events", "skipped"),
        ("gold/daily_user_events", "skipped"),
    ]
    assert report.assets[0].reason == refusal
    assert [(e["stage_name"], e["status"], e["error"]) for e in medallion.store.audit_entries()] == [
        ("bronze_ingest", "failed", refusal)
    ]
    assert medallion.store.processed_objects("user_events_raw") == {}
    assert all(medallion.store.lake_commits(dataset) == [] for dataset in datasets.split(", "))
