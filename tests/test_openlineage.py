"""OpenLineage events: valid against the specification's JSON schemas, correlated three levels deep, named by
the naming conventions, free of secrets, and sent by an emitter that a hanging or failing endpoint cannot
stall.

Every event a test builds or receives goes through `validate`: the core schema, then each facet against the
schema its `_schemaURL` names, all resolved offline from the package's copy of the specification through their
`$id`s.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from dagster import instance_for_test
from openlineage.client.serde import Serde

from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.definitions import build_definitions
from medallion_assets.loading import validate_files
from medallion_assets.openlineage.emitter import Emitter, reconfigure_emitter
from medallion_assets.openlineage.events import AssetResult, CheckResult, pipeline_run_event, stage_asset_run
from medallion_assets.openlineage.naming import DatasetLocation
from medallion_assets.runner import run_pipeline
from medallion_assets.sample_data import write_sample_data
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.warehouse import warehouse_from_url
from tests.conftest import SEED
from tests.openlineage_schema import validate

RUN_ID = "0b0ed1c6-7a57-4a3c-9a43-6c1f1f0c2b51"
LAKE = Lake.resolve("/data/lake")
GOLD = "gold_daily_revenue"


def as_dicts(events) -> list[dict]:
    return [validate(Serde.to_dict(event)) for event in events]


@pytest.fixture
def snapshot(tmp_path):
    extra = tmp_path / "lineage.yaml"
    extra.write_text(
        "column_lineage:\n"
        "  - {downstream: silver_orders, downstream_column: country, upstream: bronze_customers,"
        " upstream_column: country}\n"
        "  - {downstream: silver_orders, downstream_column: order_id, upstream: bronze_orders,"
        " upstream_column: order_id, transformation: join_key}\n"
    )
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED, extra]).rows)
    return store.snapshot()


@pytest.fixture
def no_openlineage_variables(monkeypatch):
    for name in [n for n in os.environ if n.startswith("OPENLINEAGE")]:
        monkeypatch.delenv(name)


@pytest.fixture
def clean_environment(no_openlineage_variables, tmp_path, monkeypatch):
    """No OpenLineage configuration anywhere the client looks: environment, working folder, home."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)


def _stage(snapshot, target_id):
    return next(stage for stage in snapshot.stages() if stage.target_id == target_id)


def test_asset_run_events_validate_and_nest_three_levels_deep(snapshot, clean_environment, monkeypatch):
    monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "medallion_prod")
    run = stage_asset_run(
        snapshot, _stage(snapshot, "silver_orders"), RUN_ID, Lake.resolve("s3://lake"), "duckdb:///w.duckdb"
    )
    checks = [
        CheckResult(
            "unique_order_id", "unique", True, "error", "order_id", "no duplicates", {"duplicate_count": 0}
        ),
        CheckResult("accepted_values_country", "accepted_values", False, "warn", "country", "2 rows"),
    ]
    (start,) = as_dicts(run.start())
    query_start, query_end, checks_start, checks_end, end = as_dicts(
        run.finish(
            AssetResult(
                rows=95,
                bytes=4096,
                files=2,
                columns={"order_id": "string", "country": "string"},
                checks=checks,
            )
        )
    )

    assert [e["eventType"] for e in (start, query_start, query_end, checks_start, checks_end, end)] == [
        "START",
        "START",
        "COMPLETE",
        "START",
        "COMPLETE",
        "COMPLETE",
    ]
    assert {e["job"]["namespace"] for e in (start, query_start, checks_end)} == {"medallion_prod"}
    assert [e["job"]["name"] for e in (start, query_start, checks_start)] == [
        "orders_etl.silver_orders",
        "orders_etl.silver_orders.query_1",
        "orders_etl.silver_orders.checks",
    ]
    asset_parent = start["run"]["facets"]["parent"]
    assert (asset_parent["run"]["runId"], asset_parent["job"], asset_parent["root"]["run"]["runId"]) == (
        RUN_ID,
        {"namespace": "medallion_prod", "name": "orders_etl", "facets": {}},
        RUN_ID,
    )
    for child in (query_start, query_end, checks_start, checks_end):
        parent = child["run"]["facets"]["parent"]
        assert (parent["run"]["runId"], parent["job"]["name"]) == (run.run_id, "orders_etl.silver_orders")
        assert (parent["root"]["run"]["runId"], parent["root"]["job"]["name"]) == (RUN_ID, "orders_etl")
    assert query_start["run"]["runId"] == query_end["run"]["runId"] != checks_start["run"]["runId"]

    job = end["job"]["facets"]
    assert {k: job["jobType"][k] for k in ("processingType", "integration", "jobType")} == {
        "processingType": "BATCH",
        "integration": "DAGSTER",
        "jobType": "ASSET",
    }
    assert job["sql"]["query"].startswith("SELECT o.order_id") and job["sql"]["dialect"] == "spark"
    assert (
        job["sourceCode"]["language"] == "yaml"
        and "stage_name: silver_orders_enrich" in job["sourceCode"]["sourceCode"]
    )
    assert query_start["job"]["facets"]["sql"]["query"] == job["sql"]["query"]
    assert end["run"]["facets"]["processing_engine"]["name"] == "dagster"

    assert [(d["namespace"], d["name"]) for d in end["inputs"]] == [
        ("s3://lake", "bronze/orders"),
        ("s3://lake", "bronze/customers"),
    ]
    [output] = end["outputs"]
    assert (output["namespace"], output["name"]) == ("s3://lake", "silver/orders")
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == ["order_id", "country"]
    assert output["outputFacets"]["outputStatistics"] == {
        **output["outputFacets"]["outputStatistics"],
        "rowCount": 95,
        "size": 4096,
        "fileCount": 2,
    }
    lineage = output["facets"]["columnLineage"]["fields"]
    assert lineage["country"]["inputFields"] == [
        {
            "namespace": "s3://lake",
            "name": "bronze/customers",
            "field": "country",
            "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}],
        }
    ]
    assert lineage["order_id"]["inputFields"][0]["transformations"] == [
        {"type": "INDIRECT", "subtype": "JOIN"}
    ]
    [checked] = checks_end["inputs"]
    assert (checked["namespace"], checked["name"]) == ("s3://lake", "silver/orders")
    assertions = checked["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert [(a["name"], a["assertion"], a["success"], a["severity"], a["column"]) for a in assertions] == [
        ("unique_order_id", "unique", True, "error", "order_id"),
        ("accepted_values_country", "accepted_values", False, "warn", "country"),
    ]
    assert assertions[0]["params"] == {"duplicate_count": 0}


