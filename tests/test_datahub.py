"""Lineage into DataHub: the `datahub` OpenLineage transport, chosen by configuration, sends a completed
stage's datasets with their schemas, its table and column lineage and its SQL as a query entity through
acryl-datahub's REST emitter. A GMS on loopback records what it is sent; every proposal and aspect is read
back with the SDK's own schema classes, which check it."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from datahub.emitter.serialization_helper import post_json_transform
from datahub.metadata import schema_classes as dh
from datahub.metadata._internal_schema_classes import ASPECT_NAME_MAP

from medallion_assets.catalog.models import Stage
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.loading import validate_files
from medallion_assets.openlineage.datahub import DataHubConfig, metadata
from medallion_assets.openlineage.emitter import Emitter
from medallion_assets.openlineage.events import stage_asset_run
from medallion_assets.storage.lake.root import Lake
from tests.conftest import SEED

TOKEN = "dh-token-0123456789"
LAKE = Lake.resolve("s3://lake")
ORDERS = "urn:li:dataset:(urn:li:dataPlatform:s3,lake/bronze/orders,PROD)"
CUSTOMERS = "urn:li:dataset:(urn:li:dataPlatform:s3,lake/bronze/customers,PROD)"
SILVER = "urn:li:dataset:(urn:li:dataPlatform:s3,lake/silver/orders,PROD)"
# silver_orders's columns as the seed declares them: name, type, DataHub's class for it.
SILVER_FIELDS = [
    ("order_id", "string", "StringTypeClass"),
    ("customer_id", "string", "StringTypeClass"),
    ("order_ts", "timestamp", "TimeTypeClass"),
    ("amount", "decimal(12,2)", "NumberTypeClass"),
    ("country", "string", "StringTypeClass"),
]


class RecordingGms(ThreadingHTTPServer):
    """DataHub's GMS as the REST emitter sees it: every request recorded, answered with `status`."""

    def __init__(self, status: int = 200):
        super().__init__(("127.0.0.1", 0), _GmsHandler)
        self.status = status
        self.requests: list[tuple[str, dict[str, str], dict]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"


class _GmsHandler(BaseHTTPRequestHandler):
    server: RecordingGms

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, dict(self.headers), body))
        reply = json.dumps(
            {"value": []} if self.server.status == 200 else {"message": "GMS is down"}
        ).encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's signature)
        pass


def gms_server(status: int) -> Iterator[RecordingGms]:
    gms = RecordingGms(status)
    threading.Thread(target=gms.serve_forever, daemon=True).start()
    yield gms
    gms.shutdown()
    gms.server_close()


@pytest.fixture
def gms() -> Iterator[RecordingGms]:
    yield from gms_server(200)


@pytest.fixture
def failing_gms() -> Iterator[RecordingGms]:
    yield from gms_server(500)


def datahub_emitter(monkeypatch, url: str) -> Emitter:
    """The emitter as a deployment configures it: OpenLineage's variables naming the datahub transport."""
    for name in ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG", "OPENLINEAGE_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "datahub")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__URL", url)
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TOKEN", TOKEN)
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TIMEOUT", "5")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__RETRIES", "0")
    return Emitter()


@pytest.fixture
def silver_orders(tmp_path):
    """The seed's silver_orders stage with two column lineage rows: the run of a real catalog stage."""
    extra = tmp_path / "lineage.yaml"
    extra.write_text(
        "column_lineage:\n"
        "  - {downstream: silver_orders, downstream_column: country, upstream: bronze_customers,"
        " upstream_column: country}\n"
        "  - {downstream: silver_orders, downstream_column: amount, upstream: bronze_orders,"
        " upstream_column: amount}\n"
    )
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED, extra]).rows)
    snapshot = store.snapshot()
    [stage] = [s for s in snapshot.rows_of("stages", Stage).values() if s.target_id == "silver_orders"]
    return stage, stage_asset_run(snapshot, stage, str(uuid.uuid4()), LAKE, "duckdb:///unused.duckdb")


def proposals(gms: RecordingGms) -> list[tuple[str, str, object]]:
    """(entity urn, aspect name, aspect) of every proposal received, each read and checked by the SDK."""
    received = []
    for path, _, body in gms.requests:
        assert path == "/aspects?action=ingestProposalBatch"
        for raw in body["proposals"]:
            # Rest.li's JSON names each union member by type: the SDK's reading of it undoes that first.
            proposal = dh.MetadataChangeProposalClass.from_obj(post_json_transform(raw))
            assert proposal.validate(), raw
            assert proposal.changeType == dh.ChangeTypeClass.UPSERT
            assert proposal.aspect is not None and proposal.aspect.contentType == "application/json"
            aspect = ASPECT_NAME_MAP[proposal.aspectName].from_obj(
                post_json_transform(json.loads(proposal.aspect.value))
            )
            assert aspect.validate(), proposal.aspect.value
            received.append((proposal.entityUrn, proposal.aspectName, aspect))
    return received


