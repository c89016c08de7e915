"""Operating the lake's Iceberg tables: rollback (by snapshot, by run, refused, cascaded, by a healing rule),
maintenance from catalog rows (compaction, snapshot expiry, schedules), and migration of a parquet lake of
the old layout. Real Spark, Iceberg, S3 API and Dagster definitions."""

from __future__ import annotations

import json
import os
import textwrap
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from dagster import AssetCheckKey, AssetKey, build_sensor_context, instance_for_test

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.models import HealingAction
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.cli.common import EXIT_CONFIGURATION
from medallion_assets.cli.main import main
from medallion_assets.control.healing.remedies import ACTIONS, Fault
from medallion_assets.control.healing.rules import heal
from medallion_assets.control.steering.maintenance import cron_problem, run_maintenance
from medallion_assets.control.steering.rollback import RollbackRefused, WarehouseNotReloaded, rollback
from medallion_assets.definitions import build_definitions
from medallion_assets.loading import validate_files
from medallion_assets.runner import PipelineReport, run_pipeline
from medallion_assets.storage.lake import history
from medallion_assets.storage.lake.layout import table_of
from medallion_assets.storage.lake.maintenance import LakeMaintenance
from medallion_assets.storage.lake.metadata import current_snapshot_id
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables
from tests.conftest import SEED, Medallion
from tests.lake import add_new_events, lake_rows

BRONZE, SILVER, GOLD = "bronze_user_events", "silver_user_events", "gold_daily_user_events"


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True, default=str))


def _current(medallion: Medallion, dataset: str) -> int:
    table = table_of(medallion.store.snapshot().targets[dataset])
    snapshot_id = current_snapshot_id(Lake.resolve(medallion.lake), table)
    assert snapshot_id is not None
    return snapshot_id


def _cli(medallion: Medallion, *arguments: str):
    env = {
        "MEDALLION_CATALOG_URL": medallion.store.url,
        "MEDALLION_LAKE_URL": str(medallion.lake),
        "MEDALLION_WAREHOUSE_URL": medallion.warehouse_url,
    }
    return CliRunner().invoke(main, list(arguments), env=env)


