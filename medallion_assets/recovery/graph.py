"""The lineage graph: every dataset (raw source or target) is a node, every way one dataset feeds another an
edge.

Edges come from stages (each input → the stage's target), from `dataset_lineage` rows of kind `sql` (what the
onboarding tool parsed) and of kind `alternate` (a replica, or a rebuild from an upstream layer), and from
`external_lineage` rows, what other tools (Airflow, dbt, Spark) reported in OpenLineage events: their datasets
outside the catalog are nodes of kind `external`, named `namespace/name`, so paths cross orchestrators. Each
edge has a cost (latency or money, as the catalog says; 1 for a stage edge it says nothing about) and a
*line*:

- `main`: a stage's main input (`input_id`), which the pipeline follows when nothing is down;
- `side`: a stage's further inputs (`inputs`, e.g. the other side of a join), each a supply line of its own;
- `alternate`: a row with `is_default: false`, followed only to route around something that is down.

Several rows for the same pair of datasets (a stage and the SQL it runs, say) make one edge, described by its
best route (main before side before alternate, then cheapest) and listing all of them in `routes`.
"""

from __future__ import annotations

import difflib
import gc
from collections import defaultdict, deque
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, NamedTuple, TypeVar, cast

import networkx as nx

from medallion_assets.catalog.models import ColumnLineage, DatasetLineage, ExternalLineage, Row, Stage
from medallion_assets.catalog.snapshot import CatalogSnapshot

Line = Literal["main", "side", "alternate"]
LINE_RANK: dict[str, int] = {"main": 0, "side": 1, "alternate": 2}
STAGE_EDGE_COST = 1.0

R = TypeVar("R", bound=Row)


class Route(NamedTuple):
    """One catalog reason for an edge: the stage, query or alternate (`via`) that reads upstream into
    downstream."""

    via: str
    kind: Literal["stage", "sql", "alternate", "openlineage"]
    cost: float
    line: Line


class LineageEdge(NamedTuple):
    """An edge met by an upstream or downstream query, `depth` hops away from the dataset asked about."""

    upstream: str
    downstream: str
    via: str
    kind: str
    line: str
    cost: float
    depth: int


class LineageProblem(NamedTuple):
    """A lineage row the catalog must refuse: the loader turns it into a CatalogProblem with file and line."""

    table: str
    row: Row
    field: str
    message: str


class UnknownDataset(KeyError):
    """A dataset id the catalog does not know; the message offers the closest known ids."""

    def __init__(self, dataset: str, known: Iterable[str]):
        self.dataset = dataset
        super().__init__(_unknown_message(dataset, known))

    def __str__(self) -> str:
        message: str = self.args[0]
        return message


def _unknown_message(dataset: str, known: Iterable[str]) -> str:
    matches = difflib.get_close_matches(dataset, sorted(known), n=3, cutoff=0.7)
    hint = f"; did you mean: {', '.join(matches)}?" if matches else ""
    return f"unknown dataset {dataset!r}{hint}"


def _table(snapshot: CatalogSnapshot, name: str, model: type[R]) -> dict[tuple[Any, ...], R]:
    """The rows of table `name`, typed as its `model`: the snapshot types every table's rows as the base
    model."""
    return cast(dict[tuple[Any, ...], R], snapshot.tables[name])


def stage_via(stage: Stage) -> str:
    """How a stage is named in `dataset_lineage.via` and in kill switches: pipeline_id.stage_name."""
    return f"{stage.pipeline_id}.{stage.stage_name}"


def _stage_routes(snapshot: CatalogSnapshot, stages: list[Stage]) -> Iterable[tuple[str, str, Route]]:
    """The edges stages imply, costed by the catalog's matching dataset_lineage row when there is one."""
    declared = _table(snapshot, "dataset_lineage", DatasetLineage)
    for stage in stages:
        via = stage_via(stage)
        for input_id in stage.input_ids():
            row = declared.get((input_id, stage.target_id, via))
            line: Line = "main" if input_id == stage.input_id else "side"
            if row is not None and not row.is_default:
                line = "alternate"
            yield input_id, stage.target_id, Route(via, "stage", row.cost if row else STAGE_EDGE_COST, line)