def test_a_completed_stage_reaches_datahub_with_schemas_lineage_and_its_sql(gms, monkeypatch, silver_orders):
    stage, run = silver_orders
    emitter = datahub_emitter(monkeypatch, gms.url)
    assert emitter.transport == "datahub"
    emitter.emit(*run.start(), *run.finish())
    assert emitter.close(timeout=30)
    assert (emitter.sent, emitter.failed) == (4, 0)  # START, the query's START and COMPLETE, COMPLETE

    # Only the asset's COMPLETE names datasets: one batch, with the token.
    assert len(gms.requests) == 1
    assert gms.requests[0][1]["Authorization"] == f"Bearer {TOKEN}"
    received = proposals(gms)
    query = next(urn for urn, name, _ in received if name == "queryProperties")
    # The bronze inputs' events carry no schema facet (their columns are the raw files'): only silver's.
    assert [(urn, name) for urn, name, _ in received] == [
        (SILVER, "schemaMetadata"),
        (SILVER, "upstreamLineage"),
        (query, "queryProperties"),
        (query, "querySubjects"),
    ]
    aspects = {(urn, name): aspect for urn, name, aspect in received}
    silver_schema = aspects[SILVER, "schemaMetadata"]
    assert (silver_schema.platform, silver_schema.schemaName) == ("urn:li:dataPlatform:s3", SILVER)
    assert [
        (f.fieldPath, f.nativeDataType, type(f.type.type).__name__) for f in silver_schema.fields
    ] == SILVER_FIELDS

    lineage = aspects[SILVER, "upstreamLineage"]
    assert [(u.dataset, u.type, u.query) for u in lineage.upstreams] == [
        (ORDERS, "TRANSFORMED", query),
        (CUSTOMERS, "TRANSFORMED", query),
    ]
    assert sorted((e.upstreams, e.downstreams, e.query) for e in lineage.fineGrainedLineages) == [
        (
            [f"urn:li:schemaField:({CUSTOMERS},country)"],
            [f"urn:li:schemaField:({SILVER},country)"],
            query,
        ),
        ([f"urn:li:schemaField:({ORDERS},amount)"], [f"urn:li:schemaField:({SILVER},amount)"], query),
    ]

    statement = aspects[query, "queryProperties"].statement
    assert (statement.value, statement.language) == (stage.transform_sql, "SQL")
    assert [s.entity for s in aspects[query, "querySubjects"].subjects] == [
        ORDERS,
        CUSTOMERS,
        SILVER,
        f"urn:li:schemaField:({CUSTOMERS},country)",
        f"urn:li:schemaField:({SILVER},country)",
        f"urn:li:schemaField:({ORDERS},amount)",
        f"urn:li:schemaField:({SILVER},amount)",
    ]


def test_a_gms_that_fails_costs_the_run_nothing_and_the_token_never_shows(
    failing_gms, monkeypatch, silver_orders, caplog
):
    _, run = silver_orders
    emitter = datahub_emitter(monkeypatch, failing_gms.url)
    emitter.emit(*run.finish())
    assert emitter.close(timeout=60)
    assert (emitter.sent, emitter.failed) == (2, 1)  # the query's COMPLETE sends nothing; the asset's fails
    assert len(failing_gms.requests) == 1  # no retry: configured so
    warnings = [r.getMessage() for r in caplog.records if "OpenLineage event not delivered" in r.getMessage()]
    assert len(warnings) == 1
    assert TOKEN not in caplog.text


def test_the_transport_needs_the_gms_url():
    with pytest.raises(ValueError, match=r"^the datahub transport needs url: DataHub's GMS, as http://"):
        DataHubConfig.from_dict({"type": "datahub"})
    assert DataHubConfig.from_dict(
        {"url": "http://gms:8080", "timeout": "3", "retries": "2"}
    ) == DataHubConfig(url="http://gms:8080", timeout=3.0, retries=2)


def test_datasets_are_named_as_datahub_names_them_from_their_openlineage_naming():
    def urns(*datasets: tuple[str, str]) -> list[str]:
        event = {
            "eventTime": "2026-11-03T04:00:00Z",
            "inputs": [],
            "outputs": [
                {"namespace": namespace, "name": name, "facets": {"schema": {"fields": [{"name": "id"}]}}}
                for namespace, name in datasets
            ],
        }
        return [proposal.entityUrn for proposal in metadata(event, "DEV")]

    assert urns(
        ("s3://lake", "silver/orders"),
        ("file", "/data/raw/orders"),
        ("postgres://shopdb:5432", "shop.public.orders"),
        ("bigquery", "shop-prod.marts.revenue"),
    ) == [
        "urn:li:dataset:(urn:li:dataPlatform:s3,lake/silver/orders,DEV)",
        "urn:li:dataset:(urn:li:dataPlatform:file,data/raw/orders,DEV)",
        "urn:li:dataset:(urn:li:dataPlatform:postgres,shop.public.orders,DEV)",
        "urn:li:dataset:(urn:li:dataPlatform:bigquery,shop-prod.marts.revenue,DEV)",
    ]