def test_rollback_by_snapshot_and_run_refused_cascaded_healed_and_audited(medallion):
    store, lake = medallion.store, Lake.resolve(medallion.lake)
    assert medallion.run("user_events_etl").status == "success"
    bronze_1, silver_1 = _current(medallion, BRONZE), _current(medallion, SILVER)
    rows_silver_1 = _sorted(medallion.rows("silver.user_events"))
    rows_gold_1 = _sorted(medallion.rows("gold.daily_user_events"))
    rows_bronze_1 = len(medallion.rows("bronze.user_events"))
    run_1 = store.lake_commits(SILVER)[-1]["run_id"]

    add_new_events()
    report_2 = medallion.run("user_events_etl")
    assert report_2.status == "success"
    bronze_2, silver_2 = _current(medallion, BRONZE), _current(medallion, SILVER)
    # The run's report names each asset's published version.
    published = {asset.key: asset.snapshot_id for asset in report_2.assets}
    assert published["bronze/user_events"] == bronze_2 and published["silver/user_events"] == silver_2
    run_2 = store.lake_commits(BRONZE)[-1]["run_id"]
    assert bronze_2 != bronze_1 and run_2 != run_1
    assert len(medallion.rows("silver.user_events")) == len(rows_silver_1) + 5
    assert store.lake_commits(SILVER)[-1]["inputs"] == {BRONZE: bronze_2}

    # Every bad input is named.
    with pytest.raises(RollbackRefused, match="unknown dataset 'no_such'"):
        rollback(store, lake, "no_such", str(bronze_1))
    with pytest.raises(
        RollbackRefused, match=r"snapshot 12345 is not in the history of lake table lake\.bronze"
    ):
        rollback(store, lake, BRONZE, "12345")
    with pytest.raises(RollbackRefused, match=f"run no-such-run committed no version of {SILVER}"):
        rollback(store, lake, SILVER, "no-such-run")

    # A downstream table built on a later version is in the way, named, unless --cascade.
    with pytest.raises(RollbackRefused, match=f"{SILVER} \\(its current version"):
        rollback(store, lake, BRONZE, str(bronze_1))
    refused = _cli(medallion, "rollback", SILVER, "--to", run_1)
    assert refused.exit_code == 2, refused.output
    assert GOLD in refused.output and "--cascade" in refused.output
    assert _current(medallion, BRONZE) == bronze_2  # nothing moved

    # By run id, with the downstream gold table following.
    done = _cli(medallion, "rollback", SILVER, "--to", run_1, "--cascade", "--json")
    assert done.exit_code == 0, done.output
    moved = {m["dataset"]: m for m in json.loads(done.output)}
    assert set(moved) == {SILVER, GOLD} and moved[SILVER]["to_snapshot"] == silver_1
    assert _sorted(medallion.rows("silver.user_events")) == rows_silver_1
    assert _sorted(medallion.rows("gold.daily_user_events")) == rows_gold_1

    # The history shows both versions: main back at the first, the second rolled away from, each with its
    # run, rows and the bronze version it was built from.
    listed = _cli(medallion, "lake", "history", SILVER, "--json")
    assert listed.exit_code == 0, listed.output
    found = json.loads(listed.output)
    assert found["table"] == "lake.silver.user_events" and found["main"] == silver_1
    versions = {v["snapshot_id"]: v for v in found["versions"]}
    order = [v["snapshot_id"] for v in found["versions"]]
    assert order[0] == silver_2 and order.index(silver_1) > 0  # newest first
    assert versions[silver_1] | {"committed_at": None} == {
        "snapshot_id": silver_1,
        "parent_id": versions[silver_1]["parent_id"],
        "committed_at": None,
        "operation": versions[silver_1]["operation"],
        "run_id": run_1,
        "batch_id": None,
        "rows": len(rows_silver_1),
        "built_from": {BRONZE: bronze_1},
        "refs": ["main"],
        "on_main": True,
    }
    assert versions[silver_2]["built_from"] == {BRONZE: bronze_2}
    assert versions[silver_2]["rows"] == len(rows_silver_1) + 5 and not versions[silver_2]["on_main"]
    text = _cli(medallion, "lake", "history", SILVER)
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert (
        lines[0]
        == f"{SILVER} (lake.silver.user_events): main at snapshot {silver_1}, {len(versions)} snapshot(s)"
    )
    second = next(line for line in lines if f" {silver_2} " in line)
    first = next(line for line in lines if f" {silver_1} " in line)
    assert second.startswith("  ") and f"{BRONZE}@{bronze_2}" in second
    assert first.startswith("* ") and run_1 in first and first.endswith(f"{BRONZE}@{bronze_1}  [main]")
    bronze_history = json.loads(_cli(medallion, "lake", "history", BRONZE, "--json").output)
    assert [v["snapshot_id"] for v in bronze_history["versions"]] == [bronze_2, bronze_1]
    assert all(v["batch_id"] and v["run_id"] for v in bronze_history["versions"])
    unknown = _cli(medallion, "lake", "history", "no_such")
    assert unknown.exit_code == 2 and "unknown dataset 'no_such'; datasets: " in unknown.output

    # A healing rule rolls back the layer whose checks failed, to its previous published version.
    assert "rollback_dataset" in ACTIONS
    store.upsert(
        {
            "healing_actions": [
                HealingAction(
                    healing_id="bronze_checks_rollback",
                    message_pattern="blocking rule",
                    layer="bronze",
                    action="rollback_dataset",
                    params={"cascade": True},
                )
            ]
        }
    )
    stage = next(s for s in store.snapshot().stages() if s.target_id == BRONZE)
    fault = Fault.of(RuntimeError("blocking rule(s) failed: not_empty"), stage, "bronze", 1, run_2)
    remedy = heal(store, fault, lake, medallion.warehouse_url)
    assert remedy is not None and remedy.outcome == "give_up", remedy
    assert f"{BRONZE} {bronze_2} → {bronze_1}" in remedy.detail
    assert _current(medallion, BRONZE) == bronze_1
    assert len(medallion.rows("bronze.user_events")) == rows_bronze_1

    # By snapshot id, forward again: the later version is still in the history.
    rollback(store, lake, BRONZE, str(bronze_2))
    assert len(medallion.rows("bronze.user_events")) == rows_bronze_1 + 5

    audits = store.audit_entries(event="rollback")
    assert [(a["dataset"], a["details"]["to_snapshot"]) for a in audits] == [
        (GOLD, audits[0]["details"]["to_snapshot"]),
        (SILVER, silver_1),
        (BRONZE, bronze_1),
        (BRONZE, bronze_2),
    ]
    assert audits[0]["details"]["cascaded_from"] == SILVER
    assert audits[2]["details"]["by"] == "healing rule bronze_checks_rollback"
    assert store.audit_entries(event="healing")[-1]["status"] == "give_up"
    commits = store.lake_commits(SILVER)
    assert commits[-1]["operation"] == "rollback" and commits[-1]["snapshot_id"] == silver_1
    assert commits[-1]["inputs"] == {BRONZE: bronze_1}