def _declared_routes(snapshot: CatalogSnapshot, produced: set[str]) -> Iterable[tuple[str, str, Route]]:
    # Lineage into a dataset no stage makes names no main input: each such edge is a main line.
    for row in _table(snapshot, "dataset_lineage", DatasetLineage).values():
        if row.kind == "stage":
            continue
        line: Line = "alternate" if not row.is_default else "side" if row.downstream in produced else "main"
        yield row.upstream, row.downstream, Route(row.via, row.kind, row.cost, line)
    for external in _table(snapshot, "external_lineage", ExternalLineage).values():
        yield external.upstream, external.downstream, _external_route(external, produced)


def _external_route(row: ExternalLineage, produced: Collection[str]) -> Route:
    return Route(row.job, "openlineage", row.cost, "side" if row.downstream in produced else "main")


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector around a bulk build of objects that all stay alive (a graph,
    ranked paths): each collection it would trigger rescans the whole heap, every catalog row, and frees
    nothing. At 100,000 datasets that tripled the graph build time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def build_graph(snapshot: CatalogSnapshot) -> nx.DiGraph:
    """The lineage graph of a catalog snapshot.

    Nodes are source and target ids, with `kind` (source | target) and `layer` (raw for sources), and the
    datasets other tools reported, with `kind` external and no layer. Edges carry
    `via`, `kind`, `line`, `cost` of their best route and all `routes`. Column lineage rows are kept in
    `graph.graph["column_lineage"]`, the datasets stages make in `graph.graph["produced"]`. Rows naming an
    unknown dataset are left out: `check_lineage` reports them.
    """
    with collector_paused():
        return _build_graph(snapshot)


def _build_graph(snapshot: CatalogSnapshot) -> nx.DiGraph:
    stages = snapshot.stages()
    produced = {stage.target_id for stage in stages}
    graph = nx.DiGraph(column_lineage=[], produced=produced)
    sources, targets = snapshot.sources, snapshot.targets
    graph.add_nodes_from(sources, kind="source", layer="raw")
    by_layer: dict[str, list[str]] = defaultdict(list)
    for target_id, target in targets.items():
        by_layer[target.layer].append(target_id)
    for layer, target_ids in by_layer.items():
        graph.add_nodes_from(target_ids, kind="target", layer=layer)
    known = {*sources, *targets}
    external = {
        node
        for row in _table(snapshot, "external_lineage", ExternalLineage).values()
        for node in (row.upstream, row.downstream)
    }
    graph.add_nodes_from(external - known, kind="external", layer=None)
    known |= external
    routes: dict[tuple[str, str], list[Route]] = {}
    for upstream_id, downstream_id, route in (
        *_stage_routes(snapshot, stages),
        *_declared_routes(snapshot, produced),
    ):
        if upstream_id in known and downstream_id in known:
            routes.setdefault((upstream_id, downstream_id), []).append(route)
    graph.add_edges_from(_edge(pair, found) for pair, found in routes.items())
    graph.graph["column_lineage"] = [
        row
        for row in _table(snapshot, "column_lineage", ColumnLineage).values()
        if row.upstream in known and row.downstream in known
    ]
    return graph


def add_external_lineage(graph: nx.DiGraph, rows: Iterable[ExternalLineage]) -> None:
    """Add what other tools reported to a graph `build_graph` made, as if it had been built with the rows:
    their datasets outside the graph become external nodes, and a row replaces the route of the same job on
    its edge."""
    for row in rows:
        for node in (row.upstream, row.downstream):
            if node not in graph:
                graph.add_node(node, kind="external", layer=None)
        route = _external_route(row, graph.graph["produced"])
        known = graph.get_edge_data(row.upstream, row.downstream, {"routes": ()})["routes"]
        routes = [r for r in known if (r.kind, r.via) != ("openlineage", row.job)] + [route]
        upstream_id, downstream_id, data = _edge((row.upstream, row.downstream), routes)
        graph.add_edge(upstream_id, downstream_id, **data)


def declared_graph(graph: nx.DiGraph) -> nx.DiGraph:
    """The graph as the catalog's own rows declare it (stages, SQL, alternates), without what other tools
    reported: external lineage shows where data goes, but never changes which path Medallion's runs read
    from."""
    return nx.subgraph_view(
        graph,
        filter_node=lambda node: graph.nodes[node]["kind"] != "external",
        filter_edge=lambda u, v: any(r.kind != "openlineage" for r in graph.edges[u, v]["routes"]),
    )


def _edge(pair: tuple[str, str], routes: list[Route]) -> tuple[str, str, dict[str, Any]]:
    best = routes[0] if len(routes) == 1 else min(routes, key=lambda r: (LINE_RANK[r.line], r.cost, r.via))
    return (
        *pair,
        {"via": best.via, "kind": best.kind, "line": best.line, "cost": best.cost, "routes": tuple(routes)},
    )