def test_failures_aborts_and_pipeline_runs_carry_no_secrets(snapshot, clean_environment, monkeypatch):
    monkeypatch.setenv("MEDALLION_TEST_API_TOKEN", "tok-5e6f7a8b9c")
    warehouse_url = "postgresql://loader:hunter2hunter2@db.example:5433/wh"
    run = stage_asset_run(snapshot, _stage(snapshot, GOLD), RUN_ID, LAKE, warehouse_url)
    try:
        raise ConnectionError(
            f"COPY failed on {warehouse_url} with IAM_ROLE 'arn:aws:iam::123456789012:role/load'"
            " (token tok-5e6f7a8b9c)"
        )
    except ConnectionError as error:
        failed = as_dicts(run.start() + run.finish(error=error))
    aborted = as_dicts(run.finish(aborted=True))
    pipeline = as_dicts(
        [
            pipeline_run_event("orders_etl", RUN_ID, "START"),
            pipeline_run_event("orders_etl", RUN_ID, "FAIL", error="stage gold_daily_revenue failed"),
        ]
    )

    assert [e["eventType"] for e in failed] == ["START", "START", "FAIL", "FAIL"]
    message = failed[-1]["run"]["facets"]["errorMessage"]
    assert message["message"] == (
        "ConnectionError: COPY failed on postgresql://loader:***@db.example:5433/wh "
        "with IAM_ROLE '***' (token ***)"
    )
    assert message["programmingLanguage"] == "python" and "Traceback" in message["stackTrace"]
    text = json.dumps(failed + aborted + pipeline)
    assert "hunter2" not in text and "tok-5e6f7a8b9c" not in text and "123456789012" not in text
    assert [(o["namespace"], o["name"]) for o in failed[-1]["outputs"]] == [
        ("file", "/data/lake/gold/daily_revenue"),
        ("postgres://db.example:5433", "wh.analytics.daily_revenue_by_country"),
    ]

    assert [e["eventType"] for e in aborted] == ["START", "ABORT", "ABORT"]
    assert "errorMessage" not in aborted[-1]["run"]["facets"]
    assert [
        (e["eventType"], e["job"]["name"], e["job"]["facets"]["jobType"]["jobType"]) for e in pipeline
    ] == [("START", "orders_etl", "JOB"), ("FAIL", "orders_etl", "JOB")]
    assert pipeline[0]["run"]["runId"] == RUN_ID and "parent" not in pipeline[0]["run"]["facets"]
    assert pipeline[1]["run"]["facets"]["errorMessage"]["message"] == "stage gold_daily_revenue failed"


