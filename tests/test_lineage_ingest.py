"""Lineage from other tools: OpenLineage events read from a file or stdin (`medallion lineage ingest`) and
received over HTTP on loopback (`medallion lineage serve`, Marquez's POST /api/v1/lineage) join the catalog
graph, so lineage and recovery paths cross orchestrators; a malformed event is refused with the schema error
and the rest of its batch is ingested."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.transport.http import HttpConfig, HttpTransport
from sqlalchemy import create_engine, text

from medallion_assets.catalog.store import CatalogStore
from medallion_assets.cli import main
from medallion_assets.config import OPENLINEAGE_SPEC_ENV as SPEC_ENV
from medallion_assets.loading import validate_files
from medallion_assets.openlineage.schema_validation import PACKAGED_SPEC, spec_folder, validate_event
from medallion_assets.openlineage.server import MAX_BODY_BYTES, LineageServer
from medallion_assets.recovery.graph import build_graph
from medallion_assets.recovery.paths import all_recovery_paths
from tests.conftest import REPO, SEED
from tests.fixtures.lineage import post

AIRFLOW, DBT = (
    "https://github.com/apache/airflow/tree/2.10.0",
    "https://github.com/dbt-labs/dbt-core/tree/1.9.0",
)
SHOP_ORDERS = "postgres://shopdb:5432/shop.public.orders"


def event(
    producer: str,
    job: str,
    inputs: list[tuple[str, str]],
    outputs: list[tuple[str, str]],
    run_id: str | None = None,
) -> dict:
    return {
        "eventType": "COMPLETE",
        "eventTime": "2026-11-02T03:00:00Z",
        "producer": producer,
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": run_id or str(uuid.uuid4())},
        "job": {"namespace": job.split("/")[0], "name": job.split("/")[1]},
        "inputs": [{"namespace": ns, "name": name} for ns, name in inputs],
        "outputs": [{"namespace": ns, "name": name} for ns, name in outputs],
    }


# Airflow exports the shop's orders into the raw bucket Medallion reads (a file inside the orders_raw prefix).
EXPORT = event(
    AIRFLOW,
    "airflow/shop_export.orders",
    [("postgres://shopdb:5432", "shop.public.orders")],
    [("s3://medallion-raw", "orders/part-00000.csv")],
)


def dbt_report(tmp_path) -> dict:
    """dbt builds a report on the gold table Medallion loads into the warehouse."""
    warehouse = f"duckdb://{tmp_path}/warehouse.duckdb"
    return event(
        DBT,
        "dbt/marts.revenue_report",
        [(warehouse, "warehouse.analytics.daily_revenue_by_country")],
        [(warehouse, "warehouse.marts.revenue_report")],
    )


def test_ingest_a_file_rejects_bad_lines_and_adds_the_rest_to_the_graph(catalog, tmp_path):
    own = event(
        "urn:medallion:0.1.0",
        "medallion/orders_etl.silver_orders",
        [("s3://lake", "bronze/orders")],
        [("s3://lake", "silver/orders")],
    )
    bad_run_id = {**EXPORT, "run": {"runId": "run-42"}}
    no_job = {key: value for key, value in EXPORT.items() if key != "job"}
    events = tmp_path / "events.ndjson"
    events.write_text(
        "\n".join(
            [
                json.dumps(EXPORT),
                "",
                json.dumps(bad_run_id),
                '{"eventType": ',
                json.dumps(dbt_report(tmp_path)),
                json.dumps(no_job),
                json.dumps(own),
            ]
        )
        + "\n"
    )

    result = CliRunner().invoke(main, ["lineage", "ingest", str(events)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{events}:3: run.runId: 'run-42' is not a UUID",
        f"{events}:4: event: not JSON: Expecting value: line 1 column 15 (char 14)",
        f"{events}:6: event: 'job' is a required property",
    ]
    assert result.stdout == "ingested 3 event(s): 2 edge(s), 2 new dataset(s); rejected 3\n"

    graph = build_graph(catalog.snapshot())
    report_node = f"duckdb://{tmp_path}/warehouse.duckdb/warehouse.marts.revenue_report"
    assert graph.nodes[SHOP_ORDERS] == graph.nodes[report_node] == {"kind": "external", "layer": None}
    assert {k: graph.edges[SHOP_ORDERS, "orders_raw"][k] for k in ("via", "kind", "line", "cost")} == {
        "via": "airflow/shop_export.orders",
        "kind": "openlineage",
        "line": "main",
        "cost": 1.0,
    }
    assert graph.has_edge("gold_daily_revenue", report_node)
    # Medallion's own event added nothing: the stage edge stands alone.
    assert [r.kind for r in graph.edges["bronze_orders", "silver_orders"]["routes"]] == ["stage"]

    # Lineage and recovery paths now reach across Airflow and dbt.
    shown = json.loads(
        CliRunner().invoke(main, ["lineage", "show", report_node, "--upstream", "--json"]).stdout
    )
    assert shown["upstream"][-1] == {
        "upstream": SHOP_ORDERS,
        "downstream": "orders_raw",
        "via": "airflow/shop_export.orders",
        "kind": "openlineage",
        "line": "main",
        "cost": 1.0,
        "depth": 5,
    }
    stored = {
        tuple(row["nodes"])
        for row in catalog.table_rows("dataset_recovery_paths")
        if row["dataset"] == report_node
    }
    assert (
        SHOP_ORDERS,
        "orders_raw",
        "bronze_orders",
        "silver_orders",
        "gold_daily_revenue",
        report_node,
    ) in stored


def test_ingest_from_stdin_refuses_an_event_that_closes_a_cycle(catalog, tmp_path):
    # A job that writes the warehouse's gold table back into the raw orders would make the graph a loop.
    loop = event(
        AIRFLOW,
        "airflow/reverse_etl.orders",
        [(f"duckdb://{tmp_path}/warehouse.duckdb", "warehouse.analytics.daily_revenue_by_country")],
        [("s3://medallion-raw", "orders")],
    )
    result = CliRunner().invoke(
        main, ["lineage", "ingest", "-"], input=f"{json.dumps(EXPORT)}\n{json.dumps(loop)}\n"
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "<stdin>:2: cycle: gold_daily_revenue → orders_raw → bronze_orders → silver_orders"
        " → gold_daily_revenue\n"
    )
    assert result.stdout == "ingested 1 event(s): 1 edge(s), 1 new dataset(s); rejected 1\n"
    assert [(r["upstream"], r["downstream"]) for r in catalog.table_rows("external_lineage")] == [
        (SHOP_ORDERS, "orders_raw")
    ]


def test_serve_answers_as_marquez_does(server, catalog, tmp_path):
    endpoint = f"{server}/api/v1/lineage"
    assert post(endpoint, json.dumps(EXPORT).encode()) == (201, b"")
    status, body = post(endpoint, json.dumps({**EXPORT, "eventTime": 1700000000}).encode())
    assert (status, json.loads(body)) == (
        400,
        {"code": 400, "message": "eventTime: 1700000000 is not of type 'string'"},
    )
    assert post(
        endpoint, gzip.compress(json.dumps(dbt_report(tmp_path)).encode()), {"Content-Encoding": "gzip"}
    ) == (201, b"")
    bomb = gzip.compress(b" " * (MAX_BODY_BYTES + 1))  # 17 MB of blanks, 17 kB on the wire
    status, body = post(endpoint, bomb, {"Content-Encoding": "gzip"})
    assert (status, json.loads(body)["message"]) == (
        413,
        f"an event inflates to over the limit of {MAX_BODY_BYTES} bytes",
    )
    status, body = post(f"{server}/api/v1/namespaces", b"{}")
    assert (status, json.loads(body)["message"]) == (
        404,
        "no endpoint /api/v1/namespaces; send events to POST /api/v1/lineage",
    )

    # The OpenLineage client's own http transport, as Airflow or Spark would configure it.
    client = OpenLineageClient(transport=HttpTransport(HttpConfig(url=server, compression="gzip")))
    client.emit(
        RunEvent(
            eventType=RunState.COMPLETE,
            eventTime="2026-11-02T04:00:00Z",
            producer=AIRFLOW,
            run=Run(runId=str(uuid.uuid4())),
            job=Job(namespace="spark", name="customers_export"),
            inputs=[InputDataset("postgres://crm:5432", "crm.public.customers")],
            outputs=[OutputDataset("s3://medallion-raw", "customers/customers.parquet")],
        )
    )
    edges = sorted((r["upstream"], r["downstream"], r["job"]) for r in catalog.table_rows("external_lineage"))
    assert edges == [
        (
            "gold_daily_revenue",
            f"duckdb://{tmp_path}/warehouse.duckdb/warehouse.marts.revenue_report",
            "dbt/marts.revenue_report",
        ),
        ("postgres://crm:5432/crm.public.customers", "customers_raw", "spark/customers_export"),
        (SHOP_ORDERS, "orders_raw", "airflow/shop_export.orders"),
    ]


@pytest.mark.integration  # the command, as a process
def test_the_serve_command_listens_on_loopback(catalog, tmp_path):
    command = subprocess.Popen(
        [sys.executable, "-m", "medallion_assets.cli", "lineage", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=os.environ,
    )
    try:
        line = command.stdout.readline()
        assert line.startswith("OpenLineage endpoint on http://127.0.0.1:") and line.endswith(
            "/api/v1/lineage (Ctrl+C stops it)\n"
        ), line + command.stderr.read()
        assert post(line.split()[3], json.dumps(EXPORT).encode()) == (201, b"")
    finally:
        command.terminate()
        command.wait(timeout=10)
    assert [r["job"] for r in catalog.table_rows("external_lineage")] == ["airflow/shop_export.orders"]


def test_the_specification_ships_with_the_package_and_can_be_pointed_elsewhere(monkeypatch, tmp_path):
    assert (
        spec_folder() == PACKAGED_SPEC
    )  # nothing outside the package: a clone, a wheel and a container alike
    assert (PACKAGED_SPEC / "OpenLineage.json").is_file() and list((PACKAGED_SPEC / "facets").glob("*.json"))

    monkeypatch.setenv(SPEC_ENV, str(PACKAGED_SPEC))
    assert validate_event(EXPORT) is EXPORT
    monkeypatch.setenv(SPEC_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=f"^{SPEC_ENV}={tmp_path}: no OpenLineage.json there$"):
        validate_event(EXPORT)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def seeded(request, tmp_path) -> CatalogStore:
    """The seed catalog on SQLite, then on PostgreSQL."""
    store = CatalogStore(
        f"sqlite:///{tmp_path}/catalog.db"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_database")
    )
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    return store


def served_paths(store: CatalogStore) -> dict[str, list[tuple[list[str], float]]]:
    """What `dataset_recovery_paths` holds: each dataset's ranked paths."""
    served: dict[str, list] = {}
    for row in sorted(
        store.table_rows("dataset_recovery_paths"), key=lambda r: (r["dataset"], r["path_rank"])
    ):
        served.setdefault(row["dataset"], []).append((list(row["nodes"]), row["cost"]))
    return served


