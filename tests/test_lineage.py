"""The lineage graph, recovery paths and availability on the seed catalog plus a replica of the orders in a
second bucket, on the loopback S3 API; and the `medallion lineage` and `medallion paths` commands."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import boto3
import pytest
from click.testing import CliRunner

from medallion_assets.catalog.loader import merged_snapshot, parse_files
from medallion_assets.catalog.models import ControlFlag, DatasetLineage
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.cli import main
from medallion_assets.loading import validate_files
from medallion_assets.recovery.availability import Availability, probe_table
from medallion_assets.recovery.graph import (
    UnknownDataset,
    build_graph,
    check_lineage,
    column_lineage,
    downstream,
    upstream,
)
from medallion_assets.recovery.paths import (
    NoAvailablePath,
    RecoveryPath,
    active_path,
    default_path,
    paths_report,
    recovery_paths,
    refresh_recovery_paths,
    shortest_available_path,
)
from medallion_assets.storage.warehouse import warehouse_from_url
from tests.conftest import SEED

# The seed already declares the orders replica and its alternate edge; these rows add costs and columns.
LINEAGE = """\
dataset_lineage:
  - {upstream: silver_orders, downstream: gold_daily_revenue, via: orders_etl.gold_daily_revenue, cost: 1.5}
column_lineage:
  - {downstream: gold_daily_revenue, downstream_column: revenue, upstream: silver_orders,
     upstream_column: amount, transformation: aggregate}
  - {downstream: gold_daily_revenue, downstream_column: country, upstream: silver_orders,
     upstream_column: country}
  - {downstream: silver_orders, downstream_column: country, upstream: bronze_customers,
     upstream_column: country}
