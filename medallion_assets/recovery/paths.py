"""Recovery paths: every way a dataset can be produced from its roots, ranked by cost, and the cheapest way
that avoids what is down.

A path is a chain of datasets from a root (a dataset nothing feeds, normally a raw source) to the dataset; its
cost is the sum of its edges' costs. A dataset built from several inputs has chains through each of them.
A path is *available* when every dataset it reads is available: all its nodes but the last (the dataset it
produces), or its only node when the dataset is itself a root.

Enumeration is bounded so that large graphs stay fast: at most `MAX_PATHS` paths per dataset, each of at most
`MAX_LENGTH` nodes. One pass in topological order keeps, for each dataset, the cheapest `MAX_PATHS` extensions
of its predecessors' paths (the k cheapest paths of a DAG), so the work grows with edges × MAX_PATHS, not
with the number of paths, which grows exponentially with joins and alternates.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeAlias

import networkx as nx
from sqlalchemy import Connection, bindparam, delete, insert, select

from medallion_assets.catalog.schema import dataset_recovery_paths
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.recovery.graph import build_graph, collector_paused, require_dataset

# An operator choosing among recovery paths reads the first few; 16 leaves room for every replica and
# rebuild of a realistic dataset while keeping dataset_recovery_paths linear in the number of datasets.
MAX_PATHS = 16
# Medallion chains are raw → bronze → silver → gold (→ marts), 4 to 6 nodes; 32 only cuts pathological graphs.
MAX_LENGTH = 32

# A path as _k_cheapest grows it: (cost, number of nodes, its last dataset, the entry it extends or None).
PathEntry: TypeAlias = tuple[float, int, str, "PathEntry | None"]


@dataclass(frozen=True)
class RecoveryPath:
    """A chain of datasets from a root to the dataset it produces, and what following it costs."""

    nodes: tuple[str, ...]
    cost: float

    def read(self) -> tuple[str, ...]:
        """The datasets this path reads: all but the one it produces, or the root itself."""
        return self.nodes[:-1] or self.nodes

    def down(self, unavailable: Collection[str]) -> list[str]:
        """The datasets this path reads that are unavailable, in path order."""
        return [node for node in self.read() if node in unavailable]

    def available(self, unavailable: Collection[str]) -> bool:
        """True when nothing this path reads is unavailable."""
        return not self.down(unavailable)


class NoAvailablePath(Exception):
    """Every path to a dataset reads something that is down; the message lists each path and why."""

    def __init__(self, dataset: str, paths: list[RecoveryPath], unavailable: Mapping[str, str]):
        self.dataset, self.paths, self.unavailable = dataset, paths, dict(unavailable)
        lines = [f"no available path to {dataset}:"]
        for rank, path in enumerate(paths, 1):
            reasons = "; ".join(f"{node}: {unavailable[node]}" for node in path.down(unavailable))
            lines.append(f"  {rank}. {' → '.join(path.nodes)} (cost {path.cost:g}) down: {reasons}")
        super().__init__("\n".join(lines))


def _k_cheapest(
    graph: nx.DiGraph,
    order: list[str],
    max_paths: int,
    max_length: int,
    best: dict[str, list[PathEntry]] | None = None,
) -> dict[str, list[PathEntry]]:
    """The cheapest paths from the roots to each node of `order`, which lists every node after its
    predecessors, added to `best` (the paths of their other ancestors, kept from an earlier pass) when given.

    Paths grow as linked entries (cost, nodes, dataset, entry of the path extended, or None at a root):
    extending one is O(1) and the entries compare as plain tuples, in C: cheapest first, then fewest nodes,
    then by the costs and names along the path from its end upwards, an order that does not depend on how the
    catalog lists its rows. A path stops growing at `max_length` nodes; where that binds (graphs deeper than
    any medallion chain) a dataset can miss a path within the bound whose beginning was outranked by longer,
    cheaper ones.
    """
    with collector_paused():
        best = {} if best is None else best
        for node in order:
            predecessors = graph.pred[node]
            if not predecessors:
                best[node] = [(0.0, 1, node, None)]
                continue
            best[node] = heapq.nsmallest(
                max_paths,
                (
                    (entry[0] + data["cost"], entry[1] + 1, node, entry)
                    for upstream_id, data in predecessors.items()
                    for entry in best[upstream_id]
                    if entry[1] < max_length
                ),
            )
        return best


def _path(entry: PathEntry) -> RecoveryPath:
    cost, nodes = entry[0], []
    current: PathEntry | None = entry
    while current is not None:
        nodes.append(current[2])
        current = current[3]
    return RecoveryPath(tuple(reversed(nodes)), cost)


def _ancestors_in_order(graph: nx.DiGraph, dataset: str) -> list[str]:
    """`dataset` and its ancestors, each after all of its predecessors (depth-first post-order upwards)."""
    order, seen = [], {dataset}
    stack = [(dataset, iter(graph.pred[dataset]))]
    while stack:
        node, pending = stack[-1]
        upstream_id = next((u for u in pending if u not in seen), None)
        if upstream_id is None:
            stack.pop()
            order.append(node)
        else:
            seen.add(upstream_id)
            stack.append((upstream_id, iter(graph.pred[upstream_id])))
    return order


def recovery_paths(
    graph: nx.DiGraph, dataset: str, max_paths: int = MAX_PATHS, max_length: int = MAX_LENGTH
) -> list[RecoveryPath]:
    """The cheapest `max_paths` paths from the roots to `dataset` of at most `max_length` nodes, cheapest
    first (ties: fewer nodes first). The work grows with the dataset's ancestry, not with the graph."""
    require_dataset(graph, dataset)
    return [
        _path(entry)
        for entry in _k_cheapest(graph, _ancestors_in_order(graph, dataset), max_paths, max_length)[dataset]
    ]