def paths_from_scratch(store: CatalogStore) -> dict[str, list[tuple[list[str], float]]]:
    return {
        dataset: [(list(path.nodes), path.cost) for path in paths]
        for dataset, paths in all_recovery_paths(build_graph(store.snapshot())).items()
    }


def send(server: LineageServer, document: dict) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=120)
    connection.request("POST", "/api/v1/lineage", json.dumps(document), {"Content-Type": "application/json"})
    reply = connection.getresponse()
    answer = reply.status, reply.read()
    connection.close()
    return answer


def test_paths_served_after_concurrent_events_equal_those_computed_from_scratch(seeded, serving, tmp_path):
    """Events sent at once by many clients each add their edges to the graph the server keeps and rank again
    only what they reach; the result is what reading the whole catalog again gives, and the catalog was read
    once."""
    server = serving(seeded)
    shop_orders = ("postgres://shopdb:5432", "shop.public.orders")
    # Twenty feeds of the shop's orders: more ways into every dataset downstream than the 16 paths kept of
    # each.
    feeds = [
        event(AIRFLOW, f"airflow/feed_{number}", [("s3://vendor", f"feed_{number}")], [shop_orders])
        for number in range(20)
    ]
    with ThreadPoolExecutor(max_workers=8) as clients:
        answers = list(
            clients.map(lambda document: send(server, document), [EXPORT, dbt_report(tmp_path), *feeds])
        )
    assert answers == [(201, b"")] * 22
    report = f"duckdb://{tmp_path}/warehouse.duckdb/warehouse.marts.revenue_report"
    status, body = send(
        server, event(DBT, "dbt/loop", [(report.rsplit("/", 1)[0], report.rsplit("/", 1)[1])], [shop_orders])
    )
    assert status == 400 and json.loads(body)["message"].startswith(f"cycle: {report} → ")

    served = served_paths(seeded)
    assert served == paths_from_scratch(seeded)
    assert server.lineage.reloads == 1
    # What the events reached: the gold table's paths through the orders now start at the vendor feeds, two
    # hops above the raw orders, and the report dbt builds on it is a dataset with paths of its own.
    via_orders = [nodes[:3] for nodes, _ in served["gold_daily_revenue"] if "orders_raw" in nodes]
    assert via_orders and all(
        nodes[0].startswith("s3://vendor/feed_")
        and nodes[1:] == ["postgres://shopdb:5432/shop.public.orders", "orders_raw"]
        for nodes in via_orders
    )
    assert len(served["gold_daily_revenue"]) == 16
    assert report in served


