"""Previewing a catalog change in an environment (`medallion plan DIR --env NAME`), listing and dropping
environments: with real Spark, the seed's orders pipeline and its lake and warehouse."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner, Result

from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.change.plan import plan_schema
from medallion_assets.cli.main import main
from medallion_assets.storage.lake.layout import TableRef, table_of
from medallion_assets.storage.lake.metadata import load_table
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import STAGED_BRANCH_RETENTION_DAYS, LakeTables
from medallion_assets.storage.warehouse import warehouse_from_url
from tests.conftest import SEED, Medallion, fill_raw_bucket
from tests.fixtures import seed

GOLD_SQL = "      FROM silver_orders\n      GROUP BY 1, 2\n"
# A breaking change of one gold stage: it keeps only orders of 100 or more.
FILTERED_SQL = "      FROM silver_orders\n      WHERE amount >= 100\n      GROUP BY 1, 2\n"
# A non-breaking change of silver (a column added): silver and gold both rebuild, gold alone after.
SILVER_EDITS = [
    ("o.amount, c.country,\n", "o.amount, c.country, c.name AS customer_name,\n"),
    (
        'amount: "decimal(12,2)", country: string}',
        'amount: "decimal(12,2)", country: string, customer_name: string}',
    ),
]


def settings(medallion: Medallion) -> dict[str, str]:
    return {
        "MEDALLION_CATALOG_URL": medallion.store.url,
        "MEDALLION_LAKE_URL": str(medallion.lake),
        "MEDALLION_WAREHOUSE_URL": medallion.warehouse_url,
    }


def cli(medallion: Medallion, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    for name, value in settings(medallion).items():
        monkeypatch.setenv(name, value)
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def orders_ran(tmp_path_factory, spark, s3_endpoint) -> Medallion:
    """The seed after one run of orders_etl alone: customer_changes_etl, whose gold reads orders_etl's
    silver_orders, never ran. The tests that only preview share it (a preview leaves main as it is, and each
    drops its environment)."""
    fill_raw_bucket()
    medallion = Medallion.seeded(tmp_path_factory.mktemp("environments"))
    assert medallion.run("orders_etl").status == "success"
    return medallion


def edited_seed(folder: Path, silver_too: bool = False) -> Path:
    catalog = folder / "changed"
    shutil.copytree(SEED, catalog)
    orders = catalog / "orders_etl.yaml"
    edits = [(GOLD_SQL, FILTERED_SQL), *(SILVER_EDITS if silver_too else [])]
    for old, new in edits:
        assert orders.read_text().count(old) == 1
        orders.write_text(orders.read_text().replace(old, new))
    return catalog


def lake_files(lake: Path) -> set[Path]:
    """The lake's data files, manifests and manifest lists (a table's metadata.json files are its log)."""
    return {p for p in lake.rglob("*") if p.suffix in (".parquet", ".avro")}


def warehouse_schemas(medallion: Medallion) -> set[str]:
    warehouse = warehouse_from_url(medallion.warehouse_url)
    try:
        rows = warehouse.query("SELECT schema_name FROM information_schema.schemata")
        return {r["schema_name"] for r in rows}
    finally:
        warehouse.close()


def refs(lake: Path, snapshot: CatalogSnapshot, dataset: str) -> dict[str, int]:
    loaded = load_table(Lake.resolve(lake), table_of(snapshot.targets[dataset]))
    assert loaded is not None
    return {name: ref.snapshot_id for name, ref in loaded.refs().items()}


@pytest.mark.parametrize("command", ["plan", "apply"])
@pytest.mark.parametrize("name", ["../x", "it's", "my env", "x" * 200])
def test_a_bad_environment_name_is_refused_in_one_line(command: str, name: str) -> None:
    result = CliRunner().invoke(main, [command, str(SEED), "--env", name])
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith("environment name ")
    assert line.endswith(
        "refused: use 1 to 63 lowercase letters, digits and underscores, starting with a letter"
    )


def test_a_preview_leaves_main_alone_and_its_diff_matches_main(
    orders_ran: Medallion, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    medallion = orders_ran
    snapshot = medallion.store.snapshot()
    main_refs = {d: refs(medallion.lake, snapshot, d) for d in ("silver_orders", "gold_daily_revenue")}
    warehouse_before = medallion.gold("analytics.daily_revenue_by_country")
    commits_before = medallion.store.lake_commits("gold_daily_revenue")
    files_before = lake_files(medallion.lake)

    result = cli(medallion, monkeypatch, "plan", str(edited_seed(tmp_path)), "--env", "review")

    assert result.exit_code == 1, result.output
    # Main never moved: silver was not rebuilt, gold's main is where the run left it; the warehouse's table
    # and the ledger are as they were.
    assert refs(medallion.lake, snapshot, "silver_orders") == main_refs["silver_orders"]
    gold_refs = refs(medallion.lake, snapshot, "gold_daily_revenue")
    assert gold_refs["main"] == main_refs["gold_daily_revenue"]["main"]
    assert set(gold_refs) == {*main_refs["gold_daily_revenue"], "env_review"}
    assert medallion.gold("analytics.daily_revenue_by_country") == warehouse_before
    assert medallion.store.lake_commits("gold_daily_revenue") == commits_before
    # The environment's gold is the new SQL over main's silver, in the branch and in the env's schema.
    gold = table_of(snapshot.targets["gold_daily_revenue"])
    LakeTables(spark, Lake.resolve(medallion.lake))
    expected = {
        (r.order_date, r.country): (r.revenue, r.orders)
        for r in spark.sql(
            f"SELECT CAST(order_ts AS DATE) AS order_date, country, CAST(SUM(amount) AS DECIMAL(18,2)) AS "
            f"revenue, COUNT(*) AS orders FROM {table_of(snapshot.targets['silver_orders']).sql} "
            "WHERE amount >= 100 GROUP BY 1, 2"
        ).collect()
    }
    on_branch = spark.table(gold.branch("env_review")).collect()
    assert {(r.order_date, r.country): (r.revenue, r.orders) for r in on_branch} == expected
    in_env_schema = medallion.gold("analytics__review.daily_revenue_by_country")
    assert {(r["order_date"], r["country"]): r["orders"] for r in in_env_schema} == {
        k: v[1] for k, v in expected.items()
    }
    # The diff, against an independent comparison of main's keys and rows with the branch's.
    before = {(r["order_date"], r["country"]): (r["revenue"], r["orders"]) for r in warehouse_before}
    added = len(expected.keys() - before.keys())
    removed = len(before.keys() - expected.keys())
    changed = sum(1 for k in expected.keys() & before.keys() if expected[k] != before[k])
    assert (
        f"  gold_daily_revenue           rows {len(before):,} → {len(expected):,}: {added:,} added, "
        f"{removed:,} removed, {changed:,} changed"
    ) in result.output.splitlines()
    assert changed > 0
    by_column = {
        column: sum(1 for k in expected.keys() & before.keys() if expected[k][i] != before[k][i])
        for i, column in enumerate(("revenue", "orders"))
    }
    shown = ", ".join(f"{c} {n:,}" for c, n in by_column.items() if n)
    assert f"    changed columns: {shown}" in result.output.splitlines()

    # Gold's quarantine gets no branch: the preview rejected nothing into a quarantine that holds nothing.
    quarantine = load_table(Lake.resolve(medallion.lake), gold.quarantine())
    assert quarantine is not None and "env_review" not in quarantine.refs()
    # Its size, from the branch's data files as pyiceberg plans them, and its expiry: the branch's retention,
    # which the lake's maintenance (expire_snapshots) enforces as it does for a run's unpublished branch.
    loaded = load_table(Lake.resolve(medallion.lake), gold)
    assert loaded is not None
    branch = loaded.refs()["env_review"]
    assert branch.max_ref_age_ms == timedelta(days=STAGED_BRANCH_RETENTION_DAYS) // timedelta(milliseconds=1)
    files = [t.file for t in loaded.scan(snapshot_id=branch.snapshot_id).plan_files()]
    size = sum(f.file_size_in_bytes for f in files)
    listed = cli(medallion, monkeypatch, "env", "list")
    assert listed.exit_code == 0, listed.output
    assert re.fullmatch(
        rf"review: 1 table\(s\), {size:,} bytes in {len(files)} data file\(s\), [01] min old, "
        r"expires \d{4}-\d\d-\d\d \d\d:\d\d UTC",
        listed.output.splitlines()[0],
    ), listed.output

    dropped = cli(medallion, monkeypatch, "env", "drop", "review")
    assert dropped.exit_code == 0, dropped.output
    assert dropped.output.splitlines() == [
        f"removed branch env_review of {gold} and its {len(files)} data file(s)",
        "removed warehouse schema analytics__review",
    ]
    assert refs(medallion.lake, snapshot, "gold_daily_revenue") == main_refs["gold_daily_revenue"]
    assert "analytics__review" not in warehouse_schemas(medallion)
    assert lake_files(medallion.lake) == files_before
    assert cli(medallion, monkeypatch, "env", "list").output == "no environments\n"


# A breaking change of silver_orders (it leaves out the orders of US customers): it rebuilds
# gold_daily_revenue and customer_changes_etl's gold_daily_revenue_by_segment, whose other input was never
# built.
SILVER_FILTERED = (
    "orders_etl.yaml",
    "      JOIN bronze_customers c ON o.customer_id = c.customer_id\n",
    "      JOIN bronze_customers c ON o.customer_id = c.customer_id\n      WHERE c.country <> 'US'\n",
)
SEGMENT_FILTERED = (
    "customer_changes_etl.yaml",
    "      GROUP BY 1, 2\n",
    "      WHERE o.amount > 0\n      GROUP BY 1, 2\n",
)
NEVER_BUILT = "input silver_customer_history has never been built"


def test_a_stage_whose_input_was_never_built_is_not_previewed_and_the_rest_is(
    orders_ran: Medallion, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    medallion = orders_ran
    snapshot = medallion.store.snapshot()
    main_refs = {d: refs(medallion.lake, snapshot, d) for d in ("silver_orders", "gold_daily_revenue")}
    by_segment = table_of(snapshot.targets["gold_daily_revenue_by_segment"])
    silver = table_of(snapshot.targets["silver_orders"])

    result = cli(
        medallion,
        monkeypatch,
        "plan",
        str(seed.edited_seed(tmp_path / "silver", [SILVER_FILTERED])),
        "--env",
        "breaking",
        "--json",
    )

    assert result.exit_code == 1, result.output
    shown = json.loads(result.stdout)
    jsonschema.validate(shown, plan_schema())
    environment = shown["environment"]
    assert environment["not_previewed"] == [{"dataset": "gold_daily_revenue_by_segment", "why": NEVER_BUILT}]
    # The rest is previewed: silver loses the US orders, gold is made from the environment's silver.
    LakeTables(spark, Lake.resolve(medallion.lake))
    amounts = spark.table(silver.sql).selectExpr("count(*)", "count_if(country <> 'US')").first()
    gold = table_of(snapshot.targets["gold_daily_revenue"])
    expected_gold = {tuple(r) for r in spark.table(gold.sql).where("country <> 'US'").collect()}
    [silver_diff, gold_diff] = environment["tables"]
    assert (silver_diff["dataset"], silver_diff["rows_main"], silver_diff["rows_env"]) == (
        "silver_orders",
        amounts[0],
        amounts[1],
    )
    assert (silver_diff["added"], silver_diff["removed"], silver_diff["changed"]) == (
        0,
        amounts[0] - amounts[1],
        0,
    )
    assert (gold_diff["dataset"], gold_diff["rows_env"]) == ("gold_daily_revenue", len(expected_gold))
    assert {tuple(r) for r in spark.table(gold.branch("env_breaking")).collect()} == expected_gold
    # Main is as it was, and nothing of the stage left out was written: no table, no warehouse table.
    for dataset, before in main_refs.items():
        now = refs(medallion.lake, snapshot, dataset)
        assert (now["main"], set(now)) == (before["main"], {*before, "env_breaking"})
    assert load_table(Lake.resolve(medallion.lake), by_segment) is None
    in_env_schema = medallion.gold("information_schema.tables WHERE table_schema = 'analytics__breaking'")
    assert [r["table_name"] for r in in_env_schema] == ["daily_revenue_by_country"]

    # In text, a change of that stage alone: nothing previewed, and why.
    segment_only = seed.edited_seed(tmp_path / "segment", [SEGMENT_FILTERED])
    text = cli(medallion, monkeypatch, "plan", str(segment_only), "--env", "segments")
    assert text.exit_code == 1, text.output
    assert text.stdout.splitlines()[-2:] == [
        "environment segments: 0 table(s) on branch env_segments",
        f"  gold_daily_revenue_by_segment not previewed: {NEVER_BUILT}",
    ]
    assert cli(medallion, monkeypatch, "env", "drop", "breaking").exit_code == 0
    assert {d: refs(medallion.lake, snapshot, d) for d in main_refs} == main_refs


def new_gold(spark, lake: Path, snapshot: CatalogSnapshot) -> set[tuple]:
    """gold_daily_revenue as the changed SQL makes it from main's silver: what a full run would publish."""
    LakeTables(spark, Lake.resolve(lake))
    silver = table_of(snapshot.targets["silver_orders"]).sql
    return {
        tuple(r)
        for r in spark.sql(
            "SELECT CAST(order_ts AS DATE), country, CAST(SUM(amount) AS DECIMAL(18,2)), COUNT(*) "
            f"FROM {silver} WHERE amount >= 100 GROUP BY 1, 2"
        ).collect()
    }


