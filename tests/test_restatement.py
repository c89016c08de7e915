"""Restating a range of days (`medallion run PIPELINE --restate FROM:TO [--from DATASET]`, or the run tags
`medallion/restate` and `medallion/restate_from` from the launchpad): those days of the silver and gold tables
partitioned by day are recomputed from bronze in one commit per table that rewrites only their partitions,
and equal a full refresh; a bad range is refused in one line before anything runs. And the runs of an
environment's preview carry the tag `medallion/env`, read back from the Dagster instance."""

from __future__ import annotations

import json
import shutil
from datetime import date, timedelta
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner, Result
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from medallion_assets.catalog.store import CatalogStore
from medallion_assets.cli.main import main
from medallion_assets.engine.refresh import FULL_REFRESH_TAG
from medallion_assets.engine.restatement import RESTATE_TAG
from medallion_assets.naming import ENV_TAG
from medallion_assets.sample_data import write_sample_data
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables
from tests.conftest import RAW, SEED, Medallion
from tests.lake import lake_snapshots

PIPELINE = "user_events_etl"
# The seed's user events, silver merged by day (`incremental: {by: event_ts}`) and gold kept by day and merged
# into the warehouse: both tables partitioned by day.
KEPT_BY_DAY = {
    '    lake_table: {partition_by: ["days(event_ts)"]}\n': (
        '    lake_table: {partition_by: ["days(event_ts)"]}\n    incremental: {by: event_ts}\n'
    ),
    "    load_mode: replace\n": "    load_mode: merge\n    lake_table: {partition_by: [event_date]}\n",
}
# Each table partitioned by day, with its day and the columns its rows are sorted by.
TABLES = {
    "silver.user_events": ("CAST(event_ts AS DATE)", "event_id"),
    "gold.daily_user_events": ("event_date", "event_date"),
}
WAREHOUSE_TABLE = "analytics.daily_user_events"


def catalog_folder(folder: Path, edits: dict[str, str]) -> Path:
    """The seed's catalog files in `folder`, user_events_etl.yaml edited (`edits`: text → its replacement)."""
    shutil.copytree(SEED, folder)
    events = folder / "user_events_etl.yaml"
    text = events.read_text()
    for old, new in edits.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    events.write_text(text)
    return folder


@pytest.fixture(scope="module")
def installation(tmp_path_factory, spark, s3_endpoint) -> tuple[Medallion, list[date]]:
    """The seed with user events kept by day, after two runs: the second brought a copy of an event on the
    next day, which a merge by day cannot find (it searches only the copy's day), so silver holds the event
    twice and gold counts it twice on that day: what a restatement of those two days repairs."""
    folder = tmp_path_factory.mktemp("restatement")
    bucket = boto3.resource("s3").Bucket("medallion-raw")
    if bucket.creation_date is None:
        bucket.create()
    bucket.objects.all().delete()
    write_sample_data(RAW, rows=3000, lines_per_file=1000)
    store = CatalogStore(f"sqlite:///{folder}/catalog.db")
    store.migrate()
    medallion = Medallion(store, folder / "lake", f"duckdb:///{folder}/warehouse.duckdb")
    medallion.load(catalog_folder(folder / "catalog", KEPT_BY_DAY))
    assert medallion.run(PIPELINE).status == "success"
    event = min(medallion.rows("silver.user_events"), key=lambda row: row["event_id"])
    day = event["event_ts"].date()
    copy_day = day + timedelta(days=1) if day < date(2026, 11, 7) else day - timedelta(days=1)
    copy = {**event, "event_ts": f"{copy_day}T12:00:00Z"}
    boto3.client("s3").put_object(
        Bucket="medallion-raw", Key="user_events/copy.jsonl", Body=json.dumps(copy, default=str).encode()
    )
    assert medallion.run(PIPELINE).status == "success"
    twice = [row for row in medallion.rows("silver.user_events") if row["event_id"] == event["event_id"]]
    assert len(twice) == 2
    return medallion, sorted([day, copy_day])


