"""One consistent, typed read of the catalog: what the asset factory builds definitions from."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

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


@dataclass
class CatalogSnapshot:
    """Every loadable table's rows, keyed by primary key. Built by the store or from YAML before writing."""

    tables: dict[str, dict[tuple, Row]] = field(default_factory=lambda: {name: {} for name in LOADABLE})

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
        # The lookups below are cached (the factory asks for them several times per stage); forget them.
        for lookup in ("pipelines", "sources", "targets", "rule_sets", "retry_policies"):
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

    @cached_property
    def pipelines(self) -> dict[str, Pipeline]:
        return {key[0]: row for key, row in self.tables["pipelines"].items()}

    @cached_property
    def sources(self) -> dict[str, Source]:
        return {key[0]: row for key, row in self.tables["sources"].items()}

    @cached_property
    def targets(self) -> dict[str, Target]:
        return {key[0]: row for key, row in self.tables["targets"].items()}

    @cached_property
    def rule_sets(self) -> dict[str, ValidationRuleSet]:
        return {key[0]: row for key, row in self.tables["validation_rules"].items()}

    @cached_property
    def retry_policies(self) -> dict[str, RetryPolicy]:
        return {key[0]: row for key, row in self.tables["retry_policies"].items()}

    @property
    def control_flags(self) -> list[ControlFlag]:
        return list(self.tables["control_flags"].values())

    def stages(self, pipeline_id: str | None = None) -> list[Stage]:
        """Stages in run order, of one pipeline or of all."""
        rows = [s for s in self.tables["stages"].values() if pipeline_id in (None, s.pipeline_id)]
        return sorted(rows, key=lambda s: (s.pipeline_id, s.stage_order))

    def stage_producing(self, target_id: str) -> Stage | None:
        return next((s for s in self.stages() if s.target_id == target_id), None)