def test_a_plain_sql_edit_between_events_is_picked_up_and_runtime_writes_are_not_a_change(
    seeded, serving, tmp_path
):
    """Runs write audit rows and bookmarks all the time: the server keeps its graph through them. An operator
    who changes an edge's cost with plain SQL changes the catalog's structure: the next event reads it again,
    and the paths it serves are the catalog's."""
    server = serving(seeded)
    assert send(server, EXPORT) == (201, b"")
    first = served_paths(seeded)["orders_raw"]
    assert first == [(["postgres://shopdb:5432/shop.public.orders", "orders_raw"], 1.0)]

    seeded.record_audit(
        run_id="r1",
        pipeline_id="orders_etl",
        stage_name="bronze_orders",
        dataset="bronze_orders",
        event="stage",
        status="success",
    )
    seeded.record_bookmarks("orders_raw", [("s3://medallion-raw/orders/part-00000.csv", "etag-1", 10)], "b1")
    assert send(server, dbt_report(tmp_path)) == (201, b"")
    assert server.lineage.reloads == 1

    operator = create_engine(seeded.url)
    with operator.begin() as connection:
        connection.execute(
            text("UPDATE external_lineage SET cost = 7 WHERE job = 'airflow/shop_export.orders'")
        )
    operator.dispose()
    feed = event(
        AIRFLOW, "airflow/feed", [("s3://vendor", "feed")], [("postgres://shopdb:5432", "shop.public.orders")]
    )
    assert send(server, feed) == (201, b"")

    served = served_paths(seeded)
    # The feed's edge costs 1, the edited one 7.
    assert served["orders_raw"] == [
        (["s3://vendor/feed", "postgres://shopdb:5432/shop.public.orders", "orders_raw"], 8.0)
    ]
    assert served == paths_from_scratch(seeded)
    assert server.lineage.reloads == 2