def cli(medallion: Medallion, *args: str) -> Result:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDALLION_CATALOG_URL", medallion.store.url)
        patch.setenv("MEDALLION_LAKE_URL", str(medallion.lake))
        patch.setenv("MEDALLION_WAREHOUSE_URL", medallion.warehouse_url)
        return CliRunner().invoke(main, list(args))


def files_by_day(spark, medallion: Medallion, table: str) -> dict[date, set[str]]:
    """The data files of each day of a lake table (Iceberg's `_file` metadata column)."""
    LakeTables(spark, Lake.resolve(medallion.lake))  # the session's catalog `lake` is this installation's
    namespace, name = table.split(".")
    day = TABLES[table][0]
    rows = spark.sql(f"SELECT DISTINCT {day} AS day, _file FROM {TableRef('lake', namespace, name).sql}")
    found: dict[date, set[str]] = {}
    for row in rows.collect():
        found.setdefault(row["day"], set()).add(row["_file"])
    return found


def current_summary(medallion: Medallion, table: str) -> dict[str, str]:
    catalog = Lake.resolve(medallion.lake).catalog("lake").metadata()
    snapshot = catalog.load_table(tuple(table.split("."))).current_snapshot()
    return {"operation": snapshot.summary.operation.value, **snapshot.summary.additional_properties}


def sorted_rows(medallion: Medallion, table: str) -> list[dict]:
    return sorted(medallion.rows(table), key=lambda row: str(row[TABLES[table][1]]))


def test_a_restatement_rewrites_only_those_days_in_one_commit_per_table_and_equals_a_full_refresh(
    installation: tuple[Medallion, list[date]], spark
) -> None:
    medallion, (first, last) = installation
    files_before = {table: files_by_day(spark, medallion, table) for table in TABLES}
    snapshots_before = {
        table: lake_snapshots(medallion.lake, table) for table in (*TABLES, "bronze.user_events")
    }
    wrong_gold = sorted_rows(medallion, "gold.daily_user_events")

    result = cli(medallion, "run", PIPELINE, "--restate", f"{first}:{last}")

    assert result.exit_code == 0, result.output
    asked = f"a restatement of {first} to {last} was asked for by the run tags {RESTATE_TAG}={first}:{last}"
    assert [line for line in result.stdout.splitlines() if line.startswith("    restatement")] == [
        f"    restatement: {asked}: recomputes those days of event_ts",
        f"    restatement: {asked}: recomputes those days of event_date",
    ]
    # One commit per table, bronze untouched (no new object: it ingests nothing).
    assert lake_snapshots(medallion.lake, "bronze.user_events") == snapshots_before["bronze.user_events"]
    for table in TABLES:
        assert lake_snapshots(medallion.lake, table)[:-1] == snapshots_before[table], table
        files_after = files_by_day(spark, medallion, table)
        restated = [day for day in files_before[table] if first <= day <= last]
        assert len(restated) == 2, table
        # Only those days' partitions were rewritten: their files replaced, every other day's kept.
        for day, files in files_before[table].items():
            if day in restated:
                assert files.isdisjoint(files_after[day]), (table, day)
            else:
                assert files_after[day] == files, (table, day)
        summary = current_summary(medallion, table)
        assert summary["operation"] == "overwrite", table
        assert summary["changed-partition-count"] == "2", table
        assert int(summary["deleted-data-files"]) == sum(len(files_before[table][d]) for d in restated), table
    assert sorted_rows(medallion, "gold.daily_user_events") != wrong_gold
    restated_rows = {table: sorted_rows(medallion, table) for table in TABLES}
    warehouse = medallion.gold(WAREHOUSE_TABLE)
    # The warehouse took those days' rows, merged in one transaction.
    load = medallion.store.audit_entries(event="warehouse_load")[-1]
    assert load["details"]["groups_only"] is True
    assert warehouse == restated_rows["gold.daily_user_events"]

    # A full refresh makes the same rows, in the lake and in the warehouse.
    refreshed = medallion.run(PIPELINE, tags={FULL_REFRESH_TAG: "*"})
    assert [asset.mode for asset in refreshed.assets] == [None, "full", "full"]
    assert {table: sorted_rows(medallion, table) for table in TABLES} == restated_rows
    assert medallion.gold(WAREHOUSE_TABLE) == warehouse


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (
            ["--restate", "2026-11-02"],
            "medallion/restate='2026-11-02' is not a range of days: give FROM:TO, two dates as YYYY-MM-DD, "
            "e.g. 2026-11-01:2026-11-07",
        ),
        (
            ["--restate", "2026-11-05:2026-11-01"],
            "medallion/restate='2026-11-05:2026-11-01' is reversed: 2026-11-01 is before 2026-11-05",
        ),
        (
            ["--restate", "2026-11-01:2026-11-02", "--from", "bronze_user_events"],
            "medallion/restate_from='bronze_user_events' is not partitioned by day; datasets of "
            "user_events_etl partitioned by day: silver_user_events, gold_daily_user_events",
        ),
        (
            ["--restate", "2026-11-01:2026-11-02", "--from", "silver_orders"],
            "medallion/restate_from='silver_orders' is not a dataset of user_events_etl; datasets of "
            "user_events_etl partitioned by day: silver_user_events, gold_daily_user_events",
        ),
        (
            ["--restate", "2026-11-01:2026-11-02", "--full-refresh"],
            "--from needs one of --full-refresh and --restate, which exclude each other",
        ),
    ],
)
def test_a_bad_range_is_refused_in_one_line_before_anything_runs(
    installation: tuple[Medallion, list[date]], args: list[str], refusal: str
) -> None:
    medallion, _ = installation
    audited = len(medallion.store.audit_entries())
    result = cli(medallion, "run", PIPELINE, *args)
    assert (result.exit_code, result.stderr) == (2, refusal + "\n")
    assert len(medallion.store.audit_entries()) == audited


