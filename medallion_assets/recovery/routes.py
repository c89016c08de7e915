"""The way around what is down, as the engine asks for it (`engine.services.Recovery`): the catalog's graph,
the recovery paths and availability, with every re-route audited."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx

from medallion_assets.catalog.models import Source, Stage
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.recovery.availability import Availability, as_utc
from medallion_assets.recovery.graph import build_graph, declared_graph
from medallion_assets.recovery.paths import NoAvailablePath, recovery_paths, shortest_available_path


@dataclass(frozen=True)
class CatalogRoutes:
    store: CatalogStore
    snapshot: CatalogSnapshot

    def readable_source(self, stage: Stage) -> Source:
        """The stage's source, or, when it is down, the first source of the shortest available path.

        The choice is audited; when nothing is available the error lists every path and why it is down.
        """
        primary = self.snapshot.sources[stage.input_id]
        availability = Availability(self.store, self.snapshot)
        if not availability.unavailable([primary.source_id]):
            return primary
        graph = declared_graph(build_graph(self.snapshot))
        candidates = [node for node in nx.ancestors(graph, stage.target_id) if node in self.snapshot.sources]
        down = availability.unavailable(candidates)
        path = shortest_available_path(graph, stage.target_id, down)
        if path is None:
            raise NoAvailablePath(stage.target_id, recovery_paths(graph, stage.target_id), down)
        chosen = self.snapshot.sources[path.nodes[0]]
        self.store.record_audit(
            pipeline_id=stage.pipeline_id,
            stage_name=stage.stage_name,
            dataset=stage.target_id,
            event="reroute",
            status="rerouted",
            error=down[primary.source_id],
            details={
                "from": primary.source_id,
                "to": chosen.source_id,
                "path": list(path.nodes),
                "cost": path.cost,
            },
        )
        return chosen

    def flagged(self, datasets: Iterable[str]) -> dict[str, str]:
        return Availability(self.store, self.snapshot).flagged(datasets)

    def last_good_version(self, dataset: str) -> int | None:
        """The latest version of a lake dataset Medallion committed before it was marked unavailable: what
        time travel reads when the dataset cannot be rebuilt from the layer above."""
        flagged_at = Availability(self.store, self.snapshot).flagged_at(dataset)
        if flagged_at is None:
            return None
        before = [c for c in self.store.lake_commits(dataset) if as_utc(c["committed_at"]) <= flagged_at]
        return int(before[-1]["snapshot_id"]) if before else None

    def no_path(self, stage: Stage, down: dict[str, str]) -> NoAvailablePath:
        paths = recovery_paths(build_graph(self.snapshot), stage.target_id)
        return NoAvailablePath(stage.target_id, paths, down)