"""
GOLD = "gold_daily_revenue"
VIA_PRIMARY = ("orders_raw", "bronze_orders", "silver_orders", GOLD)
VIA_REPLICA = ("orders_raw_replica", "bronze_orders", "silver_orders", GOLD)
VIA_CUSTOMERS = ("customers_raw", "bronze_customers", "silver_orders", GOLD)


@dataclass
class Installation:
    store: CatalogStore
    primary: str
    replica: str
    warehouse_url: str

    @property
    def snapshot(self) -> CatalogSnapshot:
        return self.store.snapshot()

    def availability(self, ttl_sec: float = 60) -> Availability:
        return Availability(self.store, self.snapshot, self.warehouse_url, ttl_sec=ttl_sec)

    def delete_primary_bucket(self) -> None:
        bucket = boto3.resource("s3").Bucket(self.primary)
        bucket.objects.all().delete()
        bucket.delete()


@pytest.fixture
def installation(tmp_path, s3_endpoint) -> Installation:
    """The seed catalog reading from a bucket of its own, orders replicated in a second bucket."""
    primary, replica = f"raw-{uuid.uuid4().hex[:10]}", f"replica-{uuid.uuid4().hex[:10]}"
    s3 = boto3.client("s3")
    for bucket in (primary, replica):
        s3.create_bucket(Bucket=bucket)
    for key in (
        "orders/part-00000.csv",
        "customers/customers.parquet",
        "user_events/part-00000.jsonl",
        "customer_changes/export-1.jsonl",
    ):
        s3.put_object(Bucket=primary, Key=key, Body=b"probe me")
    s3.put_object(Bucket=replica, Key="orders/part-00000.csv", Body=b"probe me")
    seed = tmp_path / "seed"
    seed.mkdir()
    for file in SEED.glob("*.yaml"):
        text = file.read_text().replace("s3://medallion-raw/", f"s3://{primary}/")
        (seed / file.name).write_text(text.replace("s3://medallion-replica/", f"s3://{replica}/"))
    (seed / "lineage.yaml").write_text(LINEAGE)
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [seed]).rows)
    return Installation(store, primary, replica, f"duckdb:///{tmp_path}/warehouse.duckdb")


def test_graph_has_stage_and_alternate_edges_with_their_costs_and_lines(installation):
    graph = build_graph(installation.snapshot)
    assert graph.number_of_nodes() == 15 and graph.number_of_edges() == 13
    assert graph.nodes["orders_raw_replica"] == {"kind": "source", "layer": "raw"}
    assert graph.nodes[GOLD] == {"kind": "target", "layer": "gold"}
    edges = {(u, v): (d["via"], d["kind"], d["line"], d["cost"]) for u, v, d in graph.edges(data=True)}
    assert edges[("orders_raw", "bronze_orders")] == ("orders_etl.bronze_orders_ingest", "stage", "main", 1.0)
    assert edges[("orders_raw_replica", "bronze_orders")] == ("orders_replica", "alternate", "alternate", 2.0)
    assert edges[("bronze_customers", "silver_orders")] == (
        "orders_etl.silver_orders_enrich",
        "stage",
        "side",
        1.0,
    )
    assert edges[("silver_orders", GOLD)] == ("orders_etl.gold_daily_revenue", "stage", "main", 1.5)

    [one_hop] = upstream(graph, GOLD, depth=1)
    assert (one_hop.upstream, one_hop.depth) == ("silver_orders", 1)
    assert [(e.upstream, e.downstream, e.depth) for e in upstream(graph, GOLD)] == [
        ("silver_orders", GOLD, 1),
        ("bronze_customers", "silver_orders", 2),
        ("bronze_orders", "silver_orders", 2),
        ("customers_raw", "bronze_customers", 3),
        ("orders_raw", "bronze_orders", 3),
        ("orders_raw_replica", "bronze_orders", 3),
    ]
    assert [(e.downstream, e.line) for e in downstream(graph, "orders_raw_replica")] == [
        ("bronze_orders", "alternate"),
        ("silver_orders", "main"),
        (GOLD, "main"),
        ("gold_daily_revenue_by_segment", "main"),
    ]
    assert [
        (r.downstream_column, r.upstream, r.transformation)
        for r in column_lineage(graph, [GOLD, "silver_orders"])
    ] == [("country", "silver_orders", "identity"), ("revenue", "silver_orders", "aggregate")]
    with pytest.raises(
        UnknownDataset, match=r"unknown dataset 'gold_daily_revenu'; did you mean: gold_daily_revenue"
    ):
        upstream(graph, "gold_daily_revenu")


def test_recovery_paths_are_ranked_by_cost_and_bounded(installation):
    graph = build_graph(installation.snapshot)
    assert recovery_paths(graph, GOLD) == [
        RecoveryPath(VIA_CUSTOMERS, 3.5),
        RecoveryPath(VIA_PRIMARY, 3.5),
        RecoveryPath(VIA_REPLICA, 4.5),
    ]
    assert recovery_paths(graph, GOLD, max_paths=1) == [RecoveryPath(VIA_CUSTOMERS, 3.5)]
    assert recovery_paths(graph, GOLD, max_length=3) == []
    assert [p.nodes for p in recovery_paths(graph, "silver_orders", max_length=3)] == [
        p[:3] for p in (VIA_CUSTOMERS, VIA_PRIMARY, VIA_REPLICA)
    ]
    assert recovery_paths(graph, "orders_raw") == [RecoveryPath(("orders_raw",), 0.0)]
    assert default_path(graph, GOLD) == RecoveryPath(VIA_PRIMARY, 3.5)


def test_refresh_materializes_paths_and_rewrites_only_what_changed(installation):
    store = installation.store
    assert len(refresh_recovery_paths(store, installation.snapshot)) == 15
    rows = store.table_rows("dataset_recovery_paths")
    assert len(rows) == 23
    gold = sorted((r for r in rows if r["dataset"] == GOLD), key=lambda r: r["path_rank"])
    assert [(r["path_rank"], tuple(r["nodes"]), r["cost"]) for r in gold] == [
        (1, VIA_CUSTOMERS, 3.5),
        (2, VIA_PRIMARY, 3.5),
        (3, VIA_REPLICA, 4.5),
    ]
    assert refresh_recovery_paths(store, installation.snapshot) == []

    store.upsert(
        {
            "dataset_lineage": [
                DatasetLineage(
                    upstream="orders_raw_replica",
                    downstream="bronze_orders",
                    via="orders_replica",
                    kind="alternate",
                    cost=0.5,
                    is_default=False,
                )
            ]
        }
    )
    assert refresh_recovery_paths(store, installation.snapshot) == [
        "bronze_orders",
        GOLD,
        "gold_daily_revenue_by_segment",
        "silver_orders",
    ]
    after = store.table_rows("dataset_recovery_paths")
    untouched = {r["dataset"]: r["computed_at"] for r in rows if r["dataset"] == "bronze_user_events"}
    assert {
        r["dataset"]: r["computed_at"] for r in after if r["dataset"] == "bronze_user_events"
    } == untouched
    assert [
        tuple(r["nodes"])
        for r in sorted((r for r in after if r["dataset"] == GOLD), key=lambda r: r["path_rank"])
    ][0] == VIA_REPLICA


def test_primary_bucket_deleted_the_shortest_available_path_goes_through_the_replica(installation):
    graph = build_graph(installation.snapshot)
    everything = set(graph.nodes)
    # The gold tables have not been loaded yet: the warehouse itself says so.
    missing = installation.availability().unavailable(everything)
    assert set(missing) == {"gold_daily_revenue", "gold_daily_user_events", "gold_daily_revenue_by_segment"}
    for dataset, table in (
        ("gold_daily_revenue", "analytics.daily_revenue_by_country"),
        ("gold_daily_user_events", "analytics.daily_user_events"),
        ("gold_daily_revenue_by_segment", "analytics.daily_revenue_by_segment"),
    ):
        assert missing[dataset].startswith(
            f'query failed: CatalogException: Catalog Error: Table with name "{table}" does not exist'
        )
    assert shortest_available_path(graph, GOLD, set()) == RecoveryPath(VIA_PRIMARY, 3.5)

    installation.delete_primary_bucket()
    gold = {GOLD, "gold_daily_user_events", "gold_daily_revenue_by_segment"}
    down = installation.availability().unavailable(everything - gold)
    assert set(down) == {"orders_raw", "customers_raw", "user_events_raw", "customer_changes_raw"}
    assert down["orders_raw"] == (
        f"source orders_raw: s3://{installation.primary}/orders/ does not exist "
        f"(bucket {installation.primary} not found)"
    )
    assert shortest_available_path(graph, "bronze_orders", down) == RecoveryPath(VIA_REPLICA[:2], 2.0)
    assert shortest_available_path(graph, GOLD, down) == RecoveryPath(VIA_REPLICA, 4.5)
    assert active_path(graph, GOLD, down) == RecoveryPath(VIA_REPLICA, 4.5)
    assert paths_report(graph, GOLD, recovery_paths(graph, GOLD), down) == {
        "dataset": GOLD,
        "paths": [
            {"nodes": list(VIA_CUSTOMERS), "cost": 3.5, "available": False},
            {"nodes": list(VIA_PRIMARY), "cost": 3.5, "available": False},
            {"nodes": list(VIA_REPLICA), "cost": 4.5, "available": True},
        ],
        "active": list(VIA_REPLICA),
        "down": {"customers_raw": down["customers_raw"], "orders_raw": down["orders_raw"]},
    }
    # The customers have no replica: their own supply line has nothing left, and the refusal says why.
    assert shortest_available_path(graph, "bronze_customers", down) is None
    refusal = str(NoAvailablePath("bronze_customers", recovery_paths(graph, "bronze_customers"), down))
    assert refusal == (
        f"no available path to bronze_customers:\n  1. customers_raw → bronze_customers (cost 1) "
        f"down: customers_raw: {down['customers_raw']}"
    )


def test_operator_flags_mark_systems_down_and_probes_are_cached(installation):
    replica_system = installation.replica.replace("-", "_")
    installation.store.upsert(
        {
            "control_flags": [
                ControlFlag(
                    entity_type="source",
                    entity_id=replica_system,
                    flag_name="available",
                    flag_value=False,
                    reason="replica maintenance",
                    updated_by="ops",
                ),
                ControlFlag(
                    entity_type="dataset",
                    entity_id="silver_user_events",
                    flag_name="available",
                    flag_value=False,
                ),
                # A kill switch (flag `enabled`) says "do not run", not "cannot be read": it leaves
                # availability alone.
                ControlFlag(
                    entity_type="source", entity_id="customers_raw", flag_name="enabled", flag_value=False
                ),
            ]
        }
    )
    availability = installation.availability(ttl_sec=3600)
    watched = ["orders_raw_replica", "silver_user_events", "customers_raw", GOLD]
    down = availability.unavailable(watched)
    assert (
        down["orders_raw_replica"]
        == f"source {replica_system} marked unavailable by ops: replica maintenance"
    )
    assert down["silver_user_events"] == "dataset silver_user_events marked unavailable: no reason given"
    assert set(down) == {"orders_raw_replica", "silver_user_events", GOLD}

    with warehouse_from_url(installation.warehouse_url) as warehouse:
        warehouse.query("CREATE SCHEMA analytics")
        warehouse.query("CREATE TABLE analytics.daily_revenue_by_country (order_date DATE)")
    assert GOLD in availability.unavailable(watched), "the table probe is cached for the TTL"
    assert GOLD not in installation.availability(ttl_sec=0).unavailable(watched)

    installation.store.upsert(
        {
            "control_flags": [
                ControlFlag(
                    entity_type="source", entity_id=replica_system, flag_name="available", flag_value=True
                )
            ]
        }
    )
    assert "orders_raw_replica" not in availability.unavailable(watched), "flags are read at every call"


def test_postgres_table_probe(pg_database):
    assert "does not exist" in probe_table(pg_database, "analytics.daily_revenue_by_country")
    with warehouse_from_url(pg_database) as warehouse:
        warehouse.query("CREATE SCHEMA analytics")
        warehouse.query("CREATE TABLE analytics.daily_revenue_by_country (order_date DATE)")
    assert probe_table(pg_database, "analytics.daily_revenue_by_country") is None


BAD_LINEAGE = """\
dataset_lineage:
  - {upstream: orders_rw, downstream: bronze_orders, via: typo, kind: alternate}
  - {upstream: orders_raw, downstream: bronze_orders, via: orders_etl.no_such_stage}
  - {upstream: gold_daily_revenue, downstream: bronze_orders, via: rebuild_from_gold, kind: alternate}
  - {upstream: silver_user_events, downstream: silver_user_events, via: self_join, kind: sql}
