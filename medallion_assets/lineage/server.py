"""`medallion lineage serve`: an HTTP endpoint for OpenLineage events, compatible with Marquez's
`POST /api/v1/lineage`, so any OpenLineage integration (Airflow, dbt, Spark) can send Medallion its lineage by
pointing its http transport here.

As Marquez does, an accepted event gets `201 Created` with an empty body. A refused one gets `400 Bad Request`
and a JSON body `{"code": 400, "message": …}` with the schema error. Bodies may be gzip-compressed (the client's
`compression: gzip`). Events are ingested one at a time, so each is checked against the graph the previous left.
"""

from __future__ import annotations

import json
import logging
import threading
import zlib
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from medallion_assets.catalog.store import CatalogStore
from medallion_assets.lineage.ingest import IngestReport, ingest_events

log = logging.getLogger(__name__)

ENDPOINT = "/api/v1/lineage"
# An OpenLineage event is kilobytes; a large Spark plan facet, a few megabytes.
MAX_BODY_BYTES = 16 * 1024 * 1024


class LineageServer(ThreadingHTTPServer):
    """A threading HTTP server that ingests the events it receives into one catalog."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: CatalogStore, lake_root: str, warehouse_url: str):
        super().__init__(address, _Handler)
        self.store, self.lake_root, self.warehouse_url = store, lake_root, warehouse_url
        self._ingesting = threading.Lock()

    def ingest(self, body: bytes) -> IngestReport:
        # One at a time: two events checked for cycles side by side could close one together.
        with self._ingesting:
            return ingest_events(self.store, [("event", body)], self.lake_root, self.warehouse_url)


class _Handler(BaseHTTPRequestHandler):
    server: LineageServer
    server_version = "medallion-lineage"

    def do_POST(self) -> None:  # noqa: N802 (the name http.server dispatches to)
        if urlsplit(self.path).path.rstrip("/") != ENDPOINT:
            return self._reply(HTTPStatus.NOT_FOUND, f"no endpoint {self.path}; send events to POST {ENDPOINT}")
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            return self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                               f"an event of {length} bytes is over the limit of {MAX_BODY_BYTES}")
        body = self.rfile.read(length)
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            # Inflated at most to the size limit: a small compressed body must not become gigabytes.
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                body = inflater.decompress(body, MAX_BODY_BYTES + 1)
            except zlib.error as error:
                return self._reply(HTTPStatus.BAD_REQUEST, f"event: not gzip: {error}")
            if len(body) > MAX_BODY_BYTES:
                return self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                   f"an event inflates to over the limit of {MAX_BODY_BYTES} bytes")
        report = self.server.ingest(body)
        if report.rejected:
            return self._reply(HTTPStatus.BAD_REQUEST, report.rejected[0].reason)
        self._reply(HTTPStatus.CREATED)

    def _reply(self, status: HTTPStatus, message: str | None = None) -> None:
        body = json.dumps({"code": status.value, "message": message}).encode() if message else b""
        self.send_response(status)
        if body:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's signature)
        log.info("%s %s", self.address_string(), format % args)
