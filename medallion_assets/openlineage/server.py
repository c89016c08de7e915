"""`medallion lineage serve`: an HTTP endpoint for OpenLineage events, compatible with Marquez's
`POST /api/v1/lineage`, so any OpenLineage integration (Airflow, dbt, Spark) can send Medallion its lineage by
pointing its http transport here.

As Marquez does, an accepted event gets `201 Created` with an empty body; one taken with a warning (an
`eventTime` without a UTC offset, read as UTC) gets `{"code": 201, "warnings": […]}` as its body. A refused
one gets `400 Bad Request` and a JSON body `{"code": 400, "message": …}` with the schema error; every other
failure (no or a bad Content-Length, a body over the limit or too slow, a missing bearer token) gets its
status and a JSON body too. Bodies may be gzip-compressed (the client's `compression: gzip`). Events are
ingested one at a time, so each is checked against the graph the previous left. That graph and the recovery
paths are kept between events and read again only when the catalog changed otherwise, so an event's cost does
not grow with the catalog.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import socket
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import urlsplit

from medallion_assets.catalog.store import CatalogStore
from medallion_assets.openlineage.ingest import CatalogLineage, IngestReport
from medallion_assets.redaction import printable
from medallion_assets.storage.lake.root import Lake

log = logging.getLogger(__name__)

ENDPOINT = "/api/v1/lineage"
# An OpenLineage event is kilobytes; a large Spark plan facet, a few megabytes.
MAX_BODY_BYTES = 16 * 1024 * 1024
# A client that sends nothing for this long (a half-open connection, a trickled body) is dropped.
READ_TIMEOUT_SEC = 10.0
WORKERS = 8
# Connections the kernel holds while every worker is busy: a burst of a few hundred is queued, not reset.
LISTEN_BACKLOG = 1024


class LineageServer(HTTPServer):
    """An HTTP server that ingests the events it receives into one catalog, with a bounded pool of workers.

    With a `token`, every request must carry `Authorization: Bearer <token>`. Without one it listens only on
    a loopback address: anyone who can reach the endpoint can add lineage to the catalog.
    """

    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        store: CatalogStore,
        lake: Lake,
        warehouse_url: str,
        token: str | None = None,
        workers: int = WORKERS,
        read_timeout: float = READ_TIMEOUT_SEC,
    ):
        if not token and not _is_loopback(address[0]):
            raise ValueError(
                f"lineage serve on {address[0]} needs a bearer token (--token, or the environment "
                "variable MEDALLION_LINEAGE_TOKEN); only a loopback address may go without"
            )
        super().__init__(address, _Handler)
        self.store, self.token, self.read_timeout = store, token, read_timeout
        self.lineage = CatalogLineage(store, lake, warehouse_url)
        self._ingesting = threading.Lock()
        self._workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lineage-serve")

    def ingest(self, body: bytes) -> IngestReport:
        # One at a time: two events checked for cycles side by side could close one together.
        with self._ingesting:
            return self.lineage.ingest([("event", body)])

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        """Handled by a worker of the pool; accepted connections wait for one in its queue."""
        self._workers.submit(self._handle, request, client_address)

    def _handle(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 (what socketserver does: log it, close the connection, serve on)
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self._workers.shutdown(wait=True, cancel_futures=True)
        self.lineage.close()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _BodyRefused(Exception):
    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    server: LineageServer
    server_version = "medallion-lineage"

    # StreamRequestHandler declares `timeout` a plain class attribute; setup() only reads it, so a property
    # serves.
    @property
    def timeout(self) -> float:  # type: ignore[override]
        """The socket timeout of every read, request line and headers included (StreamRequestHandler's)."""
        return self.server.read_timeout

    def do_POST(self) -> None:  # noqa: N802 (the name http.server dispatches to)
        try:
            self._post()
        except _BodyRefused as refused:
            self._reply(refused.status, str(refused))
        except TimeoutError:
            self._reply(HTTPStatus.REQUEST_TIMEOUT, f"no byte of the body for {self.timeout:g} s")
        except Exception as error:  # noqa: BLE001 (every failure gets a JSON reply, never a dropped connection)
            log.exception("lineage event from %s failed", self.address_string())
            self._reply(
                HTTPStatus.INTERNAL_SERVER_ERROR, f"the event could not be ingested: {type(error).__name__}"
            )

    def _post(self) -> None:
        if urlsplit(self.path).path.rstrip("/") != ENDPOINT:
            return self._reply(
                HTTPStatus.NOT_FOUND, f"no endpoint {self.path}; send events to POST {ENDPOINT}"
            )
        if self.server.token and not self._authorized(self.server.token):
            return self._reply(
                HTTPStatus.UNAUTHORIZED,
                "a bearer token is required: Authorization: Bearer <token>",
                {"WWW-Authenticate": 'Bearer realm="medallion-lineage"'},
            )
        body = self._body()
        report = self.server.ingest(body)
        if report.rejected:
            return self._reply(HTTPStatus.BAD_REQUEST, report.rejected[0].reason)
        if report.warnings:  # taken, with what the sender should know (a time read as UTC)
            warnings = [warning.reason for warning in report.warnings]
            return self._reply(
                HTTPStatus.CREATED, body={"code": HTTPStatus.CREATED.value, "warnings": warnings}
            )
        self._reply(HTTPStatus.CREATED)

    def _authorized(self, token: str) -> bool:
        scheme, _, presented = self.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())

    def _body(self) -> bytes:
        """The body, read to exactly its declared length, which must be there and within the limit."""
        declared = self.headers.get("Content-Length")
        if declared is None:
            raise _BodyRefused(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header is required")
        if not (declared.isascii() and declared.strip().isdigit()):
            raise _BodyRefused(
                HTTPStatus.BAD_REQUEST, f"Content-Length {declared!r} is not a number of bytes"
            )
        length = int(declared)
        if length > MAX_BODY_BYTES:
            raise _BodyRefused(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"an event of {length} bytes is over the limit of {MAX_BODY_BYTES}",
            )
        body = self.rfile.read(length)
        if len(body) != length:
            raise _BodyRefused(HTTPStatus.BAD_REQUEST, f"the body ended after {len(body)} of {length} bytes")
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            # Inflated at most to the size limit: a small compressed body must not become gigabytes.
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                body = inflater.decompress(body, MAX_BODY_BYTES + 1)
            except zlib.error as error:
                raise _BodyRefused(HTTPStatus.BAD_REQUEST, f"event: not gzip: {error}") from None
            if len(body) > MAX_BODY_BYTES:
                raise _BodyRefused(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"an event inflates to over the limit of {MAX_BODY_BYTES} bytes",
                )
        return body

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a bad request line, an unsupported method) as JSON too."""
        self.close_connection = True
        self._reply(HTTPStatus(code), message or HTTPStatus(code).phrase)

    def _reply(
        self,
        status: HTTPStatus,
        message: str | None = None,
        headers: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        if message:
            body = {"code": status.value, "message": message}
        content = json.dumps(body).encode() if body else b""
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if content:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        log.info("%s %s", self.address_string(), printable(format % args))