column_lineage:
  - {downstream: gold_daily_revenue, downstream_column: revenue, upstream: silver_order,
     upstream_column: amount}
"""


def test_check_lineage_refuses_unknown_datasets_unbacked_stage_rows_and_cycles(tmp_path):
    (tmp_path / "bad.yaml").write_text(BAD_LINEAGE)
    loaded, problems = parse_files([SEED, tmp_path / "bad.yaml"])
    assert problems == []
    found = check_lineage(merged_snapshot(CatalogSnapshot(), loaded))
    assert [(p.table, p.row.key(), p.field, p.message) for p in found] == [
        (
            "dataset_lineage",
            ("orders_rw", "bronze_orders", "typo"),
            "upstream",
            "unknown dataset 'orders_rw'; did you mean: orders_raw?",
        ),
        (
            "column_lineage",
            (GOLD, "revenue", "silver_order", "amount"),
            "upstream",
            "unknown dataset 'silver_order'; did you mean: silver_orders?",
        ),
        (
            "dataset_lineage",
            ("orders_raw", "bronze_orders", "orders_etl.no_such_stage"),
            "via",
            "no stage orders_etl.no_such_stage reads orders_raw into bronze_orders",
        ),
        (
            "dataset_lineage",
            (GOLD, "bronze_orders", "rebuild_from_gold"),
            "upstream",
            "cycle: gold_daily_revenue → bronze_orders → silver_orders → gold_daily_revenue",
        ),
        (
            "dataset_lineage",
            ("silver_user_events", "silver_user_events", "self_join"),
            "upstream",
            "cycle: silver_user_events → silver_user_events",
        ),
    ]
    assert check_lineage(merged_snapshot(CatalogSnapshot(), parse_files([SEED])[0])) == []


# ------------------------------------------------------------------------------------------------------ CLI


@pytest.fixture
def cli(installation, monkeypatch) -> CliRunner:
    monkeypatch.setenv("MEDALLION_CATALOG_URL", installation.store.url)
    monkeypatch.setenv("MEDALLION_WAREHOUSE_URL", installation.warehouse_url)
    return CliRunner()


def test_cli_lineage_show(cli):
    shown = cli.invoke(main, ["lineage", "show", GOLD, "--upstream", "--depth", "2", "--columns", "--json"])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.stdout)
    assert set(report) == {"dataset", "upstream", "columns"}
    assert [(e["upstream"], e["depth"]) for e in report["upstream"]] == [
        ("silver_orders", 1),
        ("bronze_customers", 2),
        ("bronze_orders", 2),
    ]
    assert report["upstream"][0] == {
        "upstream": "silver_orders",
        "downstream": GOLD,
        "via": "orders_etl.gold_daily_revenue",
        "kind": "stage",
        "line": "main",
        "cost": 1.5,
        "depth": 1,
    }
    assert [(c["downstream"], c["downstream_column"], c["upstream"]) for c in report["columns"]] == [
        (GOLD, "country", "silver_orders"),
        (GOLD, "revenue", "silver_orders"),
        ("silver_orders", "country", "bronze_customers"),
    ]

    text = cli.invoke(main, ["lineage", "show", "bronze_orders"]).stdout
    assert text.splitlines() == [
        "upstream of bronze_orders:",
        "  1  orders_raw → bronze_orders  via orders_etl.bronze_orders_ingest (stage, main, cost 1)",
        "  1  orders_raw_replica → bronze_orders  via orders_replica (alternate, alternate, cost 2)",
        "downstream of bronze_orders:",
        "  1  bronze_orders → silver_orders  via orders_etl.silver_orders_enrich (stage, main, cost 1)",
        "  2  silver_orders → gold_daily_revenue  via orders_etl.gold_daily_revenue (stage, main, cost 1.5)",
        "  2  silver_orders → gold_daily_revenue_by_segment  via "
        "customer_changes_etl.gold_daily_revenue_by_segment (stage, main, cost 1)",
    ]
    unknown = cli.invoke(main, ["lineage", "show", "bronze_order"])
    assert unknown.exit_code == 2
    assert (
        unknown.stderr.strip()
        == "unknown dataset 'bronze_order'; did you mean: bronze_orders, bronze_customers?"
    )


def test_cli_paths_before_and_after_the_primary_bucket_is_deleted(cli, installation):
    before = json.loads(cli.invoke(main, ["paths", GOLD, "--json"]).stdout)
    assert before["active"] == list(VIA_PRIMARY) and before["down"] == {}
    assert [p["available"] for p in before["paths"]] == [True, True, True]

    installation.delete_primary_bucket()
    after = cli.invoke(main, ["paths", GOLD, "--json"])
    assert after.exit_code == 0, after.output
    report = json.loads(after.stdout)
    assert (report["dataset"], report["active"]) == (GOLD, list(VIA_REPLICA))
    assert [(p["nodes"], p["cost"], p["available"]) for p in report["paths"]] == [
        (list(VIA_CUSTOMERS), 3.5, False),
        (list(VIA_PRIMARY), 3.5, False),
        (list(VIA_REPLICA), 4.5, True),
    ]
    assert set(report["down"]) == {"customers_raw", "orders_raw"}

    text = cli.invoke(main, ["paths", "bronze_orders"]).stdout.splitlines()
    assert text[:3] == [
        "bronze_orders  active: orders_raw_replica → bronze_orders",
        "   1  cost 1      down       orders_raw → bronze_orders",
        "   2  cost 2      available  orders_raw_replica → bronze_orders",
    ]
    assert text[3].startswith("  down: orders_raw: source orders_raw: s3://")

    unknown = cli.invoke(main, ["paths", "gold_revenue"])
    assert unknown.exit_code == 2 and "did you mean: gold_daily_revenue" in unknown.stderr


def test_cli_history_and_refresh(cli, installation):
    # Versions and their diffs are tested in test_lineage_versions.py; loading the seed recorded the first
    # ones.
    assert cli.invoke(main, ["lineage", "history", "gold_forecast"]).exit_code == 2
    [first] = json.loads(cli.invoke(main, ["lineage", "history", GOLD, "--json"]).stdout)["versions"]
    assert (first["version"], first["inputs"], first["via"]) == (
        1,
        ["silver_orders"],
        "orders_etl.gold_daily_revenue",
    )

    assert cli.invoke(main, ["lineage", "refresh"]).stdout.startswith(
        "recovery paths: 15 dataset(s) updated: "
    )
    assert cli.invoke(main, ["lineage", "refresh"]).stdout == "recovery paths: 0 dataset(s) updated\n"
