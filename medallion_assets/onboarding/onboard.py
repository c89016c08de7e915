"""Onboarding as a function: SQL files → statements → lineage → catalog rows, validated as YAML is, and
written idempotently (only rows that change), with a report per statement and the diff to the catalog.

SQL is only parsed, never executed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from sqlglot import exp

from medallion_assets.catalog.loader import (
    CatalogInvalid,
    CatalogProblem,
    LoadedRows,
    merged_snapshot,
)
from medallion_assets.catalog.models import LOADABLE, ColumnLineage, Row, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.loading import check_references
from medallion_assets.naming import IDENTIFIER, check_identifier
from medallion_assets.onboarding.catalog_ids import slug
from medallion_assets.onboarding.catalog_rows import CatalogPlan, PlanBuilder
from medallion_assets.onboarding.column_lineage import UNKNOWN_TYPE, WHOLE_TARGET
from medallion_assets.onboarding.datasets import canonical_name
from medallion_assets.onboarding.lineage import SqlAnalyzer
from medallion_assets.onboarding.parse import parse_file, unexpected_error
from medallion_assets.onboarding.statements import (
    DIRECT_KINDS,
    LOAD_KINDS,
    CopyLoad,
    Failed,
    Parsed,
    Skipped,
    StatementError,
    TableSchema,
    Transformation,
    session_name,
)
from medallion_assets.onboarding.temporary_tables import StatementLineage, TemporaryTables

DEFAULT_DIALECT = "redshift"


@dataclass
class StatementReport:
    """One statement as `--json` prints it; `status` is onboarded, temporary, schema, skipped or failed.

    `target` and `sources` are SQL names (`schema.table`, `s3://…`), `dataset` the target's catalog id; each
    of `columns` is {"target", "sources": ["schema.table.column", …], "transformations": {source: kind}},
    with target "*" for filter and join-key columns, which shape the whole target.
    """

    file: str
    line: int
    kind: str
    status: str
    target: str | None = None
    dataset: str | None = None
    sources: list[str] = field(default_factory=list)
    layer: str | None = None
    layer_reason: str | None = None
    stage: str | None = None
    columns: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    reason: str | None = None

    def fail(self, line: int, reason: str) -> None:
        """Mark the statement failed, citing the file line the reason points at."""
        self.status, self.error = "failed", f"{self.file}:{line}: {reason}"


@dataclass(frozen=True)
class RowChange:
    """A catalog row onboarding adds (+), changes (~) or removes (-)."""

    action: str
    table: str
    key: tuple[Any, ...]
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    def lines(self) -> list[str]:
        """The change as a diff: the row's fields for + and -, only the fields that differ for ~."""
        head = f"{self.action} {self.table}[{', '.join(map(str, self.key))}]"
        # A + has no row before it, a - none after it; a ~ has both.
        before, after = self.before or {}, self.after or {}
        if self.action == "~":
            return [
                head,
                *[
                    line
                    for name in after
                    if before.get(name) != after[name]
                    for line in (
                        f"-   {name}: {_show(before.get(name))}",
                        f"+   {name}: {_show(after[name])}",
                    )
                ],
            ]
        fields = after if self.action == "+" else before
        return [
            head,
            *[
                f"{self.action}   {name}: {_show(value)}"
                for name, value in fields.items()
                if value not in (None, "", [], {})
            ],
        ]


@dataclass
class OnboardingReport:
    """Every statement's report, the catalog changes (made, or for a dry run, to be made), whether written."""

    statements: list[StatementReport]
    changes: list[RowChange]
    written: bool

    @property
    def failed(self) -> bool:
        """Whether any statement failed: the command then exits with 1."""
        return any(statement.status == "failed" for statement in self.statements)

    def as_json(self) -> dict[str, Any]:
        """What `--json` prints: {"statements": [...]}."""
        return {"statements": [asdict(statement) for statement in self.statements]}