def all_recovery_paths(
    graph: nx.DiGraph, max_paths: int = MAX_PATHS, max_length: int = MAX_LENGTH
) -> dict[str, list[RecoveryPath]]:
    """`recovery_paths` of every dataset, in one pass over the graph."""
    return RankedPaths(graph, max_paths, max_length).paths()


class RankedPaths:
    """The ranked recovery paths of every dataset of a graph, kept up to date as edges are added to it: only
    the datasets downstream of new edges are ranked again, so the work grows with what an edge reaches, not
    with the graph."""

    def __init__(self, graph: nx.DiGraph, max_paths: int = MAX_PATHS, max_length: int = MAX_LENGTH):
        self.graph, self.max_paths, self.max_length = graph, max_paths, max_length
        self._best = _k_cheapest(graph, list(nx.topological_sort(graph)), max_paths, max_length)

    def paths(self, datasets: Iterable[str] | None = None) -> dict[str, list[RecoveryPath]]:
        """The ranked paths of the given datasets (None: all)."""
        with collector_paused():
            return {
                node: [_path(entry) for entry in self._best[node]]
                for node in (self._best if datasets is None else datasets)
            }

    def edges_added(self, edges: Iterable[tuple[str, str]]) -> list[str]:
        """Rank the datasets new to the graph and again those at the lower end of edges just added to it, and
        all downstream of them. Returns those whose ranked paths changed (or that are new), sorted."""
        reached = {node for edge in edges for node in edge if node not in self._best}
        reached |= {downstream_id for _, downstream_id in edges}
        for dataset in list(reached):
            reached |= nx.descendants(self.graph, dataset)
        before = {node: self._best.get(node) for node in reached}
        for node in reached:
            self._best.pop(node, None)
        _k_cheapest(self.graph, _in_order(self.graph, reached), self.max_paths, self.max_length, self._best)
        return sorted(node for node in reached if self._best[node] != before[node])


def _in_order(graph: nx.DiGraph, nodes: set[str]) -> list[str]:
    """`nodes`, each after those of its predecessors that are among them (Kahn's algorithm on their
    subgraph)."""
    waiting = {node: sum(1 for upstream_id in graph.pred[node] if upstream_id in nodes) for node in nodes}
    ready = sorted(node for node, count in waiting.items() if count == 0)
    order = []
    while ready:
        node = ready.pop()
        order.append(node)
        for downstream_id in graph.succ[node]:
            if downstream_id in waiting:
                waiting[downstream_id] -= 1
                if waiting[downstream_id] == 0:
                    ready.append(downstream_id)
    return order


def default_path(graph: nx.DiGraph, dataset: str) -> RecoveryPath:
    """The path the pipelines follow when nothing is down: up each dataset's main input to a root."""
    require_dataset(graph, dataset)
    nodes, cost, node = [dataset], 0.0, dataset
    while main := next((u for u, data in graph.pred[node].items() if data["line"] == "main"), None):
        cost += graph.edges[main, node]["cost"]
        nodes.append(main)
        node = main
    return RecoveryPath(tuple(reversed(nodes)), cost)


