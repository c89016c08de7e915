"""Lineage from other tools: OpenLineage events of Airflow, dbt, Spark jobs outside Medallion…, read as
newline-delimited JSON (`medallion lineage ingest`) or received one by one over HTTP (`lineage serve`).

Each event is checked against the specification; every edge it declares (each input → each output of its job)
becomes an `external_lineage` row, so the catalog graph, recovery paths and `medallion lineage` cross
orchestrators. A dataset the event names by one of Medallion's own OpenLineage names (a source's prefix, a
file inside it, a lake folder, a warehouse table) is that catalog dataset; any other is a node of its own,
named `namespace/name`. Events Medallion emitted itself add nothing: the catalog already holds their lineage.

A bad event (not JSON, refused by the specification, naming a time or a namespace Medallion cannot use, or
closing a cycle in the graph) is rejected with the reason and where it was; so is one whose handling fails in
a way nobody foresaw, with the error's type and message. The others of the same batch are ingested, all in one
catalog write.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import networkx as nx
from sqlalchemy import Connection

from medallion_assets.catalog.models import ExternalLineage
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore, change_count
from medallion_assets.openlineage.events import PRODUCER
from medallion_assets.openlineage.naming import DatasetLocation, dataset_location
from medallion_assets.openlineage.schema_validation import EventInvalid, validate_event
from medallion_assets.recovery.graph import add_external_lineage, build_graph
from medallion_assets.recovery.paths import RankedPaths, store_recovery_paths
from medallion_assets.redaction import printable, scrub
from medallion_assets.storage.lake.root import Lake

log = logging.getLogger(__name__)

MEDALLION_PRODUCER = PRODUCER.rsplit(":", 1)[0] + ":"
# Every input × output pair of an event is an edge: without a cap, one small event could add a million edges.
MAX_DATASETS_PER_EVENT = 100
# Marquez's limit on a namespace's length; a dataset id is made of it.
MAX_NAMESPACE = 1024
# A value of the event quoted back in a reason is cut here, so a hostile one cannot drown the message; so is
# the message of an unexpected error.
MAX_QUOTED = 80
MAX_ERROR_MESSAGE = 300


@dataclass(frozen=True)
class Rejection:
    """An event left out, where it was (`events.ndjson:3`, `event`) and why; or, in a report's warnings, an
    event taken with something its sender should know."""

    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass
class IngestReport:
    """What a batch of events did: events accepted, edges written, datasets new to the graph, rejections, and
    warnings about accepted events (a time read as UTC), each placed as a rejection is."""

    accepted: int = 0
    edges: list[ExternalLineage] = field(default_factory=list)
    new_datasets: list[str] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    warnings: list[Rejection] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"ingested {self.accepted} event(s): {len(self.edges)} edge(s), {len(self.new_datasets)} new "
            f"dataset(s); rejected {len(self.rejected)}"
        )


def catalog_names(snapshot: CatalogSnapshot, lake: Lake, warehouse_url: str) -> dict[tuple[str, str], str]:
    """Medallion's datasets by their OpenLineage (namespace, name), as its own events name them: a source's
    raw prefix, a target's lake folder and, for a warehouse target, its table."""
    locations = [
        dataset_location(snapshot, dataset_id, lake) for dataset_id in (*snapshot.sources, *snapshot.targets)
    ]
    locations += [
        DatasetLocation(t.target_id, warehouse_url, t.location)
        for t in snapshot.targets.values()
        if t.kind == "warehouse"
    ]
    return {location.naming(): location.dataset_id for location in locations}


def dataset_id(namespace: str, name: str, names: dict[tuple[str, str], str]) -> str:
    """The catalog dataset an OpenLineage dataset is, a file inside a catalog dataset's folder included; else
    `namespace/name`."""
    path = name
    while True:
        if (known := names.get((namespace, path))) is not None:
            return known
        if "/" not in path.strip("/"):
            return f"{namespace.rstrip('/')}/{name.lstrip('/')}"
        path = path.rstrip("/").rsplit("/", 1)[0]


def _quoted(value: str) -> str:
    return repr(printable(value if len(value) <= MAX_QUOTED else value[:MAX_QUOTED] + "…"))


def _moment(event: dict[str, Any]) -> datetime:
    """The event's time (ISO 8601); the specification's schemas take any text, formats being annotations."""
    text: str = event["eventTime"]
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise EventInvalid(
            f"eventTime: {_quoted(text)} is not a time (ISO 8601, as 2026-11-02T03:00:00Z)"
        ) from None