def _latest_checks(instance, key: AssetKey) -> dict:
    """The latest execution of each check of the asset, as the UI reads it."""
    checks = [AssetCheckKey(key, name) for name in CHECKS[key]]
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(checks)
    return {check.name: record for check, record in latest.items()}


def _metadata(record) -> dict:
    assert record.evaluation is not None
    return {name: value.value for name, value in record.evaluation.metadata.items()}


CHECKS = {
    AssetKey(["bronze", "user_events"]): ["row_count", "dq_rate"],
    AssetKey(["silver", "user_events"]): [
        "not_null_event_id",
        "unique_event_id",
        "not_null_event_ts",
        "accepted_values_event_type",
        "range_value",
        "dq_rate",
    ],
    AssetKey(["gold", "daily_user_events"]): [
        "row_count",
        "not_null_event_date",
        "unique_event_date",
        "range_total_events",
        "schema_match",
        "dq_rate",
        "warehouse_matches_lake",
    ],
}


def test_a_run_with_nothing_new_keeps_its_verdicts_and_a_rollback_reloads_the_warehouse_or_says_it_is_stale(
    medallion,
):
    """Runs on one Dagster instance, read as the UI reads it: a run that finds nothing new reports the
    verdicts of the versions it left as they were; a rollback reloads the warehouse, and when it cannot,
    status and the control sensor's warehouse_matches_lake check name both versions until they agree."""

    def served() -> list[tuple]:
        return sorted(tuple(r.values()) for r in medallion.gold("analytics.daily_user_events"))

    def in_lake() -> list[tuple]:
        return sorted(tuple(r.values()) for r in medallion.rows("gold.daily_user_events"))

    defs = build_definitions(medallion.store.url, str(medallion.lake), medallion.warehouse_url)
    control = defs.resolve_sensor_def("medallion_control")
    gold_check = AssetCheckKey(AssetKey(["gold", "daily_user_events"]), "warehouse_matches_lake")
    with instance_for_test() as instance:

        def run() -> PipelineReport:
            return run_pipeline(
                defs, medallion.store.snapshot(), medallion.store, "user_events_etl", instance
            )

        def tick() -> list:
            control.evaluate_tick(build_sensor_context(instance=instance, definitions=defs))
            return list(instance.event_log_storage.get_asset_check_execution_history(gold_check, limit=10))

        assert run().status == "success"
        silver_1, gold_1, rows_1 = _current(medallion, SILVER), _current(medallion, GOLD), in_lake()
        add_new_events()
        assert run().status == "success"
        versions = {dataset: _current(medallion, dataset) for dataset in (BRONZE, SILVER, GOLD)}
        gold_2, rows_2 = versions[GOLD], in_lake()
        assert served() == rows_2 != rows_1
        judged = {key: _latest_checks(instance, key) for key in CHECKS}
        silver_key = AssetKey(["silver", "user_events"])
        # An incremental run judges its own rows; the plotted count is the table's.
        assert _metadata(judged[silver_key]["not_null_event_id"]) | {"message": ""} == {
            "null_count": 0,
            "row_count": len(medallion.rows("silver.user_events")),
            "rows_checked_this_run": 5,
            "failing_rows": 0,
            "message": "",
        }

        # Nothing new: every check reports its version's verdict, passed, saying the version is unchanged.
        unchanged = run()
        assert unchanged.status == "success"
        unchanged_run = instance.get_runs(limit=1)[0].run_id
        assert [asset.rows for asset in unchanged.assets] == [0, 0, 0]
        assert {dataset: _current(medallion, dataset) for dataset in versions} == versions
        tables = {
            "bronze": "bronze.user_events",
            "silver": "silver.user_events",
            "gold": "gold.daily_user_events",
        }
        for (key, names), dataset in zip(CHECKS.items(), versions, strict=True):
            latest = _latest_checks(instance, key)
            assert {name: latest[name].status.value for name in names} == dict.fromkeys(names, "SUCCEEDED")
            report = next(asset for asset in unchanged.assets if asset.key == key.to_user_string())
            assert {c["name"]: c["passed"] for c in report.checks} == dict.fromkeys(names, True)
            assert report.unchanged_since == versions[dataset]  # in `run --json`, and said by `run`
            for name in names:
                assert latest[name].run_id == unchanged_run
                metadata = _metadata(latest[name])
                assert metadata["unchanged"] == f"unchanged since snapshot {versions[dataset]}"
                if name not in ("dq_rate", "warehouse_matches_lake"):  # a rule: its verdict on the version
                    assert metadata["message"] == _metadata(judged[key][name])["message"]
                if "row_count" in metadata:
                    assert metadata["row_count"] == len(medallion.rows(tables[key.path[0]]))
                    assert metadata["rows_checked_this_run"] == 0
        assert [(r.status.value, _metadata(r)["message"]) for r in tick()][0] == (
            "SUCCEEDED",
            f"warehouse table analytics.daily_user_events holds lake snapshot {gold_2}, the lake's current "
            "version",
        )

        # Gold alone, back and forth: the warehouse follows in the same command.
        done = _cli(medallion, "rollback", GOLD, "--to", str(gold_1))
        assert done.exit_code == 0, done.output
        assert done.output == (
            f"{GOLD} (lake.gold.daily_user_events): snapshot {gold_2} → {gold_1}; warehouse "
            f"analytics.daily_user_events reloaded: {len(rows_1)} rows\n"
        )
        assert served() == in_lake() == rows_1
        assert _cli(medallion, "rollback", GOLD, "--to", str(gold_2)).exit_code == 0
        assert served() == rows_2

        # Silver with --cascade: gold follows it back, and so does the warehouse.
        done = _cli(medallion, "rollback", SILVER, "--to", str(silver_1), "--cascade", "--json")
        assert done.exit_code == 0, done.output
        moved = {m["dataset"]: m for m in json.loads(done.output)}
        assert moved[GOLD]["warehouse_table"] == "analytics.daily_user_events"
        assert moved[GOLD]["warehouse_rows"] == len(rows_1)
        assert served() == in_lake() == rows_1
        status = _cli(medallion, "status")
        assert f"FRESH   {GOLD}" in status.output and f"STALE   {GOLD}" not in status.output, status.output
        agreeing = tick()
        assert (agreeing[0].status.value, _metadata(agreeing[0])["lake_snapshot"]) == (
            "SUCCEEDED",
            str(gold_1),
        )

        # A warehouse that cannot be reloaded: the lake moved, and status and the UI say it is behind.
        with pytest.raises(WarehouseNotReloaded) as not_reloaded:
            rollback(
                medallion.store,
                Lake.resolve(medallion.lake),
                GOLD,
                str(gold_2),
                warehouse_url="postgresql://medallion@127.0.0.1:1/closed",  # nothing listens on port 1
            )
        assert str(not_reloaded.value) == (
            f"rolled back in the lake ({GOLD} to snapshot {gold_2}), but the warehouse could not be reloaded "
            "(connecting to medallion@127.0.0.1:1/closed failed: OperationalError: connection to server at "
            '"127.0.0.1", port 1 failed: Connection refused): analytics.daily_user_events may still serve '
            "the version it held, which `medallion status` shows as stale; run the rollback again once the "
            "warehouse answers"
        )
        assert _current(medallion, GOLD) == gold_2 and served() == rows_1
        behind = (
            f"warehouse table analytics.daily_user_events holds lake snapshot {gold_1}; the lake's current "
            f"version is snapshot {gold_2} (rollback)"
        )
        status = _cli(medallion, "status")
        assert f"  STALE   {GOLD}: {behind}" in status.output.splitlines(), status.output
        stale = tick()
        assert stale[0].status.value == "FAILED"
        assert _metadata(stale[0]) == {
            "message": behind,
            "lake_snapshot": str(gold_2),
            "warehouse_snapshot": str(gold_1),
        }
        assert len(tick()) == len(stale)  # said once, not on every tick

        # Once the warehouse answers, the rollback run again reloads it, and the check passes again.
        assert _cli(medallion, "rollback", GOLD, "--to", str(gold_2)).exit_code == 0
        assert served() == rows_2
        assert tick()[0].status.value == "SUCCEEDED"