def test_restatement_needs_a_pipeline_kept_by_day_and_a_tag_from_the_launchpad_is_checked(
    installation: tuple[Medallion, list[date]],
) -> None:
    medallion, _ = installation
    result = cli(medallion, "run", "orders_etl", "--restate", "2026-11-01:2026-11-02")
    assert (result.exit_code, result.stderr) == (
        2,
        "pipeline orders_etl has no silver or gold dataset partitioned by day (lake_table: {partition_by: "
        '["days(column)"]}): nothing to restate\n',
    )
    # From the launchpad, a hostile tag: every step refuses it before writing anything.
    commits = {d: medallion.store.lake_commits(d) for d in ("silver_user_events", "gold_daily_user_events")}
    report = medallion.run(PIPELINE, tags={RESTATE_TAG: "2026-11-01:2026-11-02'; DROP TABLE audit_log"})
    assert report.status == "failed"
    assert [(asset.key, asset.status) for asset in report.assets] == [
        ("bronze/user_events", "failed"),
        ("silver/user_events", "skipped"),
        ("gold/daily_user_events", "skipped"),
    ]
    assert report.assets[0].reason == (
        'medallion/restate="2026-11-01:2026-11-02\'; DROP TABLE audit_log" is not a range of days: give '
        "FROM:TO, two dates as YYYY-MM-DD, e.g. 2026-11-01:2026-11-07"
    )
    assert {d: medallion.store.lake_commits(d) for d in commits} == commits


def test_the_runs_of_a_preview_carry_the_environment_tag(
    installation: tuple[Medallion, list[date]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    medallion, _ = installation
    changed = catalog_folder(
        tmp_path / "changed",
        {**KEPT_BY_DAY, "      GROUP BY 1\n": "      WHERE value > 0\n      GROUP BY 1\n"},
    )
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    (tmp_path / "dagster").mkdir()
    result = cli(medallion, "plan", str(changed), "--env", "review")
    assert result.exit_code == 1, result.output
    assert "environment review: 1 table(s) on branch env_review" in result.stdout
    with DagsterInstance.get() as instance:
        [run] = instance.get_runs(RunsFilter(tags={ENV_TAG: "review"}))
        assert (run.job_name, run.status, run.tags[ENV_TAG]) == (
            "medallion_env_preview",
            DagsterRunStatus.SUCCESS,
            "review",
        )
        assert instance.get_runs(RunsFilter(tags={ENV_TAG: "other"})) == []