def _event_time(event: dict[str, Any]) -> str:
    """The event's time as the catalog keeps it, with its UTC offset: one written without (as OpenLineage's
    and Marquez's own examples write it) is read as UTC."""
    moment = _moment(event)
    return event["eventTime"] if moment.tzinfo else moment.replace(tzinfo=UTC).isoformat()


def _time_warning(event: dict[str, Any]) -> str | None:
    """What the sender should know about how its event's time was read: as UTC, when it has no offset. A time
    that is none is refused where it is read (`_event_time`)."""
    try:
        naive = _moment(event).tzinfo is None
    except EventInvalid:
        return None
    return f"eventTime: {_quoted(event['eventTime'])} has no UTC offset: read as UTC" if naive else None


def _run_id(event: dict[str, Any]) -> str | None:
    """The run's id, a UUID as the specification and Marquez have it (JobEvents have no run)."""
    if "run" not in event:
        return None
    text: str = event["run"]["runId"]
    try:
        uuid.UUID(text)
    except ValueError:
        raise EventInvalid(f"run.runId: {_quoted(text)} is not a UUID") from None
    return text


def _dataset_ids(event: dict[str, Any], side: str, names: dict[tuple[str, str], str]) -> list[str]:
    ids = []
    for index, dataset in enumerate(event.get(side) or []):
        namespace = dataset["namespace"]
        if not namespace.strip() or len(namespace) > MAX_NAMESPACE:
            raise EventInvalid(
                f"{side}[{index}].namespace: {_quoted(namespace)} names no place; a namespace has 1 to "
                f"{MAX_NAMESPACE} characters, not only blanks"
            )
        ids.append(dataset_id(namespace, dataset["name"], names))
    return ids


def _edges(event: dict[str, Any], names: dict[tuple[str, str], str]) -> list[ExternalLineage]:
    if event["producer"].startswith(MEDALLION_PRODUCER) or "job" not in event:
        return []
    named = len(event.get("inputs") or []) + len(event.get("outputs") or [])
    if named > MAX_DATASETS_PER_EVENT:
        raise EventInvalid(
            f"event: names {named} datasets; an event may name at most {MAX_DATASETS_PER_EVENT}"
        )
    event_time = _event_time(event)
    run_id = _run_id(event)
    job = f"{event['job']['namespace']}/{event['job']['name']}"
    inputs = _dataset_ids(event, "inputs", names)
    outputs = _dataset_ids(event, "outputs", names)
    # A job that reads and writes one table (an incremental model, a MERGE) adds no edge between datasets.
    return [
        ExternalLineage(
            upstream=u,
            downstream=v,
            job=job,
            producer=event["producer"],
            run_id=run_id,
            event_time=event_time,
        )
        for u in dict.fromkeys(inputs)
        for v in dict.fromkeys(outputs)
        if u != v
    ]


def _closes_cycle(graph: nx.DiGraph, edges: list[ExternalLineage]) -> str | None:
    """The cycle the edges, added in turn, would close in `graph`, printed; the graph is left as it was."""
    new_nodes = {node for edge in edges for node in (edge.upstream, edge.downstream) if node not in graph}
    added = []
    try:
        for edge in edges:
            if (
                edge.downstream in graph
                and edge.upstream in graph
                and nx.has_path(graph, edge.downstream, edge.upstream)
            ):
                return "cycle: " + " → ".join(
                    [edge.upstream, *nx.shortest_path(graph, edge.downstream, edge.upstream)]
                )
            if not graph.has_edge(edge.upstream, edge.downstream):
                graph.add_edge(edge.upstream, edge.downstream)
                added.append((edge.upstream, edge.downstream))
        return None
    finally:
        graph.remove_edges_from(added)
        graph.remove_nodes_from(new_nodes)