def test_maintenance_rows_compact_expire_and_schedule(medallion, spark, tmp_path):
    store, lake_root = medallion.store, str(medallion.lake)
    rows = tmp_path / "maintenance.yaml"
    rows.write_text(
        textwrap.dedent(
            f"""\
            table_maintenance:
              - {{dataset: {SILVER}, compaction: binpack, expire_after_days: 1, keep_snapshots: 3,
                 remove_orphans_after_days: 3, schedule: "0 4 * * *"}}
              - {{dataset: default, compaction: none, schedule: "30 2 * * 0"}}
              - {{dataset: {GOLD}, enabled: false}}
            """
        )
    )
    medallion.load(rows)
    table = table_of(store.snapshot().targets[SILVER])
    lake = LakeTables(spark, Lake.resolve(lake_root))
    frame = spark.createDataFrame(
        [(f"e{i}", f"u{i % 3}", "view", datetime(2024, 1, 1, tzinfo=UTC), float(i)) for i in range(40)],
        "event_id string, user_id string, event_type string, event_ts timestamp, value double",
    )
    lake.ensure(table, frame.schema, None)
    for batch in range(8):  # many small appends: a file and a snapshot each
        lake.append(table, frame.where(frame.value % 8 == batch).coalesce(1), f"batch-{batch}")
    maintenance = LakeMaintenance(spark, lake.lake)
    assert maintenance.data_files(table) == 8 and maintenance.snapshot_count(table) == 8
    rows_before = _sorted(medallion.rows("silver.user_events"))
    # A file a crashed write left, four days old: an orphan. (Iceberg refuses to remove younger than a day.)
    orphan = medallion.lake / "silver" / "user_events" / "data" / "left-by-a-crash.parquet"
    orphan.write_bytes(b"PAR1")
    four_days_ago = (datetime.now(UTC) - timedelta(days=4)).timestamp()
    os.utime(orphan, (four_days_ago, four_days_ago))

    # Two days on, every snapshot is old enough to expire, but three stay.
    (report,) = run_maintenance(spark, store, lake.lake, [SILVER], now=datetime.now(UTC) + timedelta(days=2))
    assert report.status == "success", report.error
    assert report.reported["compaction"]["rewritten_data_files_count"] == 8
    assert report.reported["data_files_before"] == 8 and report.reported["data_files_after"] == 1
    assert maintenance.data_files(table) == 1
    assert report.reported["orphans"]["orphan_files_removed"] == 1 and not orphan.exists()
    assert maintenance.snapshot_count(table) == 3 == report.reported["snapshots_left"]
    assert _sorted(medallion.rows("silver.user_events")) == rows_before
    (audit,) = store.audit_entries(event="maintenance", dataset=SILVER)
    assert audit["status"] == "success" and audit["details"]["policy"] == SILVER
    assert audit["details"]["compaction"]["added_data_files_count"] == 1

    # Now, from the command line: the default row covers bronze, whose table is not written yet.
    result = CliRunner().invoke(
        main,
        ["lake", "maintain", SILVER, BRONZE],
        env={"MEDALLION_CATALOG_URL": store.url, "MEDALLION_LAKE_URL": lake_root},
    )
    assert result.exit_code == 0, result.output
    assert f"{BRONZE} (lake.bronze.user_events): skipped" in result.output
    assert maintenance.snapshot_count(table) == 3  # at least keep_snapshots, however old

    # A schedule per distinct cron of the enabled rows, an op per dataset under its target system's pool.
    defs = build_definitions(store.url, lake_root, medallion.warehouse_url)
    schedules = {s.cron_schedule: s for s in defs.get_repository_def().schedule_defs}
    assert set(schedules) == {"0 4 * * *", "30 2 * * 0"}
    silver_job = schedules["0 4 * * *"].job
    assert [node.name for node in silver_job.graph.node_defs] == [f"maintain_{SILVER}"]
    weekly = {node.name: node for node in schedules["30 2 * * 0"].job.graph.node_defs}
    assert f"maintain_{BRONZE}" in weekly and f"maintain_{GOLD}" not in weekly  # gold's own row: disabled
    assert weekly[f"maintain_{BRONZE}"].pool == "target_lake"