@pytest.mark.parametrize(
    ("location", "naming"),
    [
        (DatasetLocation("o", "s3://medallion-raw/orders/"), ("s3://medallion-raw", "orders")),
        (DatasetLocation("o", "s3://bucket"), ("s3://bucket", "/")),
        (DatasetLocation("o", "file:///data/lake/silver/x"), ("file", "/data/lake/silver/x")),
        (
            DatasetLocation(
                "g",
                "redshift://u:secret@examplecluster.abc123xyz789.us-west-1.redshift.amazonaws.com:5439/dev",
                "analytics.daily",
            ),
            ("redshift://examplecluster.us-west-1:5439", "dev.analytics.daily"),
        ),
        (
            DatasetLocation("g", "postgresql+psycopg2://u@pg:5432/wh", "daily"),
            ("postgres://pg:5432", "wh.public.daily"),
        ),
        (
            DatasetLocation("g", "duckdb:////srv/w/warehouse.duckdb", "analytics.daily"),
            ("duckdb:///srv/w/warehouse.duckdb", "warehouse.analytics.daily"),
        ),
    ],
)
def test_dataset_names_follow_the_naming_conventions(location, naming):
    assert location.naming() == naming


# ------------------------------------------------------------------------------------------- HTTP endpoint


class _Endpoint(BaseHTTPRequestHandler):
    """A lineage endpoint (Marquez's POST /api/v1/lineage) whose answer the test decides."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.received.append((self.path, body))
        self.send_response(self.server.answer(body))
        self.end_headers()

    def log_message(self, *args) -> None:
        """Quiet: one line per request would bury the test output."""


@contextmanager
def endpoint(monkeypatch, answer: Callable[[dict], int]) -> Iterator[ThreadingHTTPServer]:
    """An HTTP server on loopback, configured as the client's http transport through OPENLINEAGE__
    variables."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    server.received, server.answer = [], answer
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "http")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__URL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__ENDPOINT", "api/v1/lineage")
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_pipeline_run_reaches_an_http_endpoint_in_order_and_correlated(
    tmp_path, spark, s3_endpoint, no_openlineage_variables, monkeypatch
):
    """The real assets' wiring: a pipeline materialized through Dagster, its events caught at an endpoint."""
    bucket = f"raw-{uuid.uuid4().hex[:10]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    write_sample_data(f"s3://{bucket}", rows=200)
    seed = tmp_path / "seed"
    seed.mkdir()
    for file in SEED.glob("*.yaml"):
        (seed / file.name).write_text(file.read_text().replace("s3://medallion-raw/", f"s3://{bucket}/"))
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [seed]).rows)
    lake, warehouse_url = str(tmp_path / "lake"), f"duckdb:///{tmp_path}/w.duckdb"

    with endpoint(monkeypatch, lambda body: 200) as server:
        try:
            emitter = reconfigure_emitter()  # the process's emitter, now from the endpoint's configuration
            assert emitter.transport == "http"
            with instance_for_test() as instance:
                defs = build_definitions(store.url, lake, warehouse_url)
                report = run_pipeline(defs, store.snapshot(), store, "orders_etl", instance)
                [dagster_run] = instance.get_runs()
            assert emitter.close(timeout=30)
        finally:
            monkeypatch.undo()
            reconfigure_emitter()  # back to the suite's configuration
    # At 200 events the sample's one malformed order in 40 is 2.5%: below the default data-quality bar of 99%,
    # a warning and no failure.
    assert report.status == "success_with_warnings", report
    assert {c["severity"] for a in report.assets for c in a.checks if not c["passed"]} == {"warn"}
    reported = {asset.key: asset for asset in report.assets}
    snapshot = store.snapshot()
    gold_report, silver_report = (
        reported[MedallionTranslator().get_asset_key(snapshot.targets[t]).to_user_string()]
        for t in (GOLD, "silver_orders")
    )
    dagster_run_id = dagster_run.run_id

    assert {path for path, _ in server.received} == {"/api/v1/lineage"}
    events = [validate(body) for _, body in server.received]
    assert (emitter.sent, emitter.failed, emitter.dropped) == (len(events), 0, 0) == (22, 0, 0)
    runs: dict[str, list[int]] = {}
    for position, event in enumerate(events):
        runs.setdefault(event["run"]["runId"], []).append(position)
    assert len(runs) == 1 + 4 + 2 + 4  # the Dagster run, 4 assets, 2 queries, 4 check runs
    assert [(events[p]["eventType"], events[p]["job"]["name"]) for p in runs[dagster_run_id]] == [
        ("START", "orders_etl"),
        ("COMPLETE", "orders_etl"),
    ]

    def at(position: int) -> datetime:
        return datetime.fromisoformat(events[position]["eventTime"])

    jobs = {}
    for run_id, positions in runs.items():
        first, *_, last = [events[p] for p in positions]
        assert (first["eventType"], last["eventType"]) == ("START", "COMPLETE")
        jobs[first["job"]["name"]] = run_id
        if run_id == dagster_run_id:
            continue
        parent = first["run"]["facets"]["parent"]
        assert (
            parent["root"]["run"]["runId"] == dagster_run_id and parent["root"]["job"]["name"] == "orders_etl"
        )
        parent_positions = runs[parent["run"]["runId"]]
        # A child starts after its parent has started and ends before its parent ends. The Dagster run's own
        # events are sent once its id is known, after the run, so it is their times that say so.
        assert at(parent_positions[0]) <= at(positions[0]) and at(positions[-1]) <= at(parent_positions[-1])
    # The two bronze assets run in either order; silver waits for both, gold for silver.
    assets_in_order = [name for name in jobs if name.count(".") == 1]
    assert sorted(assets_in_order[:2]) == ["orders_etl.bronze_customers", "orders_etl.bronze_orders"]
    assert assets_in_order[2:] == ["orders_etl.silver_orders", f"orders_etl.{GOLD}"]
    assert {name for name in jobs if name.count(".") == 2} == {
        "orders_etl.silver_orders.query_1",
        f"orders_etl.{GOLD}.query_1",
        *(f"orders_etl.{t}.checks" for t in ("bronze_orders", "bronze_customers", "silver_orders", GOLD)),
    }

    gold_end = events[runs[jobs[f"orders_etl.{GOLD}"]][-1]]
    lake_output, table_output = gold_end["outputs"]
    with warehouse_from_url(warehouse_url) as warehouse:
        gold = warehouse.query("SELECT * FROM analytics.daily_revenue_by_country")
    assert lake_output["outputFacets"]["outputStatistics"]["rowCount"] == gold_report.rows == len(gold) > 0
    assert lake_output["outputFacets"]["outputStatistics"]["size"] > 0
    assert table_output["outputFacets"]["outputStatistics"]["rowCount"] == len(gold)
    assert table_output["name"] == "w.analytics.daily_revenue_by_country"
    assert [f["name"] for f in lake_output["facets"]["schema"]["fields"]] == list(gold[0])
    # The types of the files gold wrote, as Spark reads them back: the catalog's declared columns.
    assert {f["name"]: f["type"] for f in lake_output["facets"]["schema"]["fields"]} == {
        "order_date": "date",
        "country": "string",
        "revenue": "decimal(18,2)",
        "orders": "bigint",
    }
    silver_checks = events[runs[jobs["orders_etl.silver_orders.checks"]][-1]]
    assertions = silver_checks["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
    # The facet holds the stage's rules; the dq_rate check (every stage's) is Dagster's and the report's.
    assert [(a["name"], a["success"]) for a in assertions] == [
        (check["name"], check["passed"]) for check in silver_report.checks if check["name"] != "dq_rate"
    ]
    assert assertions  # the seed's silver rules


def test_a_hanging_endpoint_neither_blocks_nor_breaks_the_caller(
    snapshot, clean_environment, monkeypatch, caplog
):
    release = threading.Event()

    def hang(body: dict) -> int:
        release.wait(60)
        return 200

    run = stage_asset_run(snapshot, _stage(snapshot, GOLD), RUN_ID, LAKE, "duckdb:///w.duckdb")
    with endpoint(monkeypatch, hang) as server, caplog.at_level(logging.WARNING):
        emitter = Emitter(max_queue=4)
        for _ in range(5):
            emitter.emit(*run.start(), *run.finish(AssetResult(rows=1)))
        # Were emit() to wait on the endpoint, the test would never get here: the endpoint answers only after.
        flushed = emitter.close(timeout=0.2)
        emitter.emit(*run.start())
        sent_while_hanging, dropped_while_hanging = emitter.sent, emitter.dropped
        release.set()
    assert not flushed and sent_while_hanging == 0
    # 21 events: at most one in the sender's hands and four in the queue; the rest, and the one after close,
    # dropped.
    assert dropped_while_hanging >= 21 - 1 - 4
    assert "OpenLineage event dropped (1 so far): the queue of 4 events is full" in caplog.messages
    assert "OpenLineage: flush gave up after 0.2 s; undelivered events are dropped" in caplog.messages
    assert validate(server.received[0][1])["eventType"] == "START"


def test_an_endpoint_answering_500_is_reported_and_the_caller_carries_on(
    snapshot, clean_environment, monkeypatch, caplog
):
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__RETRY", json.dumps({"total": 0}))
    run = stage_asset_run(snapshot, _stage(snapshot, "bronze_orders"), RUN_ID, LAKE, "duckdb:///w.duckdb")
    with endpoint(monkeypatch, lambda body: 500) as server, caplog.at_level(logging.WARNING):
        emitter = Emitter()
        emitter.emit(*run.start(), *run.finish(aborted=True))
        assert emitter.close(timeout=30)
    assert (emitter.sent, emitter.failed, emitter.dropped) == (0, 2, 0)
    assert len(server.received) == 2 and all(validate(body) for _, body in server.received)
    [warning] = [m for m in caplog.messages if m.startswith("OpenLineage event not delivered")]
    assert "(1 failures so far)" in warning and "500" in warning


def test_without_configuration_events_are_files_next_to_the_dagster_storage(
    snapshot, clean_environment, tmp_path, monkeypatch
):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    run = stage_asset_run(snapshot, _stage(snapshot, "bronze_orders"), RUN_ID, LAKE, "duckdb:///w.duckdb")
    emitter = Emitter()
    assert emitter.transport == "file"
    emitter.emit(*run.start(), *run.finish(AssetResult(rows=3)))
    assert emitter.close(timeout=30) and emitter.sent == 2
    files = sorted((tmp_path / "dagster" / "openlineage").iterdir())
    assert [f.name.rsplit("-", 2)[-2:] for f in files] == [
        ["orders_etl.bronze_orders", "START.json"],
        ["orders_etl.bronze_orders", "COMPLETE.json"],
    ]
    assert all(validate(json.loads(f.read_text())) for f in files)


def test_openlineage_yml_configures_the_transport(snapshot, clean_environment, tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_HOME", str(tmp_path / "home"))
    (tmp_path / "openlineage.yml").write_text(
        f"transport:\n  type: file\n  log_file_path: {tmp_path}/events.ndjson\n  append: true\n"
    )
    run = stage_asset_run(snapshot, _stage(snapshot, "bronze_orders"), RUN_ID, LAKE, "duckdb:///w.duckdb")
    emitter = Emitter()
    emitter.emit(*run.start())
    assert emitter.close(timeout=30)
    [line] = (tmp_path / "events.ndjson").read_text().splitlines()
    assert validate(json.loads(line))["job"]["name"] == "orders_etl.bronze_orders"
    assert not (tmp_path / "home" / "openlineage").exists()


@pytest.mark.parametrize("transport", ["file", "http"])
def test_variables_set_and_unset_while_events_are_sent_lose_no_event(
    snapshot, clean_environment, tmp_path, monkeypatch, transport
):
    """A run's threads change the environment while the emitter's thread sends (Dagster's instances set and
    unset DAGSTER_HOME): no event is lost to it, whether the client reads the environment (its facets) or
    requests does (its proxies, on every HTTP request)."""
    run = stage_asset_run(snapshot, _stage(snapshot, "bronze_orders"), RUN_ID, LAKE, "duckdb:///w.duckdb")
    names = [f"MEDALLION_CHURN_{n}" for n in range(20)]
    stop = threading.Event()

    def churn() -> None:
        """About a thousand changes a second, far more than any run makes."""
        while not stop.is_set():
            for name in names:
                os.environ[name] = "1"
                time.sleep(0.001)
            for name in names:
                del os.environ[name]
                time.sleep(0.001)

    with ExitStack() as stack:
        if transport == "http":
            server = stack.enter_context(endpoint(monkeypatch, lambda body: 200))
        else:
            monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
            monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(tmp_path / "events.ndjson"))
            monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")
        emitter = Emitter(max_queue=2000)
        assert emitter.transport == transport
        churner = threading.Thread(target=churn)
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # threads take turns as often as the interpreter allows
        churner.start()
        try:
            for _ in range(100):
                emitter.emit(*run.start(), *run.finish(AssetResult(rows=1)))
            assert emitter.close(timeout=120)
        finally:
            stop.set()
            churner.join()
            sys.setswitchinterval(switch_interval)
        received = (
            [body for _, body in server.received]
            if transport == "http"
            else (tmp_path / "events.ndjson").read_text().splitlines()
        )
    assert (emitter.sent, emitter.failed, emitter.dropped) == (200, 0, 0)
    assert len(received) == 200
