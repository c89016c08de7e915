"""A warehouse target's declared columns are its contract with the warehouse's readers (as dbt's model
contracts): a change that drops, renames or narrows one is refused, naming the column and its consumers,
unless the target declares a new `version` (its table `<location>_v<N>` is built beside the old one, which
stays for its readers) or the user allows breaking it. A version never goes down.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from medallion_assets.catalog.models import ColumnLineage
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.change.categories import widens


@dataclass(frozen=True)
class ContractProblem:
    """One refusal: the target, the field it is about, and the one-line message a user sees. `waivable` ones
    give way to --allow-breaking; a version going down never does."""

    target_id: str
    field: str
    message: str
    waivable: bool = True

    def __str__(self) -> str:
        return f"targets[{self.target_id}].{self.field}: {self.message}"


def contract_problems(old: CatalogSnapshot, new: CatalogSnapshot, graph: nx.DiGraph) -> list[ContractProblem]:
    """What the change from `old` to `new` breaks of the warehouse targets' contracts; `graph` is the new
    catalog's dataset graph (recovery.graph.build_graph), whose downstream datasets are the consumers."""
    problems = []
    for target_id, was in sorted(old.targets.items()):
        now = new.targets.get(target_id)
        if now is None or was.kind != "warehouse":
            continue
        old_version, new_version = was.version or 1, now.version or 1
        if new_version < old_version:
            problems.append(
                ContractProblem(
                    target_id,
                    "version",
                    f"goes down from {old_version} to {new_version}: a version only goes up",
                    waivable=False,
                )
            )
            continue
        if new_version > old_version:
            continue
        broken = {
            name: "dropped or renamed"
            if now.kind != "warehouse" or name not in (now.columns or {})
            else f"narrowed from {kind} to {(now.columns or {})[name]}"
            for name, kind in (was.columns or {}).items()
            if now.kind != "warehouse"
            or name not in (now.columns or {})
            or not widens(kind, (now.columns or {})[name])
        }
        for column, how in broken.items():
            problems.append(
                ContractProblem(
                    target_id,
                    "columns",
                    f"contract column {column!r} of {was.warehouse_table()} is {how}; its consumers: "
                    f"{_consumers(new, graph, target_id, column)}. Declare version: {old_version + 1} to "
                    f"build {was.location}_v{old_version + 1} beside it, or pass --allow-breaking",
                )
            )
    return problems


def _consumers(snapshot: CatalogSnapshot, graph: nx.DiGraph, target_id: str, column: str) -> str:
    """Who reads the column: the datasets downstream (other tools' too), and the columns made from it."""
    datasets = sorted(graph.successors(target_id)) if target_id in graph else []
    columns = sorted(
        f"{row.downstream}.{row.downstream_column}"
        for row in snapshot.rows_of("column_lineage", ColumnLineage).values()
        if row.upstream == target_id and row.upstream_column == column
    )
    named = list(dict.fromkeys([*columns, *datasets]))
    return ", ".join(named) if named else "the warehouse's readers (none known to the catalog)"