def _show(value: object) -> str:
    return json.dumps(_compact(value), sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _compact(value: object) -> object:
    """Nested values without their empty fields, so a rule reads as what it says."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def default_pipeline_id(path: str | Path) -> str:
    """The pipeline that onboarded stages join when none is named: the first file's name."""
    name = slug(Path(path).stem)
    return check_identifier(name if IDENTIFIER.fullmatch(name) else f"sql_{name}", "pipeline id")


@functools.lru_cache(maxsize=1024)
def sql_type(catalog_type: str, dialect: str) -> str:
    """A catalog column type (Spark's names) as a SQL type of `dialect`."""
    return exp.DataType.build(catalog_type, dialect="spark").sql(dialect)


def register_catalog(analyzer: SqlAnalyzer, snapshot: CatalogSnapshot) -> None:
    """The catalog's datasets as tables of the analyzer's schema, under their location and their id, and the
    columns its lineage shows the others to have.

    Bronze datasets declare no columns of their own: theirs are the raw source's.
    """
    producers = {stage.target_id: stage for stage in snapshot.stages()}
    for target in snapshot.targets.values():
        columns = target.columns
        if not columns and target.target_id in producers:
            source = snapshot.sources.get(producers[target.target_id].input_id)
            columns = source.columns if source else None
        if not columns:
            continue
        types = {name: sql_type(type_name, analyzer.dialect) for name, type_name in columns.items()}
        for name in _sql_names(target):
            analyzer.set_columns(name, types)
    # Lineage rows name columns of datasets whose schema the catalog does not declare (SQL of earlier runs).
    names = {target.target_id: _sql_names(target) for target in snapshot.targets.values()}
    for stored in snapshot.tables["column_lineage"].values():
        # The snapshot holds each table's rows under the table's name: these are ColumnLineage rows.
        row = cast(ColumnLineage, stored)
        for dataset, column in ((row.upstream, row.upstream_column), (row.downstream, row.downstream_column)):
            if column != WHOLE_TARGET:
                for name in names.get(dataset, ()):
                    analyzer.show(name, [column])


def _sql_names(target: Target) -> set[str]:
    """How SQL names a catalog dataset: by its id, and by its location when that is a table."""
    names = {canonical_name(target.target_id)}
    if target.location and not target.location.startswith("s3://"):
        names.add(canonical_name(target.location))
    return names


def onboard(
    paths: Sequence[str | Path],
    store: CatalogStore,
    *,
    dialect: str = DEFAULT_DIALECT,
    pipeline_id: str | None = None,
    layer_overrides: Mapping[str, str] | None = None,
    dry_run: bool = False,
    analyzer: SqlAnalyzer | None = None,
) -> OnboardingReport:
    """Onboard SQL files into the catalog. Raises CatalogInvalid when the catalog itself has problems.

    A statement that fails is reported (file, line, reason) and left out; the others are onboarded.
    `analyzer` may be passed to reuse its schema and caches across calls (it must be of `dialect`).
    """
    snapshot = store.snapshot()
    analyzer = analyzer or SqlAnalyzer(dialect)
    register_catalog(analyzer, snapshot)
    reports: list[StatementReport] = []
    lineages: list[StatementLineage | None] = []
    for path in paths:
        temporary = TemporaryTables()
        for parsed in parse_file(path, dialect, analyzer.parse):
            try:
                report, lineage = _digest(parsed, analyzer, temporary, dialect)
            except Exception as error:  # noqa: BLE001 (one statement's failure never stops the others)
                statement = parsed.statement
                report, lineage = StatementReport(statement.file, statement.line, parsed.kind, "failed"), None
                report.fail(statement.line, unexpected_error(error))
            reports.append(report)
            lineages.append(lineage)
    plan = _valid_plan(
        lineages,
        reports,
        snapshot,
        analyzer,
        dialect,
        pipeline_id or default_pipeline_id(paths[0]),
        layer_overrides or {},
    )
    changes = diff(snapshot, plan)
    if changes and not dry_run:
        # Unchanged rows are not rewritten: an upsert would still touch their updated_at.
        rows: dict[str, list[Row]] = {}
        for change in changes:
            if change.action != "-":
                rows.setdefault(change.table, []).append(plan.rows[change.table][change.key])
        store.upsert_checked(functools.partial(_unchanged_since, snapshot, rows), remove=plan.removals)
    return OnboardingReport(reports, changes, bool(changes) and not dry_run)


def _unchanged_since(
    planned_on: CatalogSnapshot, rows: dict[str, list[Row]], current: CatalogSnapshot
) -> dict[str, list[Row]]:
    """`rows`, if the catalog (read under the write lock) is still the one they were planned and checked on;
    else CatalogInvalid: another write came in between, and the plan must be made again."""
    if current.tables != planned_on.tables:
        changed = sorted(table for table in LOADABLE if current.tables[table] != planned_on.tables[table])
        raise CatalogInvalid(
            [
                CatalogProblem(
                    "catalog",
                    None,
                    table,
                    "",
                    "",
                    "changed while the SQL was onboarded; nothing was written, onboard again",
                )
                for table in changed
            ]
        )
    return rows


def _digest(
    parsed: Parsed, analyzer: SqlAnalyzer, temporary: TemporaryTables, dialect: str
) -> tuple[StatementReport, StatementLineage | None]:
    """One parsed statement → its report, and its lineage when it feeds a permanent table."""
    statement = parsed.statement
    report = StatementReport(statement.file, statement.line, parsed.kind, "skipped")
    if isinstance(parsed, Failed):
        report.fail(parsed.line, parsed.error)
        return report, None
    if isinstance(parsed, Skipped):
        report.reason = parsed.reason
        return report, None
    temporary_target = parsed.temporary or temporary.is_temporary(parsed.target)
    # A temporary table lives in the session, not in a schema: it is shown by its name alone.
    report.target = session_name(parsed.target) if temporary_target else parsed.target
    if isinstance(parsed, TableSchema):
        report.status = "schema"
        columns = {name: data_type.sql(dialect) for name, data_type in parsed.columns.items()}
        if parsed.like:
            columns = analyzer.column_types(parsed.like) or {}
            if not columns:
                report.warnings.append(f"the columns of {parsed.like} are unknown")
        if columns:
            analyzer.set_columns(parsed.target, columns)
        if parsed.temporary:
            temporary.declare(parsed.target)
        return report, None
    try:
        if isinstance(parsed, CopyLoad):
            if temporary_target:
                raise StatementError(
                    statement.line,
                    "COPY into a temporary table: raw files need a permanent "
                    "table to become a bronze dataset",
                )
            if parsed.declared:
                analyzer.set_columns(
                    parsed.target,
                    {name: data_type.sql(dialect) for name, data_type in parsed.declared.items()},
                )
            lineage = _copy_lineage(parsed, analyzer)
        else:
            lineage = temporary.collapse(parsed, analyzer.analyze(parsed))
    except StatementError as error:
        report.fail(error.line, error.reason)
        return report, None
    _remember_columns(parsed, lineage, analyzer)
    report.sources = list(lineage.sources)
    report.columns = _columns_json(lineage)
    report.warnings = list(lineage.warnings)
    if isinstance(parsed, Transformation) and temporary_target:
        temporary.record(lineage)
        report.status = "temporary"
        return report, None
    report.status = "onboarded"
    return report, lineage


def _copy_lineage(copy: CopyLoad, analyzer: SqlAnalyzer) -> StatementLineage:
    lineage = analyzer.analyze_copy(copy)
    return StatementLineage(
        copy, lineage.sources, lineage.columns, lineage.edges, False, (), None, list(lineage.warnings)
    )


def _remember_columns(
    parsed: CopyLoad | Transformation, lineage: StatementLineage, analyzer: SqlAnalyzer
) -> None:
    """A table a statement fills becomes known to later statements by its columns (types unknown)."""
    if (
        parsed.target.startswith("s3://")
        or not lineage.columns
        or parsed.kind not in (*DIRECT_KINDS, *LOAD_KINDS)
    ):
        return
    known = analyzer.column_types(parsed.target)
    creates = parsed.kind in ("create_table_as", "select_into", "create_view")
    if known is None or (creates and list(known) != list(lineage.columns)):
        analyzer.set_columns(parsed.target, dict.fromkeys(lineage.columns, UNKNOWN_TYPE))


def _columns_json(lineage: StatementLineage) -> list[dict[str, Any]]:
    """Each target column (and "*", the whole target) ← `table.column` sources, with each one's kind."""
    if lineage.edges is None:
        return []
    by_column: dict[str, dict[str, str]] = {column: {} for column in lineage.columns}
    for edge in lineage.edges:
        by_column.setdefault(edge.target_column, {})[f"{edge.source}.{edge.source_column}"] = (
            edge.transformation
        )
    return [
        {"target": column, "sources": list(sources), "transformations": sources}
        for column, sources in by_column.items()
    ]


def _valid_plan(
    lineages: list[StatementLineage | None],
    reports: list[StatementReport],
    snapshot: CatalogSnapshot,
    analyzer: SqlAnalyzer,
    dialect: str,
    pipeline_id: str,
    layer_overrides: Mapping[str, str],
) -> CatalogPlan:
    """Plan rows, check them against the catalog as YAML is checked, and drop the statements whose rows
    have problems (each reported with its file and line) until the rest is valid."""
    while True:
        plan = PlanBuilder(
            snapshot, analyzer, pipeline_id=pipeline_id, layer_overrides=layer_overrides, dialect=dialect
        ).build(lineages)
        failures = dict(plan.failures)
        if not failures:
            loaded = LoadedRows(
                {table: list(plan.rows.get(table, {}).values()) for table in LOADABLE}, plan.origins
            )
            problems = check_references(merged_snapshot(snapshot, loaded), plan.origins)
            by_place: dict[tuple[str, int | None], int] = {
                (r.file, r.line): i for i, r in enumerate(reports) if lineages[i] is not None
            }
            for problem in problems:
                index = by_place.get((problem.file, problem.line))
                if index is None:
                    raise CatalogInvalid(problems)
                subject = f"{problem.table}[{problem.key}]{'.' + problem.field if problem.field else ''}"
                failures[index] = "; ".join(
                    filter(None, [failures.get(index), f"{subject}: {problem.message}"])
                )
        if not failures:
            break
        for index, reason in failures.items():
            reports[index].fail(reports[index].line, f"cannot become catalog rows: {reason}")
            lineages[index] = None
    for index, outcome in plan.outcomes.items():
        report = reports[index]
        report.dataset = outcome.target_id
        if outcome.decision:
            report.layer, report.layer_reason = outcome.decision.layer, outcome.decision.reason
        report.stage = outcome.stage
        report.warnings = outcome.warnings
    return plan


def diff(snapshot: CatalogSnapshot, plan: CatalogPlan) -> list[RowChange]:
    """The rows the plan adds, changes and removes, table by table; unchanged rows are not listed."""
    changes = []
    for table in LOADABLE:
        for key, row in plan.rows.get(table, {}).items():
            after = row.model_dump(mode="json")
            before = snapshot.tables[table].get(key)
            if before is None:
                changes.append(RowChange("+", table, key, None, after))
            elif before.model_dump(mode="json") != after:
                changes.append(RowChange("~", table, key, before.model_dump(mode="json"), after))
        for key in plan.removals.get(table, []):
            changes.append(
                RowChange("-", table, key, snapshot.tables[table][key].model_dump(mode="json"), None)
            )
    return changes
