"""Lineage from other tools: OpenLineage events of Airflow, dbt, Spark jobs outside Medallion…, read as
newline-delimited JSON (`medallion lineage ingest`) or received one by one over HTTP (`medallion lineage serve`).

Each event is checked against the specification; every edge it declares (each input → each output of its job)
becomes an `external_lineage` row, so the catalog graph, recovery paths and `medallion lineage` cross
orchestrators. A dataset the event names by one of Medallion's own OpenLineage names (a source's prefix, a file
inside it, a lake folder, a warehouse table) is that catalog dataset; any other is a node of its own, named
`namespace/name`. Events Medallion emitted itself add nothing: the catalog already holds their lineage.

A bad event (not JSON, refused by the specification, or closing a cycle in the graph) is rejected with the
reason and where it was; the others of the same batch are ingested, all in one catalog write.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from medallion_assets.catalog.models import ExternalLineage
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.lineage.graph import build_graph
from medallion_assets.lineage.openlineage import PRODUCER, DatasetLocation, dataset_location
from medallion_assets.lineage.paths import refresh_recovery_paths
from medallion_assets.lineage.schema_validation import EventInvalid, validate_event

MEDALLION_PRODUCER = PRODUCER.rsplit(":", 1)[0] + ":"
# Every input × output pair of an event is an edge: without a cap, one small event could add a million edges.
MAX_DATASETS_PER_EVENT = 100


@dataclass(frozen=True)
class Rejection:
    """An event left out, where it was (`events.ndjson:3`, `event`) and why."""

    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass
class IngestReport:
    """What a batch of events did: events accepted, edges written, datasets new to the graph, and rejections."""

    accepted: int = 0
    edges: list[ExternalLineage] = field(default_factory=list)
    new_datasets: list[str] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)

    def summary(self) -> str:
        return (f"ingested {self.accepted} event(s): {len(self.edges)} edge(s), {len(self.new_datasets)} new "
                f"dataset(s); rejected {len(self.rejected)}")


def catalog_names(snapshot: CatalogSnapshot, lake_root: str, warehouse_url: str) -> dict[tuple[str, str], str]:
    """Medallion's datasets by their OpenLineage (namespace, name), as its own events name them: a source's raw
    prefix, a target's lake folder and, for a warehouse target, its table."""
    locations = [dataset_location(snapshot, dataset_id, lake_root) for dataset_id in (*snapshot.sources,
                                                                                     *snapshot.targets)]
    locations += [DatasetLocation(t.target_id, warehouse_url, t.location) for t in snapshot.targets.values()
                  if t.kind == "warehouse"]
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


def _edges(event: dict, names: dict[tuple[str, str], str]) -> list[ExternalLineage]:
    if event["producer"].startswith(MEDALLION_PRODUCER) or "job" not in event:
        return []
    named = len(event.get("inputs") or []) + len(event.get("outputs") or [])
    if named > MAX_DATASETS_PER_EVENT:
        raise EventInvalid(f"event: names {named} datasets; an event may name at most {MAX_DATASETS_PER_EVENT}")
    job = f"{event['job']['namespace']}/{event['job']['name']}"
    inputs = [dataset_id(d["namespace"], d["name"], names) for d in event.get("inputs") or []]
    outputs = [dataset_id(d["namespace"], d["name"], names) for d in event.get("outputs") or []]
    run_id = event["run"]["runId"] if "run" in event else None
    # A job that reads and writes one table (an incremental model, a MERGE) adds no edge between datasets.
    return [ExternalLineage(upstream=u, downstream=v, job=job, producer=event["producer"], run_id=run_id,
                            event_time=event.get("eventTime")) for u in dict.fromkeys(inputs)
            for v in dict.fromkeys(outputs) if u != v]


def _closes_cycle(graph: nx.DiGraph, edges: list[ExternalLineage]) -> str | None:
    """Add the edges to `graph` unless one closes a cycle; then leave the graph as it was and print the cycle."""
    added = []
    for edge in edges:
        if edge.downstream in graph and edge.upstream in graph and nx.has_path(graph, edge.downstream, edge.upstream):
            graph.remove_edges_from(added)
            return "cycle: " + " → ".join([edge.upstream, *nx.shortest_path(graph, edge.downstream, edge.upstream)])
        if not graph.has_edge(edge.upstream, edge.downstream):
            graph.add_edge(edge.upstream, edge.downstream)
            added.append((edge.upstream, edge.downstream))
    return None


def ingest_events(store: CatalogStore, documents: Iterable[tuple[str, str | bytes]], lake_root: str,
                  warehouse_url: str) -> IngestReport:
    """Ingest events given as (where, JSON text); accepted ones are written together, then recovery paths refresh."""
    snapshot = store.snapshot()
    names = catalog_names(snapshot, lake_root, warehouse_url)
    graph = build_graph(snapshot)
    known = set(graph.nodes)
    report, rows = IngestReport(), {}
    for where, text in documents:
        try:
            event = validate_event(_parse(text))
            edges = _edges(event, names)
            if cycle := _closes_cycle(graph, edges):
                raise EventInvalid(cycle)
        except EventInvalid as error:
            report.rejected.append(Rejection(where, str(error)))
            continue
        report.accepted += 1
        rows.update((edge.key(), edge) for edge in edges)
    if rows:
        store.upsert({"external_lineage": list(rows.values())})
        # The snapshot read above, plus what was just written: a second read of the whole catalog is not needed.
        for row in rows.values():
            snapshot.add("external_lineage", row)
        refresh_recovery_paths(store, snapshot)
    report.edges = list(rows.values())
    report.new_datasets = sorted({n for edge in report.edges for n in (edge.upstream, edge.downstream)} - known)
    return report


def _parse(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise EventInvalid(f"event: not JSON: {error}") from None


def lines(stream: Iterable[str], name: str) -> Iterable[tuple[str, str]]:
    """The events of newline-delimited JSON, each placed as `name:line`; blank lines are skipped."""
    return ((f"{name}:{number}", line.rstrip("\r\n")) for number, line in enumerate(stream, 1) if line.strip())
