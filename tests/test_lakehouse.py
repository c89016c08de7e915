"""The lake as Iceberg tables: atomic commits, write-audit-publish, history, other engines, faults."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from dagster import AssetKey, instance_for_test, materialize
from pyiceberg.catalog.rest import RestCatalog

from medallion_assets.catalog.models import LakeTable, ValidationRuleSet
from medallion_assets.control.steering.rollback import rollback
from medallion_assets.definitions import build_definitions
from medallion_assets.engine.refresh import EVERY_DATASET, FULL_REFRESH_TAG
from medallion_assets.errors import LakeCommitConflict
from medallion_assets.loading import validate_files
from medallion_assets.runner import run_pipeline
from medallion_assets.sample_data import write_sample_data
from medallion_assets.storage.lake import tables
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.metadata import snapshots_by_id, table_info
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables, branch_name
from tests.conftest import Medallion
from tests.lake import add_new_events, lake_rows, lake_snapshots

SILVER = TableRef("lake", "silver", "user_events")
RAW = "s3://medallion-raw"


def sorted_rows(rows: list[dict], *keys: str) -> list[dict]:
    """Rows in key order, timestamps as Spark shows them (UTC, no zone; pyiceberg gives them zoned)."""

    def plain(value):
        return value.astimezone(UTC).replace(tzinfo=None) if isinstance(value, datetime) else value

    rows = [{name: plain(value) for name, value in row.items()} for row in rows]
    return sorted(rows, key=lambda row: tuple(str(row[k]) for k in keys))


def test_silver_and_gold_read_through_the_catalog_by_another_engine_equal_sparks(medallion, spark):
    report = medallion.run("user_events_etl")
    assert report.status == "success", [e["error"] for e in medallion.store.audit_entries() if e.get("error")]
    lake = LakeTables(spark, Lake.resolve(medallion.lake))
    for table, keys in (
        (SILVER, ("event_id",)),
        (TableRef("lake", "gold", "daily_user_events"), ("event_date",)),
    ):
        by_pyiceberg = sorted_rows(lake_rows(medallion.lake, table.in_catalog), *keys)
        by_spark = sorted_rows([row.asDict() for row in lake.read(table).collect()], *keys)
        assert by_pyiceberg == by_spark and by_pyiceberg
    gold = medallion.gold("analytics.daily_user_events")
    in_lake = lake_rows(medallion.lake, "gold.daily_user_events")
    assert len(gold) == len(in_lake)


def test_every_write_is_one_snapshot_named_in_the_audit_and_the_data_version(medallion):
    report = medallion.run("user_events_etl")
    assert report.status == "success"
    bronze, silver = medallion.stage_audit("bronze_ingest"), medallion.stage_audit("silver_clean")
    info = table_info(Lake.resolve(medallion.lake), SILVER)
    assert info is not None
    # One version of silver, published by fast-forward from the run's branch, which is gone.
    assert [s.snapshot_id for s in info.history] == [info.current_snapshot_id]
    assert info.branches == {}
    commits = medallion.store.lake_commits("silver_user_events")
    assert [(c["operation"], c["snapshot_id"]) for c in commits] == [("publish", info.current_snapshot_id)]
    [bronze_commit] = medallion.store.lake_commits("bronze_user_events")
    assert commits[0]["inputs"] == {"bronze_user_events": bronze_commit["snapshot_id"]}
    assert bronze[0]["details"]["batch_id"]
    assert silver[0]["status"] == "success"
    assert silver[0]["details"]["snapshot_id"] == str(info.current_snapshot_id)
    assert silver[0]["details"]["table"] == "lake.silver.user_events"
    assert silver[0]["details"]["input_snapshots"] == {
        "bronze_user_events": str(bronze_commit["snapshot_id"])
    }
    # The snapshot is the asset's data version in Dagster.
    defs = build_definitions(medallion.store.url, str(medallion.lake), medallion.warehouse_url)
    with instance_for_test() as instance:
        result = materialize(
            list(defs.assets),
            resources=defs.resources,
            instance=instance,
            selection=[AssetKey(["silver", "user_events"])],
        )
        [event] = result.get_asset_materialization_events()
        version = event.materialization.tags["dagster/data_version"]
    assert version == str(table_info(Lake.resolve(medallion.lake), SILVER).current_snapshot_id)
    assert version == str(info.current_snapshot_id)  # bronze brought nothing new: the same version


def test_a_failing_blocking_check_leaves_main_unchanged_and_keeps_the_staged_branch(medallion, raw_data):
    report = medallion.run("user_events_etl")
    assert report.status == "success", [e["error"] for e in medallion.store.audit_entries() if e.get("error")]
    before = table_info(Lake.resolve(medallion.lake), SILVER)
    rows_before = sorted_rows(lake_rows(medallion.lake, "silver.user_events"), "event_id")
    # Another batch arrives, and an operator tightens silver's accepted values so that its check fails.
    write_sample_data(f"{RAW}/day2", rows=600, lines_per_file=300, seed=7)
    medallion.move_source("user_events_raw", f"{RAW}/day2/user_events/")
    rules = medallion.store.snapshot().rule_sets["silver_user_events_rules"]
    strict = [
        rule.model_copy(update={"values": ["view"]}) if rule.type == "accepted_values" else rule
        for rule in rules.check_def
    ]
    medallion.store.upsert(
        {"validation_rules": [ValidationRuleSet(rule_set_id="silver_user_events_rules", check_def=strict)]}
    )
    report = medallion.run("user_events_etl")
    assert report.status == "failed"
    after = table_info(Lake.resolve(medallion.lake), SILVER)
    assert after is not None and before is not None
    assert after.current_snapshot_id == before.current_snapshot_id
    assert sorted_rows(lake_rows(medallion.lake, "silver.user_events"), "event_id") == rows_before
    [branch] = after.branches
    assert branch.startswith("run_")
    silver = medallion.stage_audit("silver_clean")[-1]
    assert (silver["status"], silver["details"]["staged_branch"]) == ("failed", branch)
    assert [c["operation"] for c in medallion.store.lake_commits("silver_user_events")] == ["publish"]


def test_rejects_reach_the_quarantine_only_with_their_stage_and_a_fixed_rerun_adds_them_once(
    medallion, raw_data
):
    def quarantine() -> list[dict]:
        return lake_rows(medallion.lake, "silver.user_events_quarantine")

    assert medallion.run("user_events_etl").status == "success"
    assert len(quarantine()) == raw_data.bad_timestamp_events > 0
    # A second batch with rejects of its own, and a blocking check that fails on it.
    day2 = write_sample_data(f"{RAW}/day2", rows=600, lines_per_file=300, seed=7)
    medallion.move_source("user_events_raw", f"{RAW}/day2/user_events/")
    rules = medallion.store.snapshot().rule_sets["silver_user_events_rules"]
    strict = [
        rule.model_copy(update={"values": ["view"]}) if rule.type == "accepted_values" else rule
        for rule in rules.check_def
    ]
    medallion.store.upsert(
        {"validation_rules": [ValidationRuleSet(rule_set_id="silver_user_events_rules", check_def=strict)]}
    )
    assert medallion.run("user_events_etl").status == "failed"
    failed = medallion.stage_audit("silver_clean")[-1]
    assert failed["rows_quarantined"] > 0
    # Main of both tables is as it was; the rejects wait on the failed run's branch, as its rows do.
    assert len(quarantine()) == raw_data.bad_timestamp_events
    assert list(table_info(Lake.resolve(medallion.lake), SILVER.quarantine()).branches) == [
        failed["details"]["staged_branch"]
    ]
    # The rule fixed, the rerun publishes the batch and its rejects, once.
    medallion.store.upsert({"validation_rules": [rules]})
    assert medallion.run("user_events_etl").status == "success"
    rows = quarantine()
    assert len({(r["_source_file"], r["_source_line"]) for r in rows}) == len(rows)
    assert len(rows) == raw_data.bad_timestamp_events + day2.bad_timestamp_events
    published = [e for e in medallion.stage_audit("silver_clean") if e["status"] == "success"]
    assert sum(e["rows_quarantined"] for e in published) == len(rows)


def test_a_publish_after_another_runs_is_refused_and_loses_nothing(spark, tmp_path):
    lake = LakeTables(spark, Lake.resolve(tmp_path / "lake"))
    table = TableRef("lake", "silver", "contested")
    first = spark.createDataFrame([(1, "a")], "id bigint, v string")
    lake.ensure(table, first.schema, None)
    ours = lake.stage(table, first, "run-one")
    theirs = lake.stage(table, spark.createDataFrame([(2, "b")], "id bigint, v string"), "run-two")
    lake.publish(table, ours)
    with pytest.raises(LakeCommitConflict) as refused:
        lake.publish(table, theirs)
    assert str(refused.value) == (
        "lake table lake.silver.contested: another run published a new version while this run staged its "
        "own on branch run_runtwo; run it again to build on that version"
    )
    assert [row.asDict() for row in lake.read(table).collect()] == [{"id": 1, "v": "a"}]


def test_a_delete_that_matched_nothing_is_not_staged_and_a_version_published_meanwhile_still_refuses(
    spark, tmp_path, monkeypatch
):
    """The branch whose delete matched no row is made again where it was made, not at `main`: a row of the
    same key that another writer published meanwhile makes the publish refuse, rather than be duplicated."""
    lake = LakeTables(spark, Lake.resolve(tmp_path / "lake"))
    table = TableRef("lake", "silver", "contested_keys")
    schema = "id bigint, v string"
    lake.ensure(table, spark.createDataFrame([], schema).schema, None)
    lake.append(table, spark.createDataFrame([(1, "a")], schema), "first")
    head_of = tables.branch_head

    def another_writer_meanwhile(*args):
        lake.append(table, spark.createDataFrame([(2, "b")], schema), "meanwhile")
        return head_of(*args)

    monkeypatch.setattr(tables, "branch_head", another_writer_meanwhile)
    key = spark.createDataFrame([(2,)], "id bigint")
    branch = lake.stage_replacing(table, key, spark.createDataFrame([(2, "B")], schema), ["id"], "run-late")
    assert sorted(tuple(r) for r in lake.read(table, branch=branch).collect()) == [(1, "a"), (2, "B")]
    with pytest.raises(LakeCommitConflict):
        lake.publish(table, branch)
    assert sorted(tuple(r) for r in lake.read(table).collect()) == [(1, "a"), (2, "b")]


def test_the_rows_of_a_version_with_delete_files_are_not_taken_from_its_summary(spark, tmp_path):
    # A merge-on-read delete leaves the deleted row in its data file: the summary's records still count it.
    root = Lake.resolve(tmp_path / "lake")
    lake = LakeTables(spark, root)
    table = TableRef("lake", "silver", "merged_on_read")
    rows = spark.range(10).selectExpr("CAST(id AS STRING) AS k")
    lake.ensure(table, rows.schema, LakeTable(properties={"write.delete.mode": "merge-on-read"}))
    lake.append(table, rows, "b1")
    appended = lake.current_snapshot(table)
    spark.sql(f"DELETE FROM {table.sql} WHERE k = '3'")
    deleted = lake.current_snapshot(table)

    assert lake.total_rows(table, appended) == 10
    assert snapshots_by_id(root, table)[deleted].summary["total-position-deletes"] == "1"
    assert lake.total_rows(table, deleted) is None
    assert lake.read(table).count() == 9


def test_keys_replaced_in_some_files_rewrite_those_and_in_every_file_rewrite_the_table_in_one_commit(
    spark, tmp_path
):
    lake = LakeTables(spark, Lake.resolve(tmp_path / "lake"))
    table = TableRef("lake", "silver", "replaced")
    schema = "id bigint, v string"
    lake.ensure(table, spark.createDataFrame([], schema).schema, None)
    appends = []
    for batch, rows in enumerate([[(1, "a"), (2, "b")], [(3, "c"), (None, "n")]]):
        lake.append(table, spark.createDataFrame(rows, schema).coalesce(1), f"batch{batch}")
        appends.append(lake.current_snapshot(table))
    main = appends[-1]
    # The rows an incremental read after the first batch reads, counted from the appends' summaries.
    assert (
        lake.rows_appended(table, appends[0], main)
        == lake.read_appended(table, appends[0], main).count()
        == 2
    )

    def replaced(keys: list, rows: list, run_id: str) -> tuple[dict, set[str], int, int | None]:
        branch = lake.stage_replacing(
            table,
            spark.createDataFrame([(k,) for k in keys], "id bigint"),
            spark.createDataFrame(rows, schema),
            ["id"],
            run_id,
        )
        staged = lake.read(table, branch=branch)
        head = spark.sql(f"SELECT snapshot_id FROM {table.sql}.refs WHERE name = '{branch}'").first()[0]
        parents = {
            r.snapshot_id: r.parent_id for r in spark.sql(f"SELECT * FROM {table.sql}.snapshots").collect()
        }
        commits = 0
        while head != main:
            head, commits = parents[head], commits + 1
        files = {r._file for r in spark.table(table.branch(branch)).select("_file").collect()}
        return {r.id: r.v for r in staged.collect()}, files, commits, lake.rows_staged(table, branch, run_id)

    before = {r._file for r in spark.table(table.sql).select("_file").collect()}
    # Keys of one file (a null key among them, equal to itself): the delete rewrites that file alone, the
    # new rows are appended after it.
    rows, files, commits, written = replaced([None, 4], [(None, "N"), (4, "d")], "run-some")
    assert rows == {1: "a", 2: "b", 3: "c", None: "N", 4: "d"}
    assert commits == 2 and len(files & before) == 1
    assert written == 2  # the rows the append added, from its commit's summary
    # Keys no row has: their delete matches nothing, and only the append is staged, no file rewritten.
    rows, files, commits, written = replaced([7], [(7, "g")], "run-none")
    assert rows == {1: "a", 2: "b", 3: "c", None: "n", 7: "g"}
    assert (commits, written, len(files - before)) == (1, 1, 1) and before <= files
    # A key in every file: every file would be rewritten, so the table is written whole, in one commit.
    rows, files, commits, written = replaced([1, 3, 9], [(1, "A"), (9, "z")], "run-every")
    assert rows == {1: "A", 2: "b", None: "n", 9: "z"}
    assert commits == 1 and not files & before
    assert written is None  # its commit added the table's other rows too: the caller counts its own
    # Staged from the version read: a version published meanwhile makes the publish refuse, not lose it.
    lake.append(table, spark.createDataFrame([(5, "e")], schema), "meanwhile")
    with pytest.raises(LakeCommitConflict):
        lake.publish(table, branch_name("run-every"))
    assert {r.id: r.v for r in lake.read(table).collect()} == {1: "a", 2: "b", 3: "c", None: "n", 5: "e"}


def test_a_table_changed_outside_medallion_is_reported_as_schema_drift(medallion, spark):
    report = medallion.run("user_events_etl")
    assert report.status == "success", [e["error"] for e in medallion.store.audit_entries() if e.get("error")]
    LakeTables(spark, Lake.resolve(medallion.lake))  # the session now reaches this lake's catalog
    bronze = TableRef("lake", "bronze", "user_events")
    spark.sql(f"ALTER TABLE {bronze.sql} DROP COLUMN user_id")
    write_sample_data(f"{RAW}/day2", rows=300, lines_per_file=300, seed=5)
    medallion.move_source("user_events_raw", f"{RAW}/day2/user_events/")
    medallion.set_retries(0)
    assert medallion.run("user_events_etl").status == "failed"
    [_, failed] = medallion.stage_audit("bronze_ingest")
    assert failed["error"] == (
        "LakeSchemaDrift: lake table lake.bronze.user_events lacks column(s) user_id that the catalog "
        "declares: it was changed outside Medallion; add them back (ALTER TABLE … ADD COLUMNS) or rebuild "
        "the table"
    )
    assert failed["details"] is None or "snapshot_id" not in failed["details"]


def test_an_unreachable_lake_catalog_is_one_error_naming_the_setting(medallion, monkeypatch):
    monkeypatch.setenv("MEDALLION_LAKE_CATALOG", "postgresql://nobody@127.0.0.1:9/lake")
    medallion.set_retries(0)
    assert medallion.run("user_events_etl").status == "failed"
    [bronze] = medallion.stage_audit("bronze_ingest")
    assert bronze["error"].startswith(
        "LakeCatalogError: MEDALLION_LAKE_CATALOG=postgresql://nobody@127.0.0.1:9/lake: the lake catalog "
    )
    assert "at org.apache" not in bronze["error"]
    assert not (medallion.lake / "bronze").exists()


def test_partitioning_order_and_properties_come_from_the_catalog(medallion, raw_data):
    target = medallion.store.snapshot().targets["silver_user_events"]
    layout = LakeTable(
        partition_by=["days(event_ts)", "bucket(4, user_id)"],
        sort_by=["user_id DESC NULLS LAST"],
        properties={"write.target-file-size-bytes": "1048576"},
    )
    medallion.store.upsert({"targets": [target.model_copy(update={"lake_table": layout})]})
    report = medallion.run("user_events_etl")
    assert report.status == "success", [e["error"] for e in medallion.store.audit_entries() if e.get("error")]
    catalog = Lake.resolve(medallion.lake).catalog("lake").metadata()
    catalog_table = catalog.load_table(("silver", "user_events"))
    assert [str(field.transform) for field in catalog_table.spec().fields] == ["day", "bucket[4]"]
    assert catalog_table.properties["write.target-file-size-bytes"] == "1048576"
    assert [str(field.direction) for field in catalog_table.sort_order().fields] == ["DESC"]


def test_bad_layouts_are_refused_at_validate_with_file_and_line(tmp_path, medallion):
    catalog = tmp_path / "targets.yaml"
    catalog.write_text(
        "targets:\n"
        "  - target_id: silver_user_events\n"
        "    layer: silver\n"
        "    columns: {event_id: string, event_ts: timestamp}\n"
        "    lake_table:\n"
        "      partition_by: ['weeks(event_ts)', 'days(missing)', 'bucket(user_id)']\n"
        "      sort_by: ['event_ts SIDEWAYS']\n"
        "      properties: {format-version: '9', write.wap.enabled: 'false'}\n"
    )
    with pytest.raises(Exception) as invalid:
        validate_files(medallion.store.snapshot(), [catalog])
    text = str(invalid.value)
    for expected in (
        f"{catalog}:2: targets[silver_user_events].lake_table.partition_by: partition transform 'weeks' is "
        "unknown; use identity, years, months, days, hours, bucket, truncate",
        "partition column 'missing' is not a column of the table",
        "partition entry 'bucket(user_id)': write it bucket(N, column)",
        "sort entry 'event_ts SIDEWAYS' is not 'column [ASC|DESC] [NULLS FIRST|LAST]'",
        "table property 'format-version' is '9'; it must be 1, 2 or 3",
        "table property 'write.wap.enabled' is not one Medallion sets",
    ):
        assert expected in text


KILLED_RUN = """
import sys
from dagster import instance_for_test
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.definitions import build_definitions
from medallion_assets.runner import run_pipeline
store = CatalogStore(sys.argv[1])
defs = build_definitions(sys.argv[1], sys.argv[2], sys.argv[3])
with instance_for_test() as instance:
    run_pipeline(defs, store.snapshot(), store, "user_events_etl", instance)