@pytest.mark.unit
def test_maintenance_rows_are_checked_at_load(tmp_path):
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "table_maintenance:\n"
        "  - {dataset: default}\n"
        "  - {dataset: no_such_dataset}\n"
        "  - {dataset: silver_user_events, schedule: '61 * * * *'}\n"
        "  - {dataset: gold_daily_user_events, compaction: sort}\n"
    )
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [SEED, bad])
    problems = [str(problem) for problem in refused.value.problems]
    assert problems == [
        f"{bad}:3: table_maintenance[no_such_dataset].dataset: 'no_such_dataset' is neither `default` nor a "
        "lake target of the catalog",
        f"{bad}:4: table_maintenance[silver_user_events].schedule: cron expression '61 * * * *': minute 61 "
        "is outside 0-59",
        f"{bad}:5: table_maintenance[gold_daily_user_events].compaction: sort compaction needs a sort order: "
        "gold_daily_user_events has no lake_table.sort_by",
    ]
    assert cron_problem("@daily") is None and cron_problem("*/15 1-5 * JAN-MAR MON,FRI") is None
    assert "has 4 field(s), not 5" in (cron_problem("0 3 * *") or "")


def test_migrate_parquet_lake_in_place_then_run_on_it(medallion, spark, tmp_path):
    assert medallion.run("user_events_etl").status == "success"
    lake = LakeTables(spark, Lake.resolve(medallion.lake))
    targets = medallion.store.snapshot().targets
    bronze = lake.read(table_of(targets[BRONZE]))
    silver = lake.read(table_of(targets[SILVER]))
    gold = lake.read(table_of(targets[GOLD]))
    # The old layout: <lake>/<layer>/<target_id>/, bronze in a folder per batch, quarantine apart.
    old = tmp_path / "old_lake"
    for number, batch in enumerate(("20240101T000000-aaaaaaaa", "20240102T000000-bbbbbbbb")):
        part = bronze.where(bronze._source_line % 2 == number)
        part.write.parquet(f"{old}/bronze/{BRONZE}/medallion_batch={batch}")
    silver.write.parquet(f"{old}/silver/{SILVER}")
    gold.write.parquet(f"{old}/gold/{GOLD}")
    rejects = spark.createDataFrame(
        [("s3://medallion-raw/user_events/a.jsonl", 7, datetime(2024, 1, 1, tzinfo=UTC), "bad value", "x")],
        "_source_file string, _source_line long, _ingested_at timestamp, reason string, raw string",
    )
    rejects.write.parquet(f"{old}/_quarantine/{SILVER}")
    counts = {"bronze": bronze.count(), "silver": silver.count(), "gold": gold.count()}

    migrated = CatalogStore(f"sqlite:///{tmp_path}/migrated.db")
    migrated.migrate()
    installation = Medallion(migrated, old, f"duckdb:///{tmp_path}/migrated.duckdb")
    installation.load(SEED)  # the same catalog YAML, unchanged
    result = _cli(installation, "lake", "migrate")
    assert result.exit_code == 0, result.output
    assert f"→ lake.bronze.user_events: migrated, {counts['bronze']} row(s) before" in result.output
    assert len(installation.rows("bronze.user_events")) == counts["bronze"]
    assert len(installation.rows("silver.user_events")) == counts["silver"]
    assert len(installation.rows("gold.daily_user_events")) == counts["gold"]
    assert len(installation.rows("silver.user_events_quarantine")) == 1
    assert len(lake_rows(old, "bronze.user_events")) == counts["bronze"]
    bronze_table = table_of(targets[BRONZE])
    assert (
        len(
            history.lineage(
                Lake.resolve(old), bronze_table, current_snapshot_id(Lake.resolve(old), bronze_table)
            )
        )
        == 2
    )
    assert {a["status"] for a in migrated.audit_entries(event="lake_migration")} == {"migrated"}
    # In place: the table's files are the old folders' files.
    LakeTables(spark, Lake.resolve(old))  # the session's catalog `lake` is the old lake's again
    files = spark.table(f"{bronze_table.sql}.`files`").collect()
    assert all(f"/bronze/{BRONZE}/medallion_batch=" in row.file_path for row in files)

    again = _cli(installation, "lake", "migrate")
    assert again.exit_code == 0 and "migrated," not in again.output and "already" in again.output

    # A normal run on top: this catalog has no bookmarks, so bronze takes the raw objects in once more.
    assert installation.run("user_events_etl").status == "success"
    assert len(installation.rows("bronze.user_events")) == 2 * counts["bronze"]
    assert len(installation.rows("silver.user_events")) == counts["silver"]


def test_lake_history_names_an_unknown_dataset_a_table_not_yet_written_and_a_catalog_down(tmp_path):
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    env = {"MEDALLION_CATALOG_URL": store.url, "MEDALLION_LAKE_URL": str(tmp_path / "lake")}

    def history_of(dataset: str, **more: str):
        return CliRunner().invoke(main, ["lake", "history", dataset], env={**env, **more})

    unknown = history_of("no_such")
    assert unknown.exit_code == 2 and unknown.output.startswith("unknown dataset 'no_such'; datasets: ")
    not_yet = history_of(SILVER)
    assert (not_yet.exit_code, not_yet.output) == (
        2,
        f"{SILVER}: lake table lake.silver.user_events does not exist (yet)\n",
    )
    down = history_of(SILVER, MEDALLION_LAKE_CATALOG="postgresql://nobody:secret@127.0.0.1:9/lake")
    assert down.exit_code == EXIT_CONFIGURATION  # as every command says a service it cannot reach
    assert down.output.startswith(
        "MEDALLION_LAKE_CATALOG=postgresql://nobody:***@127.0.0.1:9/lake: the lake catalog cannot be read: "
    )
    assert "secret" not in down.output and "Traceback" not in down.output