def require_dataset(graph: nx.DiGraph, dataset: str) -> None:
    """Raise UnknownDataset, with close matches, unless `dataset` is a node of the graph."""
    if dataset not in graph:
        raise UnknownDataset(dataset, graph.nodes)


def _walk(graph: nx.DiGraph, dataset: str, depth: int | None, upstream: bool) -> list[LineageEdge]:
    require_dataset(graph, dataset)
    neighbours = graph.pred if upstream else graph.succ
    seen, edges = {dataset}, []
    queue = deque([(dataset, 0)])
    while queue:
        node, hops = queue.popleft()
        if depth is not None and hops >= depth:
            continue
        for other, data in sorted(neighbours[node].items()):
            up, down = (other, node) if upstream else (node, other)
            edges.append(
                LineageEdge(up, down, data["via"], data["kind"], data["line"], data["cost"], hops + 1)
            )
            if other not in seen:
                seen.add(other)
                queue.append((other, hops + 1))
    return edges


def upstream(graph: nx.DiGraph, dataset: str, depth: int | None = None) -> list[LineageEdge]:
    """Every edge on the way up from `dataset`, breadth first, at most `depth` hops away (None: all)."""
    return _walk(graph, dataset, depth, upstream=True)


def downstream(graph: nx.DiGraph, dataset: str, depth: int | None = None) -> list[LineageEdge]:
    """Every edge on the way down from `dataset`, breadth first, at most `depth` hops away (None: all)."""
    return _walk(graph, dataset, depth, upstream=False)


def column_lineage(graph: nx.DiGraph, datasets: Iterable[str]) -> list[ColumnLineage]:
    """The column lineage rows between the given datasets (both ends among them), sorted."""
    wanted = set(datasets)
    rows = [r for r in graph.graph["column_lineage"] if r.downstream in wanted and r.upstream in wanted]
    return sorted(rows, key=lambda r: r.key())


def check_lineage(snapshot: CatalogSnapshot) -> list[LineageProblem]:
    """Lineage rows to refuse at catalog load: edges to unknown datasets, stage rows no stage backs, and
    cycles.

    A cycle is reported once per strongly connected part of the graph, printed as a → b → a, on a lineage row
    that closes it. Cycles made of stage edges alone are left to the loader's own stage check.
    """
    known = {*snapshot.sources, *snapshot.targets}
    problems = []
    for table, fields in (
        ("dataset_lineage", ("upstream", "downstream")),
        ("column_lineage", ("downstream", "upstream")),
    ):
        for row in snapshot.tables[table].values():
            problems += [
                LineageProblem(table, row, field, _unknown_message(getattr(row, field), known))
                for field in fields
                if getattr(row, field) not in known
            ]
    stage_edges = {
        (input_id, stage.target_id, stage_via(stage))
        for stage in snapshot.stages()
        for input_id in stage.input_ids()
    }
    for key, row in _table(snapshot, "dataset_lineage", DatasetLineage).items():
        if row.kind == "stage" and key not in stage_edges and {row.upstream, row.downstream} <= known:
            problems.append(
                LineageProblem(
                    "dataset_lineage",
                    row,
                    "via",
                    f"no stage {row.via} reads {row.upstream} into {row.downstream}",
                )
            )
    return problems + _cycles(snapshot, build_graph(snapshot))


def _cycles(snapshot: CatalogSnapshot, graph: nx.DiGraph) -> list[LineageProblem]:
    problems = []
    for part in nx.strongly_connected_components(graph):
        start = next(iter(part))
        if len(part) == 1 and not graph.has_edge(start, start):
            continue
        # Blamed on a catalog row when one closes the cycle, else on an edge another tool reported.
        closing = sorted(
            (route.kind == "openlineage", u, v, route.via)
            for u, v, data in graph.subgraph(part).edges(data=True)
            for route in data["routes"]
            if route.kind != "stage"
        )
        if not closing:
            continue
        reported, u, v, via = closing[0]
        back = nx.shortest_path(graph.subgraph(part), v, u) if u != v else [u]
        table = "external_lineage" if reported else "dataset_lineage"
        problems.append(
            LineageProblem(
                table, snapshot.tables[table][(u, v, via)], "upstream", "cycle: " + " → ".join([u, *back])
            )
        )
    return sorted(problems, key=lambda problem: problem.row.key())