"""


def _kill_run_when(medallion: Medallion, tmp_path: Path, reached: Callable[[], bool]) -> None:
    """Run the pipeline in a run worker of its own and SIGKILL it (its process group) once `reached()`."""
    worker = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, medallion.store.url, str(medallion.lake), medallion.warehouse_url],
        env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not reached():
        assert worker.poll() is None, "the run ended before it was killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()


def _pending_batches(catalog_file: Path) -> int:
    with sqlite3.connect(catalog_file) as connection:
        return connection.execute(
            "SELECT count(*) FROM ingestion_bookmarks WHERE state = 'pending'"
        ).fetchone()[0]


def test_a_run_killed_mid_write_leaves_every_table_at_its_previous_snapshot(medallion, raw_data, tmp_path):
    report = medallion.run("user_events_etl")
    assert report.status == "success", [e["error"] for e in medallion.store.audit_entries() if e.get("error")]
    tables = ("bronze.user_events", "silver.user_events", "gold.daily_user_events")
    before = {table: lake_snapshots(medallion.lake, table) for table in tables}
    rows_before = {table: len(lake_rows(medallion.lake, table)) for table in tables}
    day2 = write_sample_data(f"{RAW}/day2", rows=3000, lines_per_file=1000, seed=11)
    medallion.move_source("user_events_raw", f"{RAW}/day2/user_events/")
    catalog_file = Path(medallion.store.url.removeprefix("sqlite:///"))
    # Killed while the bronze batch is being written.
    _kill_run_when(medallion, tmp_path, lambda: _pending_batches(catalog_file) > 0)
    for table in tables:
        history = lake_snapshots(medallion.lake, table)
        # Readable, at the previous snapshot: bronze may hold the batch if its commit came just before.
        assert history[: len(before[table])] == before[table]
        assert len(history) <= len(before[table]) + (table == "bronze.user_events")
        lake_rows(medallion.lake, table)
    assert len(lake_rows(medallion.lake, "silver.user_events")) == rows_before["silver.user_events"]
    # The rerun settles the killed batch and ingests every new object exactly once.
    report = medallion.run("user_events_etl")
    assert report.status == "success", [e["error"] for e in medallion.store.audit_entries() if e.get("error")]
    bronze_rows = lake_rows(medallion.lake, "bronze.user_events")
    assert len(bronze_rows) == rows_before["bronze.user_events"] + day2.event_lines - day2.malformed_events
    assert len({(r["_source_file"], r["_source_line"]) for r in bronze_rows}) == len(bronze_rows)


def test_a_run_killed_mid_merge_changes_nothing_and_the_rerun_merges_the_batch_once(
    medallion, raw_data, tmp_path
):
    report = medallion.run("user_events_etl")
    assert report.status == "success", [e["error"] for e in medallion.store.audit_entries() if e.get("error")]
    before = lake_snapshots(medallion.lake, "silver.user_events")
    rows_before = sorted_rows(lake_rows(medallion.lake, "silver.user_events"), "event_id")
    write_sample_data(f"{RAW}/day2", rows=3000, lines_per_file=1000, seed=11)
    medallion.move_source("user_events_raw", f"{RAW}/day2/user_events/")

    def merging() -> bool:  # silver merges on its run's branch
        return any(
            name.startswith("run_") for name in table_info(Lake.resolve(medallion.lake), SILVER).branches
        )

    _kill_run_when(medallion, tmp_path, merging)
    assert lake_snapshots(medallion.lake, "silver.user_events") == before
    assert sorted_rows(lake_rows(medallion.lake, "silver.user_events"), "event_id") == rows_before
    # The rerun merges the new batch once: silver equals what a full refresh then rebuilds from bronze.
    report = medallion.run("user_events_etl")
    assert report.status == "success", [e["error"] for e in medallion.store.audit_entries() if e.get("error")]
    assert medallion.stage_audit("silver_clean")[-1]["details"]["mode"] == "incremental"
    merged = sorted_rows(lake_rows(medallion.lake, "silver.user_events"), "event_id")
    assert len({row["event_id"] for row in merged}) == len(merged) > len(rows_before)
    assert medallion.run("user_events_etl", tags={FULL_REFRESH_TAG: EVERY_DATASET}).status == "success"
    assert sorted_rows(lake_rows(medallion.lake, "silver.user_events"), "event_id") == merged


def test_rejects_whose_quarantine_write_failed_after_bronze_committed_are_quarantined_by_the_next_run(
    medallion, raw_data, spark
):
    # A quarantine table someone made with the wrong type for `raw`: bronze commits, the rejects' write fails.
    lake = LakeTables(spark, Lake.resolve(medallion.lake))
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bronze")
    spark.sql("CREATE TABLE lake.bronze.user_events_quarantine (raw INT) USING iceberg")
    assert medallion.run("user_events_etl").status == "failed"
    [failed] = medallion.stage_audit("bronze_ingest")
    assert failed["status"] == "failed" and "raw" in failed["error"]
    good = raw_data.event_lines - raw_data.malformed_events
    assert len(lake_rows(medallion.lake, "bronze.user_events")) == good
    [batch] = medallion.store.pending_batches("user_events_raw")  # committed to bronze, rejects owed
    # The operator drops the bad table; the next run quarantines the committed batch's rejects, once.
    spark.sql("DROP TABLE lake.bronze.user_events_quarantine")
    report = medallion.run("user_events_etl")
    assert report.status == "success", [e["error"] for e in medallion.store.audit_entries() if e.get("error")]
    [_, bronze] = medallion.stage_audit("bronze_ingest")
    assert bronze["rows_read"] == 0
    assert bronze["details"]["quarantine_completed"] == {batch: raw_data.malformed_events}
    assert medallion.store.pending_batches("user_events_raw") == []
    assert len(lake_rows(medallion.lake, "bronze.user_events")) == good
    quarantined = lake_rows(medallion.lake, "bronze.user_events_quarantine")
    assert len(quarantined) == raw_data.malformed_events
    assert len({(r["_source_file"], r["_source_line"]) for r in quarantined}) == raw_data.malformed_events
    assert lake.exists(TableRef("lake", "silver", "user_events"))


TWO_WRITERS = """
import sys
from dagster import AssetKey, instance_for_test, materialize
from pyiceberg.catalog.rest import RestCatalog
from medallion_assets.definitions import build_definitions
defs = build_definitions(sys.argv[1], sys.argv[2], sys.argv[3])
with instance_for_test() as instance:
    result = materialize(list(defs.assets), resources=defs.resources, instance=instance,
                         selection=[AssetKey(["silver", "user_events"])], raise_on_error=False)
