"""`lineage serve` under attack, through raw sockets: every request gets a JSON answer, none takes it over."""

from __future__ import annotations

import json
import socket

import pytest
from click.testing import CliRunner

from medallion_assets.cli import main
from medallion_assets.openlineage.ingest import MAX_DATASETS_PER_EVENT, catalog_names
from medallion_assets.openlineage.server import MAX_BODY_BYTES, LineageServer
from medallion_assets.recovery.routes import CatalogRoutes
from medallion_assets.storage.lake.root import Lake
from tests.test_lineage_ingest import AIRFLOW, EXPORT, event

TOKEN = "s3cr3t-lineage-token"


@pytest.fixture
def serve(catalog, serving):
    """Start a real server on the seed catalog with the given options."""
    return lambda **options: serving(catalog, **options)


def exchange(server: LineageServer, raw: bytes, half_close: bool = False) -> tuple[int, dict | None]:
    """Send raw bytes, read the whole reply; its status and JSON body (None when empty)."""
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=30) as connection:
        connection.sendall(raw)
        if half_close:
            connection.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := connection.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else None


def post(body: bytes, *headers: str) -> bytes:
    lines = ["POST /api/v1/lineage HTTP/1.1", "Host: 127.0.0.1", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def external_rows(catalog) -> list:  # noqa: F811
    return catalog.table_rows("external_lineage")


@pytest.mark.parametrize(
    "headers, status, message",
    [
        ([], 411, "a Content-Length header is required"),
        (["Content-Length: -1"], 400, "Content-Length '-1' is not a number of bytes"),
        (["Content-Length: 12abc"], 400, "Content-Length '12abc' is not a number of bytes"),
        (["Content-Length: 0x10"], 400, "Content-Length '0x10' is not a number of bytes"),
        (
            [f"Content-Length: {MAX_BODY_BYTES + 1}"],
            413,
            f"an event of {MAX_BODY_BYTES + 1} bytes is over the limit of {MAX_BODY_BYTES}",
        ),
        (["Content-Length: 1000"], 400, "the body ended after 7 of 1000 bytes"),
    ],
)
def test_a_missing_negative_invalid_or_false_length_gets_a_json_refusal(
    serve, catalog, headers, status, message
):  # noqa: F811
    server = serve()
    raw = post(b'{"a": 1}'[:7], *headers)
    assert exchange(server, raw, half_close=True) == (status, {"code": status, "message": message})
    assert external_rows(catalog) == []


def test_a_standard_facet_that_names_a_version_medallion_has_cannot_escape_its_schema(
    serve,
    catalog,  # noqa: F811
):
    # A facet naming a version Medallion lacks is held to the core facet rules only (as Marquez takes it); one
    # naming a version Medallion has is held to that schema, whatever its fragment points at.
    bad = {
        **EXPORT,
        "run": {
            **EXPORT["run"],
            "facets": {
                "nominalTime": {
                    "_producer": AIRFLOW,
                    "nominalEndTime": "2026-11-02T03:00:00Z",
                    "_schemaURL": "https://openlineage.io/spec/facets/1-0-1/NominalTimeRunFacet.json#/$defs/NoSuchFacet",
                }
            },
        },
    }
    body = json.dumps(bad).encode()
    status, reply = exchange(server := serve(), post(body, f"Content-Length: {len(body)}"))
    assert (status, reply) == (
        400,
        {"code": 400, "message": "run.facets.nominalTime: 'nominalStartTime' is a required property"},
    )
    assert server and external_rows(catalog) == []


def test_an_event_naming_too_many_datasets_is_refused(serve, catalog):  # noqa: F811
    many = event(
        AIRFLOW,
        "airflow/fan.out",
        [("s3://in", f"d{i}") for i in range(300)],
        [("s3://out", f"d{i}") for i in range(300)],
    )
    body = json.dumps(many).encode()
    assert exchange(serve(), post(body, f"Content-Length: {len(body)}")) == (
        400,
        {
            "code": 400,
            "message": f"event: names 600 datasets; an event may name at most {MAX_DATASETS_PER_EVENT}",
        },
    )
    assert external_rows(catalog) == []


def test_with_a_token_only_requests_that_carry_it_are_ingested(serve, catalog):  # noqa: F811
    server = serve(token=TOKEN)
    body = json.dumps(EXPORT).encode()
    refusal = {"code": 401, "message": "a bearer token is required: Authorization: Bearer <token>"}
    for authorization in ([], ["Authorization: Bearer wrong"], [f"Authorization: Basic {TOKEN}"]):
        assert exchange(server, post(body, f"Content-Length: {len(body)}", *authorization)) == (401, refusal)
    assert external_rows(catalog) == []
    accepted = exchange(server, post(body, f"Content-Length: {len(body)}", f"Authorization: Bearer {TOKEN}"))
    assert accepted == (201, None)
    assert len(external_rows(catalog)) == 1


def test_serving_beyond_loopback_without_a_token_is_refused(catalog, tmp_path):  # noqa: F811
    with pytest.raises(ValueError) as refused:
        LineageServer(("0.0.0.0", 0), catalog, Lake.resolve(tmp_path), f"duckdb:///{tmp_path}/w.duckdb")
    assert str(refused.value) == (
        "lineage serve on 0.0.0.0 needs a bearer token (--token, or the environment variable "
        "MEDALLION_LINEAGE_TOKEN); only a loopback address may go without"
    )
    result = CliRunner().invoke(main, ["lineage", "serve", "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code == 2 and "needs a bearer token" in result.stderr


def test_a_burst_of_200_connections_each_gets_its_answer(serve):
    server = serve(workers=4)
    connections = [
        socket.create_connection(("127.0.0.1", server.server_port), timeout=60) for _ in range(200)
    ]
    for connection in connections:
        connection.sendall(b"GET /api/v1/lineage HTTP/1.1\r\nHost: x\r\n\r\n")
    replies = []
    for connection in connections:
        with connection:
            reply = b""
            while chunk := connection.recv(65536):
                reply += chunk
        replies.append(json.loads(reply.partition(b"\r\n\r\n")[2]))
    assert replies == [{"code": 501, "message": "Unsupported method ('GET')"}] * 200


def test_half_open_connections_are_dropped_and_do_not_hold_the_workers(serve, catalog):  # noqa: F811
    server = serve(workers=2, read_timeout=0.5)
    silent = [socket.create_connection(("127.0.0.1", server.server_port), timeout=30) for _ in range(2)]
    trickle = socket.create_connection(("127.0.0.1", server.server_port), timeout=30)
    trickle.sendall(post(b"{", "Content-Length: 500"))
    body = json.dumps(EXPORT).encode()
    assert exchange(server, post(body, f"Content-Length: {len(body)}")) == (201, None)
    assert [connection.recv(1) for connection in silent] == [b"", b""]  # closed by the server
    status_line = trickle.recv(65536).split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.0 408 Request Timeout"
    for connection in [*silent, trickle]:
        connection.close()


def test_dataset_names_with_terminal_escapes_are_printed_escaped(serve, catalog):  # noqa: F811
    hostile = event(
        AIRFLOW,
        "airflow/evil.job",
        [("s3://in", "\x1b]0;owned\x07\x1b[2J")],
        [("s3://medallion-raw", "orders/x.csv")],
    )
    body = json.dumps(hostile).encode()
    assert exchange(serve(), post(body, f"Content-Length: {len(body)}")) == (201, None)
    shown = CliRunner().invoke(main, ["lineage", "show", "orders_raw", "--upstream"])
    assert shown.exit_code == 0
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "s3://in/\\x1b]0;owned\\x07\\x1b[2J → orders_raw" in shown.stdout


def test_an_event_naming_the_replica_as_an_output_does_not_change_what_runs_read(serve, catalog, tmp_path):  # noqa: F811
    """The attack: an external job 'writes' the orders replica. When the primary is down, the run must still
    read the replica the catalog declares, not follow the event's path to a dataset Medallion cannot read."""
    replica = tmp_path / "replica" / "orders"
    replica.mkdir(parents=True)
    (replica / "part-0.csv").write_text(
        "order_id,customer_id,order_ts,amount\no1,c1,2024-01-01T00:00:00Z,1.00\n"
    )
    for source_id, folder in (("orders_raw", tmp_path / "gone" / "orders"), ("orders_raw_replica", replica)):
        source = catalog.snapshot().sources[source_id]
        catalog.upsert({"sources": [source.model_copy(update={"s3_path": str(folder)})]})
    snapshot = catalog.snapshot()
    names = {
        dataset: naming
        for naming, dataset in catalog_names(
            snapshot, Lake.resolve(tmp_path / "lake"), f"duckdb:///{tmp_path}/warehouse.duckdb"
        ).items()
    }
    takeover = event(
        AIRFLOW, "airflow/evil.feed", [("s3://attacker", "orders")], [names["orders_raw_replica"]]
    )
    body = json.dumps(takeover).encode()
    assert exchange(serve(), post(body, f"Content-Length: {len(body)}")) == (201, None)

    snapshot = catalog.snapshot()
    chosen = CatalogRoutes(catalog, snapshot).readable_source(snapshot.stage_producing("bronze_orders"))
    assert chosen.source_id == "orders_raw_replica"
    [reroute] = catalog.audit_entries(event="reroute")
    assert reroute["details"]["path"] == ["orders_raw_replica", "bronze_orders"]