class CatalogLineage:
    """What ingesting events checks them against and updates: the catalog graph, Medallion's OpenLineage names
    and every dataset's ranked recovery paths, read once and kept between batches.

    Each batch runs in one transaction under the catalog-wide lock, on a connection this object keeps. It
    reads the whole catalog again only when its structure changed since the previous batch ended (the
    catalog's change count, moved by triggers however a loadable table is written, and not by the audit log,
    bookmarks or the other runtime tables a busy catalog writes all the time); else its accepted edges are
    added to the kept graph and only the datasets downstream of them are ranked again and stored. The catalog
    is read outside the lock, so that catalog writers do not wait for it, unless it changed again meanwhile.
    Not thread-safe: one batch at a time.
    """

    def __init__(self, store: CatalogStore, lake: Lake, warehouse_url: str):
        self.store, self.lake, self.warehouse_url = store, lake, warehouse_url
        self.reloads = 0
        self._connection: Connection | None = None
        self._changes: int | None = None  # the catalog's change count where this object's view stands
        self._graph = nx.DiGraph()
        self._names: dict[tuple[str, str], str] = {}
        self._ranked: RankedPaths | None = None
        self._paths_stored = False

    def ingest(self, documents: Iterable[tuple[str, str | bytes]]) -> IngestReport:
        """Ingest events given as (where, JSON text); accepted ones are written together with the recovery
        paths they change (all of them, the first time after the catalog was read). A batch with nothing
        accepted writes nothing."""
        if self._connection is None:
            self._connection = self.store.engine.connect()
        try:
            # Two tries: the second ingests whatever the catalog then holds.
            last_try = False
            while True:
                with self.store.locked(self._connection) as connection:
                    changes = change_count(connection)
                    if changes == self._changes or last_try:
                        if changes != self._changes:
                            self._read_catalog()
                        report = self._ingest(connection, documents)
                        # After this batch's own writes: the next batch reads the catalog again only if
                        # someone else changed it meanwhile.
                        self._changes = change_count(connection)
                        return report
                # Changed: read it outside the lock, so catalog writers do not wait, then check nothing moved.
                self._read_catalog()
                self._changes = changes
                last_try = True
        except BaseException:
            # The transaction rolled back, but the kept graph may hold what it did: read everything again, on
            # a new connection in case this one broke.
            self._changes = None
            self.close()
            raise

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _read_catalog(self) -> None:
        snapshot = self.store.snapshot()
        self._names = catalog_names(snapshot, self.lake, self.warehouse_url)
        self._graph = build_graph(snapshot)
        self._ranked = RankedPaths(self._graph)
        self._paths_stored = False
        self.reloads += 1

    def _ingest(self, connection: Connection, documents: Iterable[tuple[str, str | bytes]]) -> IngestReport:
        report = IngestReport()
        rows: dict[tuple[Any, ...], ExternalLineage] = {}
        new_datasets: set[str] = set()
        for where, body in documents:
            try:
                event = validate_event(_parse(body))
                edges = _edges(event, self._names)
                if cycle := _closes_cycle(self._graph, edges):
                    raise EventInvalid(cycle)
                warning = _time_warning(event)
            except EventInvalid as error:
                report.rejected.append(Rejection(where, str(error)))
                continue
            except Exception as error:  # noqa: BLE001 (one event's failure never loses the others)
                log.warning("lineage event %s could not be ingested", where, exc_info=True)
                report.rejected.append(Rejection(where, _unexpected(error)))
                continue
            report.accepted += 1
            if warning:
                report.warnings.append(Rejection(where, warning))
            new_datasets.update(
                n for edge in edges for n in (edge.upstream, edge.downstream) if n not in self._graph
            )
            add_external_lineage(self._graph, edges)
            rows.update((edge.key(), edge) for edge in edges)
        if rows:
            assert self._ranked is not None, "ingest reads the catalog before the first batch"
            self.store.write(connection, {"external_lineage": list(rows.values())})
            changed = self._ranked.edges_added([(edge.upstream, edge.downstream) for edge in rows.values()])
            if self._paths_stored:
                store_recovery_paths(connection, self._ranked.paths(changed), changed)
            else:
                store_recovery_paths(connection, self._ranked.paths())
                self._paths_stored = True
        report.edges = list(rows.values())
        report.new_datasets = sorted(new_datasets)
        return report


def ingest_events(
    store: CatalogStore, documents: Iterable[tuple[str, str | bytes]], lake: Lake, warehouse_url: str
) -> IngestReport:
    """Ingest one batch of events given as (where, JSON text): accepted ones are written together, with the
    recovery paths they change."""
    with closing(CatalogLineage(store, lake, warehouse_url)) as lineage:
        return lineage.ingest(documents)


def _unexpected(error: Exception) -> str:
    message = scrub(str(error))
    if len(message) > MAX_ERROR_MESSAGE:
        message = message[:MAX_ERROR_MESSAGE] + "…"
    return f"event: could not be ingested: {type(error).__name__}: {message}"


def _parse(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise EventInvalid(f"event: not JSON: {error}") from None


def lines(stream: Iterable[bytes], name: str) -> Iterable[tuple[str, bytes]]:
    """The events of newline-delimited JSON, each placed as `name:line`; blank lines are skipped. Bytes, so
    that a line that is not UTF-8 is that event's refusal, not the whole file's."""
    return (
        (f"{name}:{number}", line.rstrip(b"\r\n")) for number, line in enumerate(stream, 1) if line.strip()
    )