print(result.success)
"""


def test_two_processes_writing_silver_at_once_neither_lose_nor_duplicate_a_row(medallion, raw_data):
    report = medallion.run("user_events_etl")
    assert report.status == "success", [e["error"] for e in medallion.store.audit_entries() if e.get("error")]
    expected = sorted_rows(lake_rows(medallion.lake, "silver.user_events"), "event_id")
    medallion.set_retries(3, backoff_sec=0.5)
    argv = [
        sys.executable,
        "-c",
        TWO_WRITERS,
        medallion.store.url,
        str(medallion.lake),
        medallion.warehouse_url,
    ]
    writers = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    assert [writer.communicate(timeout=600)[0].strip().splitlines()[-1] for writer in writers] == ["True"] * 2
    assert sorted_rows(lake_rows(medallion.lake, "silver.user_events"), "event_id") == expected
    # Each writer published, or found (silver being incremental) nothing new to publish; none lost a row.
    published = [c for c in medallion.store.lake_commits("silver_user_events") if c["operation"] == "publish"]
    assert 1 <= len(published) <= 3
    audit = medallion.stage_audit("silver_clean")
    assert [e["status"] for e in audit if e["status"] == "success"] == ["success"] * 3
    assert all(
        e["error"].startswith("LakeCommitConflict: lake table lake.silver.user_events")
        for e in audit
        if e["status"] == "failed"
    )


def test_an_iceberg_rest_catalog_holds_the_tables_through_runs_and_a_rollback(
    medallion, rest_catalog, monkeypatch
):
    """Iceberg's own REST catalog server on loopback: the seed pipeline, an incremental batch and a rollback
    go through it, and pyiceberg reads back through the same catalog what Spark wrote."""
    monkeypatch.setenv("MEDALLION_LAKE_CATALOG", rest_catalog)
    lake = Lake.resolve(medallion.lake)
    catalog = lake.catalog("lake").metadata()
    assert isinstance(catalog, RestCatalog)

    first = medallion.run("user_events_etl")
    assert first.status == "success", first
    assert {name for _, name in catalog.list_tables("silver")} == {"user_events", "user_events_quarantine"}
    [silver] = medallion.stage_audit("silver_clean")
    info = table_info(lake, SILVER)
    assert info is not None and str(info.current_snapshot_id) == silver["details"]["snapshot_id"]
    assert not info.location.startswith(medallion.lake.as_uri())  # the server placed it, in its warehouse
    silver_1 = info.current_snapshot_id
    rows_1 = sorted_rows(lake_rows(medallion.lake, "silver.user_events"), "event_id")
    gold_1 = sorted_rows(lake_rows(medallion.lake, "gold.daily_user_events"), "event_date")
    assert len(rows_1) == silver["rows_written"] and gold_1

    add_new_events(5)
    second = medallion.run("user_events_etl")
    assert second.status == "success", second
    silver_run = next(asset for asset in second.assets if asset.key == "silver/user_events")
    assert silver_run.mode == "incremental", silver_run
    assert silver_run.snapshot_id == table_info(lake, SILVER).current_snapshot_id != silver_1
    assert len(lake_rows(medallion.lake, "silver.user_events")) == len(rows_1) + 5

    moved = rollback(
        medallion.store,
        lake,
        "silver_user_events",
        str(silver_1),
        cascade=True,
        warehouse_url=medallion.warehouse_url,
    )
    assert {m.dataset for m in moved} == {"silver_user_events", "gold_daily_user_events"}
    assert catalog.load_table(("silver", "user_events")).current_snapshot().snapshot_id == silver_1
    assert sorted_rows(lake_rows(medallion.lake, "silver.user_events"), "event_id") == rows_1
    assert sorted_rows(lake_rows(medallion.lake, "gold.daily_user_events"), "event_date") == gold_1


def test_the_glue_data_catalog_holds_the_tables_on_s3(medallion, s3_endpoint, monkeypatch, tmp_path):
    """The AWS path: tables in the Glue Data Catalog, files on S3 through Iceberg's S3FileIO, both the
    loopback moto server's; pyiceberg reads them through Glue too."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_GLUE", s3_endpoint)
    monkeypatch.setenv("MEDALLION_LAKE_CATALOG", "glue")
    boto3.client("s3").create_bucket(Bucket="medallion-lake")
    lake = Lake.resolve("s3://medallion-lake/warehouse")
    defs = build_definitions(medallion.store.url, lake.root, medallion.warehouse_url)
    with instance_for_test() as instance:
        report = run_pipeline(defs, medallion.store.snapshot(), medallion.store, "user_events_etl", instance)
    assert report.status == "success"
    glue = boto3.client("glue")
    assert {t["Name"] for t in glue.get_tables(DatabaseName="silver")["TableList"]} == {
        "user_events",
        "user_events_quarantine",
    }
    [silver] = medallion.stage_audit("silver_clean")
    rows = lake.catalog("lake").metadata().load_table(("silver", "user_events")).scan().to_arrow()
    assert rows.num_rows == silver["rows_written"]
    info = table_info(lake, SILVER)
    assert info is not None and info.location == "s3://medallion-lake/warehouse/silver.db/user_events"
    assert str(info.current_snapshot_id) == silver["details"]["snapshot_id"]
    # The same session then serves a lake on the default catalog: none of Glue's settings stays behind.
    monkeypatch.delenv("MEDALLION_LAKE_CATALOG")
    (tmp_path / "local").mkdir()
    report = Medallion.seeded(tmp_path / "local").run("user_events_etl")
    assert report.status == "success", report