def shortest_available_path(
    graph: nx.DiGraph, dataset: str, unavailable: Collection[str], max_length: int = MAX_LENGTH
) -> RecoveryPath | None:
    """The cheapest available path to `dataset` along its supply line, or None when every such path is down.

    The supply line is what can stand in for the dataset's main input: main edges and declared alternates.
    A stage's further inputs (the other side of a join) are lines of their own; ask for them by their own id.
    Dijkstra runs upwards from the dataset along that line only and stops at the first root it settles, so a
    query costs what the dataset's supply line costs, whatever the size of the graph.
    """
    require_dataset(graph, dataset)
    counter = itertools.count()
    heap = [(0.0, 1, next(counter), dataset)]
    cost_to: dict[str, float] = {dataset: 0.0}
    toward: dict[str, str] = {}
    while heap:
        cost, length, _, node = heapq.heappop(heap)
        if cost > cost_to[node]:
            continue
        supply = [(u, data["cost"]) for u, data in graph.pred[node].items() if data["line"] != "side"]
        if not supply:
            # Only the dataset itself can be both a root and down here: no unavailable node is ever pushed.
            if node in unavailable:
                continue
            nodes = [node]
            while nodes[-1] != dataset:
                nodes.append(toward[nodes[-1]])
            return RecoveryPath(tuple(nodes), cost)
        if length >= max_length:
            continue
        for upstream_id, edge_cost in supply:
            new_cost = cost + edge_cost
            if upstream_id not in unavailable and new_cost < cost_to.get(upstream_id, float("inf")):
                cost_to[upstream_id], toward[upstream_id] = new_cost, node
                heapq.heappush(heap, (new_cost, length + 1, next(counter), upstream_id))
    return None


def active_path(graph: nx.DiGraph, dataset: str, unavailable: Collection[str]) -> RecoveryPath | None:
    """The path in use now: the default path while it is available, else the shortest available one."""
    default = default_path(graph, dataset)
    return default if default.available(unavailable) else shortest_available_path(graph, dataset, unavailable)


def paths_report(
    graph: nx.DiGraph, dataset: str, ranked: list[RecoveryPath], unavailable: Mapping[str, str]
) -> dict[str, Any]:
    """What `medallion paths --json` prints: the dataset's ranked paths with their availability, the active
    path's nodes, and why each unavailable dataset on them is down."""
    active = active_path(graph, dataset, unavailable)
    down = {node: unavailable[node] for path in ranked for node in path.down(unavailable)}
    return {
        "dataset": dataset,
        "paths": [
            {"nodes": list(p.nodes), "cost": p.cost, "available": p.available(unavailable)} for p in ranked
        ],
        "active": list(active.nodes) if active else [],
        "down": dict(sorted(down.items())),
    }


def refresh_recovery_paths(
    store: CatalogStore, snapshot: CatalogSnapshot, max_paths: int = MAX_PATHS, max_length: int = MAX_LENGTH
) -> list[str]:
    """Materialize every dataset's recovery paths in `dataset_recovery_paths`, in one transaction.

    Only datasets whose ranked paths changed are replaced (so `computed_at` says when a dataset's paths last
    changed), and datasets no longer in the catalog lose theirs. Returns the datasets rewritten or removed.
    """
    ranked = RankedPaths(build_graph(snapshot), max_paths, max_length).paths()
    with store.engine.begin() as connection:
        return store_recovery_paths(connection, ranked)


def store_recovery_paths(
    connection: Connection, ranked: Mapping[str, list[RecoveryPath]], datasets: Collection[str] | None = None
) -> list[str]:
    """Bring `dataset_recovery_paths` to `ranked` in the transaction of `connection`: of the given datasets,
    or (None) of all, where datasets missing from `ranked` lose their rows. Only datasets whose stored paths
    differ are rewritten (so `computed_at` says when a dataset's paths last changed); returns them, sorted."""
    table = dataset_recovery_paths
    computed = {
        dataset: [(p.nodes, p.cost) for p in paths]
        for dataset, paths in ranked.items()
        if datasets is None or dataset in datasets
    }
    stored: dict[str, list[tuple[tuple[str, ...], float]]] = defaultdict(list)
    query = select(table.c.dataset, table.c.nodes, table.c.cost).order_by(table.c.dataset, table.c.path_rank)
    if datasets is not None:
        query = query.where(table.c.dataset.in_(datasets))
    with collector_paused():
        for dataset, nodes, cost in connection.execute(query):
            stored[dataset].append((tuple(nodes), cost))
    changed = sorted(d for d in {*computed, *stored} if computed.get(d) != stored.get(d))
    if not changed:
        return []
    now = datetime.now(UTC)
    rows = [
        dict(dataset=d, path_rank=rank, nodes=list(nodes), cost=cost, computed_at=now)
        for d in changed
        for rank, (nodes, cost) in enumerate(computed.get(d, []), 1)
    ]
    connection.execute(delete(table).where(table.c.dataset == bindparam("d")), [{"d": d} for d in changed])
    if rows:
        connection.execute(insert(table), rows)
    return changed