def killed_once_published(medallion: Medallion, changed: Path, table: TableRef, version: int) -> int:
    """`medallion apply CHANGED --env review` in a process of its own, killed with its JVM (SIGKILL) as soon
    as `table`'s main is at `version`; returns its exit code."""
    process = subprocess.Popen(
        [sys.executable, "-m", "medallion_assets.cli", "apply", str(changed), "--env", "review"],
        env={**os.environ, **settings(medallion)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while (loaded := load_table(Lake.resolve(medallion.lake), table)) is None or loaded.refs()[
        "main"
    ].snapshot_id != version:
        assert process.poll() is None, process.communicate()[0].decode()
        assert time.monotonic() < deadline, "apply did not publish its first table in 10 minutes"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    return process.wait()


def test_apply_killed_after_its_first_table_and_run_again_converges(
    medallion: Medallion, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert medallion.run("orders_etl").status == "success"
    changed = edited_seed(tmp_path, silver_too=True)
    previewed = cli(medallion, monkeypatch, "plan", str(changed), "--env", "review")
    assert previewed.exit_code == 1
    assert "environment review: 2 table(s) on branch env_review" in previewed.output.splitlines()
    snapshot = medallion.store.snapshot()
    datasets = ("silver_orders", "gold_daily_revenue")
    old = {d: refs(medallion.lake, snapshot, d)["main"] for d in datasets}
    new = {d: refs(medallion.lake, snapshot, d)["env_review"] for d in datasets}
    warehouse_old = {tuple(r.values()) for r in medallion.gold("analytics.daily_revenue_by_country")}
    # Files edited after the preview are refused before anything is loaded or published.
    orders = changed / "orders_etl.yaml"
    orders.write_text(orders.read_text().replace("amount >= 100", "amount >= 200"))
    refused = cli(medallion, monkeypatch, "apply", str(changed), "--env", "review")
    assert refused.exit_code == 2
    assert refused.output == (
        "environment review was previewed with other catalog files: gold_daily_revenue changed since; "
        f"preview again with `medallion plan {changed} --env review`\n"
    )
    assert medallion.store.snapshot().tables == snapshot.tables
    assert {d: refs(medallion.lake, snapshot, d)["env_review"] for d in datasets} == new
    orders.write_text(orders.read_text().replace("amount >= 200", "amount >= 100"))

    silver = table_of(snapshot.targets["silver_orders"])
    exit_code = killed_once_published(medallion, changed, silver, new["silver_orders"])

    # Killed once silver (upstream, first) was published: each table is at its old or its new version.
    assert exit_code == -signal.SIGKILL
    expected = new_gold(spark, medallion.lake, snapshot)
    assert refs(medallion.lake, snapshot, "gold_daily_revenue")["main"] in (
        old["gold_daily_revenue"],
        new["gold_daily_revenue"],
    )
    warehouse = {tuple(r.values()) for r in medallion.gold("analytics.daily_revenue_by_country")}
    assert warehouse in (warehouse_old, expected)

    spark.sparkContext.setJobGroup("apply", "apply run again")
    result = cli(medallion, monkeypatch, "apply", str(changed), "--env", "review")

    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        f"gold_daily_revenue: fast-forwarded, snapshot {new['gold_daily_revenue']}"
    )
    # Metadata only: the fast-forward is Iceberg's, and the warehouse took the environment's table, which
    # the preview loaded; no Spark job read a row.
    assert spark.sparkContext.statusTracker().getJobIdsForGroup("apply") == []
    # Main is the preview's version, which is what a run of the new catalog makes; the branches are consumed.
    assert {d: refs(medallion.lake, snapshot, d) for d in datasets} == {d: {"main": new[d]} for d in datasets}
    gold = table_of(snapshot.targets["gold_daily_revenue"]).sql
    assert {tuple(r) for r in spark.table(gold).collect()} == expected
    warehouse = {tuple(r.values()) for r in medallion.gold("analytics.daily_revenue_by_country")}
    assert warehouse == expected
    assert "analytics__review" not in warehouse_schemas(medallion)
    [audit] = medallion.store.audit_entries(stage_name="gold_daily_revenue", event="apply")
    assert (audit["status"], audit["details"]["how"]) == ("success", "fast-forwarded")
    # The ledger knows the new definitions published: the next run rebuilds nothing for them (silver, which
    # joins two bronze tables, is rebuilt whole on every run, for that reason alone).
    assert medallion.run("orders_etl").status == "success"
    assert refs(medallion.lake, snapshot, "gold_daily_revenue")["main"] == new["gold_daily_revenue"]
    silver_run = medallion.stage_audit("silver_orders_enrich")[-1]["details"]
    assert silver_run["why"] == "the stage reads more than one bronze table"
    assert cli(medallion, monkeypatch, "apply", str(changed), "--env", "review").output == (
        "no environment review: `medallion env list` shows those there are\n"
    )


def test_apply_runs_the_stage_again_when_main_moved_since_the_preview(
    medallion: Medallion, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert medallion.run("orders_etl").status == "success"
    changed = edited_seed(tmp_path)
    assert cli(medallion, monkeypatch, "plan", str(changed), "--env", "review").exit_code == 1
    snapshot = medallion.store.snapshot()
    gold = table_of(snapshot.targets["gold_daily_revenue"])
    previewed = refs(medallion.lake, snapshot, "gold_daily_revenue")["env_review"]
    spark.sql(f"DELETE FROM {gold.sql} WHERE orders = 1")  # main moves on after the preview

    result = cli(medallion, monkeypatch, "apply", str(changed), "--env", "review")

    assert result.exit_code == 0, result.output
    now = refs(medallion.lake, snapshot, "gold_daily_revenue")
    assert result.output.splitlines()[-1] == f"gold_daily_revenue: rebuilt, snapshot {now['main']}"
    assert now["main"] != previewed and "env_review" not in now
    expected = new_gold(spark, medallion.lake, snapshot)
    assert {tuple(r) for r in spark.table(gold.sql).collect()} == expected
    assert {tuple(r.values()) for r in medallion.gold("analytics.daily_revenue_by_country")} == expected
