"""Temporary tables of one file (one session), through which a statement's lineage is collapsed onto
permanent tables and S3 paths, and which a stage replays as CTEs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlglot import exp

from medallion_assets.onboarding.column_lineage import (
    SELF_EXCLUDED,
    WHOLE_TARGET,
    BaseColumn,
    ColumnEdge,
    LineageUnavailable,
    QueryLineage,
    merge_kind,
    stronger,
)
from medallion_assets.onboarding.statements import (
    CopyLoad,
    Transformation,
    canonical_table,
    is_temporary_name,
    session_name,
)


@dataclass
class StatementLineage:
    """A statement's lineage in terms of permanent tables and S3 paths: temporary tables collapsed.

    `stage` has temporary tables inlined as CTEs; other tables keep their canonical `schema.table` names.
    """

    parsed: Transformation | CopyLoad
    sources: tuple[str, ...]
    columns: tuple[str, ...]
    edges: tuple[ColumnEdge, ...] | None
    aggregates: bool
    group_columns: tuple[str, ...]
    stage: exp.Query | None
    warnings: list[str] = field(default_factory=list)

    @property
    def target(self) -> str:
        return self.parsed.target

    @property
    def kind(self) -> str:
        return self.parsed.kind

    @property
    def merge_keys(self) -> tuple[str, ...]:
        """The keys a MERGE matches on, or a DELETE … USING deletes by; a COPY has none."""
        return self.parsed.merge_keys if isinstance(self.parsed, Transformation) else ()


@dataclass
class _Temporary:
    """What a temporary table holds, in terms of permanent tables."""

    sources: tuple[str, ...] = ()
    columns: dict[str, dict[BaseColumn, str]] | None = field(default_factory=dict)
    indirect: dict[BaseColumn, str] = field(default_factory=dict)
    definitions: list[exp.Query] = field(default_factory=list)
    changed_in_place: bool = False
    aggregates: bool = False


class TemporaryTables:
    """The temporary tables of one file (one session), through which lineage is collapsed."""

    def __init__(self) -> None:
        self._tables: dict[str, _Temporary] = {}

    def declare(self, name: str) -> None:
        """A CREATE TEMP TABLE without a query: known, and empty."""
        self._tables[name] = _Temporary()

    def is_temporary(self, name: str) -> bool:
        """Whether `name` (canonical) is a temporary table of this session: declared here, or `#name`."""
        return name in self._tables or is_temporary_name(name)

    def collapse(self, parsed: Transformation | CopyLoad, lineage: QueryLineage) -> StatementLineage:
        """The statement's lineage with every temporary table it reads replaced by what that table holds.

        An UPDATE, DELETE or MERGE of a permanent table is not lineage of that table itself; of a temporary
        table it is (SET n = n * 2 computes from what the table held), so self references go after collapsing.
        """
        warnings = list(lineage.warnings)
        read = [t for t in lineage.sources if self.is_temporary(t)]
        for name in read:
            if name not in self._tables:
                warnings.append(
                    f"temporary table {session_name(name)} is not created in this file: "
                    "what it holds is unknown"
                )
                self._tables[name] = _Temporary(columns=None)
        sources = tuple(
            dict.fromkeys(
                source
                for name in lineage.sources
                for source in (self._tables[name].sources if name in read else (name,))
            )
        )
        edges = self._collapse_edges(lineage.edges, read, warnings)
        if parsed.kind in SELF_EXCLUDED:
            sources = tuple(source for source in sources if source != parsed.target)
            edges = edges if edges is None else tuple(e for e in edges if e.source != parsed.target)
        stage = self._inline(lineage.stage, warnings) if lineage.stage is not None else None
        aggregated = lineage.aggregates or any(self._tables[name].aggregates for name in read)
        return StatementLineage(
            parsed, sources, lineage.columns, edges, aggregated, lineage.group_columns, stage, warnings
        )

    def _collapse_edges(
        self, edges: tuple[ColumnEdge, ...] | None, read: list[str], warnings: list[str]
    ) -> tuple[ColumnEdge, ...] | None:
        if edges is None or any(self._tables[name].columns is None for name in read):
            if edges is not None:
                warnings.append(
                    "column lineage unavailable through a temporary table whose columns are unknown"
                )
            return None
        found: dict[tuple[str, str, str], str] = {}
        for edge in edges:
            if edge.source not in read:
                merge_kind(found, (edge.target_column, edge.source, edge.source_column), edge.transformation)
                continue
            indirect = edge.target_column == WHOLE_TARGET
            # Every table read has known columns (None returned above); `or {}` says so to the type checker.
            held = self._tables[edge.source].columns or {}
            for (table, column), kind in held.get(edge.source_column, {}).items():
                merge_kind(
                    found,
                    (edge.target_column, table, column),
                    edge.transformation if indirect else stronger(edge.transformation, kind),
                )
        for name in read:
            for (table, column), kind in self._tables[name].indirect.items():
                merge_kind(found, (WHOLE_TARGET, table, column), kind)
        return tuple(ColumnEdge(*key, kind) for key, kind in found.items())

    def record(self, result: StatementLineage) -> None:
        """A statement that writes a temporary table: what the table now holds."""
        table = self._tables.setdefault(result.target, _Temporary())
        table.sources = tuple(dict.fromkeys([*table.sources, *result.sources]))
        table.aggregates = table.aggregates or result.aggregates
        if result.edges is None or table.columns is None:
            table.columns = None
        else:
            for column in result.columns:
                table.columns.setdefault(column, {})
            for edge in result.edges:
                into = (
                    table.indirect
                    if edge.target_column == WHOLE_TARGET
                    else table.columns[edge.target_column]
                )
                merge_kind(into, (edge.source, edge.source_column), edge.transformation)
        if result.stage is None:
            table.changed_in_place = True
        else:
            table.definitions.append(result.stage)

    def _inline(self, stage: exp.Query, warnings: list[str]) -> exp.Query | None:
        """The stage query with each temporary table it reads defined as a CTE, dependencies first."""
        names: dict[str, str] = {}
        ctes: list[exp.CTE] = []
        taken = {cte.alias_or_name.lower() for cte in stage.find_all(exp.CTE)} | {
            table.name.lower() for table in stage.find_all(exp.Table)
        }

        def define(query: exp.Query) -> exp.Query:
            for table in list(query.find_all(exp.Table)):
                if not isinstance(table.this, exp.Identifier) or not self.is_temporary(
                    canonical_table(table)
                ):
                    continue
                name = canonical_table(table)
                if name not in names:
                    temporary = self._tables.get(name)
                    if temporary is None or temporary.changed_in_place or not temporary.definitions:
                        raise LineageUnavailable(name)
                    names[name] = _free_name(re.sub(r"\W", "", session_name(name)) or "tmp", taken)
                    taken.add(names[name])
                    body = define(union_all([d.copy() for d in temporary.definitions]))
                    ctes.append(exp.CTE(this=body, alias=exp.TableAlias(this=exp.to_identifier(names[name]))))
                table.set("this", exp.to_identifier(names[name]))
                table.set("db", None)
            return query

        if not any(
            self.is_temporary(canonical_table(t))
            for t in stage.find_all(exp.Table)
            if isinstance(t.this, exp.Identifier)
        ):
            return stage
        try:
            stage = define(stage.copy())
        except LineageUnavailable as unreplayable:
            warnings.append(
                f"temporary table {session_name(str(unreplayable))} is changed in place or never "
                "filled: the stage cannot replay it, so the statement gives lineage only"
            )
            return None
        if ctes:
            existing = stage.args.get("with_")
            stage.set("with_", exp.With(expressions=[*ctes, *(existing.expressions if existing else [])]))
        return stage


def union_all(queries: list[exp.Query]) -> exp.Query:
    """The queries' rows one after another (UNION ALL), in order; one query is itself."""
    union = queries[0]
    for query in queries[1:]:
        union = exp.union(union, query, distinct=False)
    return union


def _free_name(name: str, taken: set[str]) -> str:
    candidate, suffix = name, 1
    while candidate.lower() in taken:
        suffix += 1
        candidate = f"{name}_{suffix}"
    return candidate
