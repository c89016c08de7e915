"""One consistent, typed read of the catalog: what the asset factory builds definitions from."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar, cast

import networkx as nx

from medallion_assets.catalog.models import (
    LOADABLE,
    ControlFlag,
    Pipeline,
    RetryPolicy,
    Row,
    Source,
    Stage,
    Target,
    ValidationRuleSet,
)

RowT = TypeVar("RowT", bound=Row)


@dataclass
class CatalogSnapshot:
    """Every loadable table's rows, keyed by primary key. Built by the store or from YAML before writing."""

    tables: dict[str, dict[tuple[Any, ...], Row]] = field(
        default_factory=lambda: {name: {} for name in LOADABLE}
    )

    def to_json(self) -> str:
        return json.dumps(
            {
                table: [row.model_dump(mode="json", exclude_none=True) for row in rows.values()]
                for table, rows in self.tables.items()
                if rows
            }
        )

    @classmethod
    def from_json(cls, text: str) -> CatalogSnapshot:
        """The snapshot `to_json` wrote, each row validated again as it is read."""
        snapshot = cls()
        for table, rows in json.loads(text).items():
            for row in rows:
                snapshot.add(table, LOADABLE[table].model_validate(row))
        return snapshot

    def add(self, table: str, row: Row) -> None:
        self.tables[table][row.key()] = row
        # The lookups below are cached (the factory asks for them several times per stage, checks once per
        # stage); forget them.
        for lookup in (
            "pipelines",
            "sources",
            "targets",
            "rule_sets",
            "retry_policies",
            "_stages",
            "_producers",
        ):
            self.__dict__.pop(lookup, None)

    def replaced(self, rows: Mapping[str, Iterable[Row]]) -> CatalogSnapshot:
        """A copy with the named tables' rows replaced: the same structure under runtime controls read now."""
        copy = CatalogSnapshot({name: dict(table) for name, table in self.tables.items()})
        for table in rows:
            copy.tables[table] = {}
        for table, table_rows in rows.items():
            for row in table_rows:
                copy.add(table, row)
        return copy

    def rows_of(self, table: str, model: type[RowT]) -> dict[tuple[Any, ...], RowT]:
        """One table's rows as its model: `add` stores each table's rows as LOADABLE[table] validated them."""
        return cast(dict[tuple[Any, ...], RowT], self.tables[table])

    @cached_property
    def pipelines(self) -> dict[str, Pipeline]:
        return {key[0]: row for key, row in self.rows_of("pipelines", Pipeline).items()}

    @cached_property
    def sources(self) -> dict[str, Source]:
        return {key[0]: row for key, row in self.rows_of("sources", Source).items()}

    @cached_property
    def targets(self) -> dict[str, Target]:
        return {key[0]: row for key, row in self.rows_of("targets", Target).items()}

    @cached_property
    def rule_sets(self) -> dict[str, ValidationRuleSet]:
        return {key[0]: row for key, row in self.rows_of("validation_rules", ValidationRuleSet).items()}

    @cached_property
    def retry_policies(self) -> dict[str, RetryPolicy]:
        return {key[0]: row for key, row in self.rows_of("retry_policies", RetryPolicy).items()}

    @property
    def control_flags(self) -> list[ControlFlag]:
        return list(self.rows_of("control_flags", ControlFlag).values())

    @cached_property
    def _stages(self) -> list[Stage]:
        return sorted(self.rows_of("stages", Stage).values(), key=lambda s: (s.pipeline_id, s.stage_order))

    @cached_property
    def _producers(self) -> dict[str, Stage]:
        producers: dict[str, Stage] = {}
        for stage in self._stages:
            producers.setdefault(stage.target_id, stage)
        return producers

    def stages(self, pipeline_id: str | None = None) -> list[Stage]:
        """Stages in run order, of one pipeline or of all."""
        return [s for s in self._stages if pipeline_id in (None, s.pipeline_id)]

    def stage_producing(self, target_id: str) -> Stage | None:
        """The stage that makes `target_id` (the first in run order, should the catalog name two)."""
        return self._producers.get(target_id)

    def pipelines_upstream_first(self) -> list[str]:
        """Every pipeline's id, each after the pipelines that make its stages' inputs, by id where that leaves
        a choice. Pipelines that feed one another (a cycle, which no order satisfies) come together, by id."""
        made_by = {stage.target_id: stage.pipeline_id for stage in self.stages()}
        feeds = nx.DiGraph()
        feeds.add_nodes_from(self.pipelines)
        feeds.add_edges_from(
            (made_by[input_id], stage.pipeline_id)
            for stage in self.stages()
            for input_id in stage.input_ids()
            if made_by.get(input_id, stage.pipeline_id) != stage.pipeline_id
        )
        groups = nx.condensation(feeds)
        members: dict[int, set[str]] = nx.get_node_attributes(groups, "members")
        order = nx.lexicographical_topological_sort(groups, key=lambda group: min(members[group]))
        return [pipeline_id for group in order for pipeline_id in sorted(members[group])]
