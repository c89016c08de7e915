"""Onboarded statements → catalog rows, and the difference they make to the catalog.

Every table the SQL names becomes a dataset: one the catalog already holds (matched by its location, or by
its id for unqualified names), one the statements make (a new target, with a layer and the reason for it),
or an external table they only read. Each dataset that statements fill gets one stage whose SQL names its
inputs by catalog id, as the engine expects; COPY gets a raw source and a bronze ingest stage. Table and
column lineage, and validation rules marked as suggestions, come along.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlglot import exp

from medallion_assets.catalog.models import (
    ColumnLineage,
    DatasetLineage,
    Pipeline,
    Row,
    Rule,
    Source,
    Stage,
    Target,
    ValidationRuleSet,
)
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.naming import check_identifier
from medallion_assets.onboarding.catalog_ids import CatalogIds
from medallion_assets.onboarding.column_lineage import AMBIGUOUS, IDENTITY, JOIN_KEY, UNKNOWN_TYPE, stronger
from medallion_assets.onboarding.datasets import Dataset, Datasets
from medallion_assets.onboarding.layers import LayerDecider, LayerDecision
from medallion_assets.onboarding.lineage import SqlAnalyzer
from medallion_assets.onboarding.parse import unexpected_error
from medallion_assets.onboarding.stage_plans import StagePlanner
from medallion_assets.onboarding.statements import LOAD_KINDS, CopyLoad, canonical_table
from medallion_assets.onboarding.temporary_tables import StatementLineage, union_all

_CATALOG_TYPES = {
    exp.DataType.Type.TEXT: "string",
    exp.DataType.Type.VARCHAR: "string",
    exp.DataType.Type.CHAR: "string",
    exp.DataType.Type.NVARCHAR: "string",
    exp.DataType.Type.NCHAR: "string",
    exp.DataType.Type.BPCHAR: "string",
    exp.DataType.Type.INT: "int",
    exp.DataType.Type.SMALLINT: "int",
    exp.DataType.Type.TINYINT: "int",
    exp.DataType.Type.BIGINT: "bigint",
    exp.DataType.Type.DOUBLE: "double",
    exp.DataType.Type.FLOAT: "float",
    exp.DataType.Type.BOOLEAN: "boolean",
    exp.DataType.Type.DATE: "date",
    exp.DataType.Type.TIMESTAMP: "timestamp",
    exp.DataType.Type.TIMESTAMPTZ: "timestamp",
    exp.DataType.Type.TIMESTAMPNTZ: "timestamp",
    exp.DataType.Type.DATETIME: "timestamp",
}


@dataclass
class StatementOutcome:
    """What one statement became: its dataset, layer and reason, its stage (if it makes one), warnings."""

    target_id: str | None = None
    decision: LayerDecision | None = None
    stage: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class CatalogPlan:
    """Rows to upsert (by table and key), rows to remove, where each row came from, and per statement (by
    index) its outcome or the reason it could not become rows."""

    rows: dict[str, dict[tuple[Any, ...], Row]]
    removals: dict[str, list[tuple[Any, ...]]]
    origins: dict[tuple[str, tuple[Any, ...]], tuple[str, int | None]]
    outcomes: dict[int, StatementOutcome]
    failures: dict[int, str]

    def add(self, table: str, row: Row, origin: tuple[str, int]) -> None:
        """Add a row; of two with one key the first stays, but column lineage keeps the strongest kind."""
        rows = self.rows.setdefault(table, {})
        kept = rows.get(row.key())
        if kept is None:
            rows[row.key()] = row
            self.origins[(table, row.key())] = origin
        elif isinstance(kept, ColumnLineage) and isinstance(row, ColumnLineage):
            strongest = stronger(kept.transformation, row.transformation)
            rows[row.key()] = kept.model_copy(update={"transformation": strongest})


@functools.lru_cache(maxsize=1024)
def catalog_type(type_text: str, dialect: str) -> str | None:
    """The catalog's column type for a SQL type of `dialect`, or None when the catalog has none for it."""
    data_type = exp.DataType.build(type_text, dialect=dialect)
    if data_type.this == exp.DataType.Type.DECIMAL:
        precision, scale = [int(p.name) for p in data_type.expressions] or [18, 0]
        return f"decimal({precision},{scale})" if precision < 100 and scale < 100 else None
    return _CATALOG_TYPES.get(data_type.this)


class PlanBuilder:
    """Builds the catalog rows for onboarded statements against one catalog snapshot.

    Its parts each do one thing: ``Datasets`` matches tables to the catalog, ``LayerDecider`` gives each its
    layer, ``CatalogIds`` its id, ``StagePlanner`` picks the statements a stage replays; this class turns
    their answers into rows.
    """

    def __init__(
        self,
        snapshot: CatalogSnapshot,
        analyzer: SqlAnalyzer,
        *,
        pipeline_id: str,
        layer_overrides: Mapping[str, str],
        dialect: str,
    ):
        self.snapshot = snapshot
        self.analyzer = analyzer
        self.pipeline_id = check_identifier(pipeline_id, "pipeline id")
        self.dialect = dialect
        self.layer_overrides = layer_overrides

    def build(self, lineages: list[StatementLineage | None]) -> CatalogPlan:
        """Rows for every statement that has a lineage (None marks statements that failed or were skipped)."""
        self.lineages = lineages
        self.plan = CatalogPlan({}, {}, {}, {}, {})
        for index, lineage in enumerate(lineages):
            if lineage is not None:
                self.plan.outcomes[index] = StatementOutcome(warnings=list(lineage.warnings))
        self.datasets = Datasets(self.snapshot, lineages)
        self.layers = LayerDecider(self.datasets, self.layer_overrides)
        self.ids = CatalogIds(self.snapshot, self.datasets, self.layers)
        self.stages = StagePlanner(self.snapshot, self.datasets, self._warn)
        self.next_order = 1 + max((s.stage_order for s in self.snapshot.stages(self.pipeline_id)), default=0)
        for dataset in self.datasets:
            try:
                self._dataset_rows(dataset)
            except Exception as error:  # noqa: BLE001 (one dataset's failure fails its statements, not all)
                for index in dataset.statements:
                    self.plan.failures[index] = _validation_message(error)
        self._removals()
        return self.plan

    # --- rows ---------------------------------------------------------------------------------------------

    def _add(self, table: str, row: Row, index: int) -> None:
        statement = self.datasets.lineage(index).parsed.statement
        self.plan.add(table, row, (statement.file, statement.line))

    def _dataset_rows(self, dataset: Dataset) -> None:
        if not dataset.statements:
            if dataset.existing is None:
                self._external_target(dataset)
            return
        decision = self.layers.decided(dataset.name)
        target_id = self.ids.target_id(dataset.name)
        for index in dataset.statements:
            self.plan.outcomes[index].target_id = target_id
            self.plan.outcomes[index].decision = decision
        # Output columns become parquet and warehouse column names, quoted but never free text.
        for index in dataset.statements:
            for column in self.datasets.lineage(index).columns:
                check_identifier(column, f"column of {dataset.name}")
        stage_statements, keys = self.stages.plan(dataset.name)
        first = (stage_statements or dataset.writers or dataset.changers)[0]
        target = self._target(dataset, decision, keys, first)
        self._add("targets", target, first)
        stage = self._stage(dataset, target, stage_statements) if stage_statements else None
        for index in dataset.writers:
            parsed = self.datasets.lineage(index).parsed
            if isinstance(parsed, CopyLoad):
                self._source(index, parsed)
        for index in dataset.statements:
            replayed_by = stage if stage is not None and index in stage_statements else None
            self._lineage_rows(index, target_id, replayed_by)
            if replayed_by is not None:
                self.plan.outcomes[index].stage = f"{replayed_by.pipeline_id}.{replayed_by.stage_name}"

    def _warn(self, index: int, message: str) -> None:
        self.plan.outcomes[index].warnings.append(message)

    def _declared_columns(self, name: str, index: int) -> dict[str, str] | None:
        types = self.analyzer.column_types(name)
        if not types:
            return None
        columns = {}
        for column, type_text in types.items():
            mapped = catalog_type(type_text, self.dialect)
            if mapped is None:
                if type_text.upper() != UNKNOWN_TYPE:
                    self._warn(
                        index,
                        f"column {column} of type {type_text} has no catalog type: "
                        "the target declares no columns",
                    )
                return None
            columns[column] = mapped
        return columns

    def _target(self, dataset: Dataset, decision: LayerDecision, keys: list[str], index: int) -> Target:
        lineage = self.datasets.lineage(index)
        columns = None if decision.layer == "bronze" else self._declared_columns(dataset.name, index)
        merge: dict[str, Any] = {"keys": keys, "load_mode": "merge"} if keys else {}
        if dataset.existing:
            updates: dict[str, Any] = {"layer": decision.layer, **merge}
            if columns:
                updates["columns"] = columns
            return Target.model_validate({**dataset.existing.model_dump(), **updates})
        is_table = not dataset.name.startswith("s3://")
        return Target.model_validate(
            dict(
                target_id=self.ids.target_id(dataset.name),
                layer=decision.layer,
                kind="warehouse" if decision.layer == "gold" and is_table else "lake",
                location=dataset.name,
                columns=columns,
                description=f"onboarded from SQL ({lineage.kind} at {lineage.parsed.statement.where()}); "
                f"layer: {decision.reason}",
                **merge,
            )
        )

    def _source(self, index: int, copy: CopyLoad) -> None:
        """The raw files a COPY (the statement at `index`) reads, with the table's columns as their schema."""
        lineage = self.datasets.lineage(index)
        types = self.analyzer.column_types(copy.target) or {}
        columns = {c: catalog_type(types[c], self.dialect) if c in types else None for c in lineage.columns}
        # Fields of a Source, for an existing row's update or a new row; the model checks them either way.
        fields: dict[str, Any] = dict(
            file_format=copy.file_format,
            options=copy.options,
            compression=copy.compression,
            columns={c: type_name or "string" for c, type_name in columns.items()},
        )
        existing = self.snapshot.sources.get(self.ids.source_id(copy))
        if existing:
            source = Source.model_validate({**existing.model_dump(), **fields})
        else:
            source = Source(
                source_id=self.ids.source_id(copy),
                s3_path=copy.s3_path,
                description=f"raw files read by {copy.kind.replace('_', ' ').upper()} at "
                f"{copy.statement.where()}",
                **fields,
            )
        self._add("sources", source, index)

    def _external_target(self, dataset: Dataset) -> None:
        """A table the SQL reads but no statement or stage makes: a warehouse table, for lineage."""
        decision = self.layers.decided(dataset.name)
        reader = next(
            i
            for i, lineage in enumerate(self.lineages)
            if lineage is not None and dataset.name in lineage.sources
        )
        # The decided layer is a name (--layer gives any text): the model checks it is one of the layers.
        target = Target.model_validate(
            dict(
                target_id=self.ids.target_id(dataset.name),
                layer=decision.layer,
                kind="warehouse",
                location=dataset.name,
                columns=self._declared_columns(dataset.name, reader),
                description="external table read by onboarded SQL; no stage makes it. "
                f"layer: {decision.reason}",
            )
        )
        self._add("targets", target, reader)

    def _stage(self, dataset: Dataset, target: Target, statements: list[int]) -> Stage:
        lineages = [self.datasets.lineage(i) for i in statements]
        upstream = self.ids.upstream_id
        inputs = list(dict.fromkeys(upstream(lineage, s) for lineage in lineages for s in lineage.sources))
        existing = self.stages.producers.get(target.target_id)
        rules = self._suggested_rules(target, lineages, statements[0])
        sql = None if lineages[0].kind in LOAD_KINDS else self._transform_sql(lineages)
        fields: dict[str, Any] = dict(
            input_id=inputs[0],
            inputs=inputs[1:],
            transform_sql=sql,
            sql_dialect=self.dialect if sql else "spark",
        )
        if existing:
            stage = existing.model_copy(
                update={**fields, "validation_set_id": existing.validation_set_id or rules}
            )
        else:
            stage = Stage(
                pipeline_id=self.pipeline_id,
                stage_order=self.next_order,
                stage_name=target.target_id,
                target_id=target.target_id,
                validation_set_id=rules,
                **fields,
            )
            self.next_order += 1
            if self.pipeline_id not in self.snapshot.pipelines:
                self._add(
                    "pipelines",
                    Pipeline(
                        pipeline_id=self.pipeline_id, description="onboarded from SQL by medallion onboard"
                    ),
                    statements[0],
                )
        self._add("stages", Stage.model_validate(stage.model_dump()), statements[0])
        return stage

    def _transform_sql(self, lineages: list[StatementLineage]) -> str:
        """The stage's SQL: the statements' queries (UNION ALL for several INSERTs) over inputs named by
        id."""
        queries = []
        for lineage in lineages:
            # The stage planner chooses only statements with a stage query (or loads, which have no SQL).
            if lineage.stage is None:
                raise ValueError(f"the statement writing {lineage.target} has no query a stage can replay")
            queries.append(lineage.stage.copy())
        query = union_all(queries)
        for table in query.find_all(exp.Table):
            name = canonical_table(table) if isinstance(table.this, exp.Identifier) and table.db else None
            if name is not None and name in self.datasets:
                # The engine registers each input under its id; the comment keeps the name the SQL used.
                table.set("this", exp.to_identifier(self.ids.target_id(name)))
                table.set("db", None)
                table.add_comments([name])
        return query.sql(dialect=self.dialect, pretty=True, identify=True)

    def _suggested_rules(self, target: Target, lineages: list[StatementLineage], index: int) -> str:
        """A rule set marked as a suggestion: rows exist; join and group keys are not null; merge keys
        unique."""
        rules = [Rule(type="row_count", min=1, severity="warn")]
        not_null = [c for lineage in lineages for c in lineage.group_columns]
        for lineage in lineages:
            join_keys = {
                (e.source, e.source_column) for e in lineage.edges or () if e.transformation == JOIN_KEY
            }
            not_null += [
                e.target_column
                for e in lineage.edges or ()
                if e.transformation == IDENTITY and (e.source, e.source_column) in join_keys
            ]
        rules += [Rule(type="not_null", column=c, severity="warn") for c in dict.fromkeys(not_null)]
        if target.load_mode == "merge":
            rules.append(Rule(type="unique", columns=target.keys, severity="warn"))
        rule_set = ValidationRuleSet(
            rule_set_id=f"{target.target_id}_suggested",
            description=f"SUGGESTED by medallion onboard for {lineages[0].target}: "
            "review, then keep, edit or detach",
            check_def=rules,
        )
        self._add("validation_rules", rule_set, index)
        return rule_set.rule_set_id

    def _lineage_rows(self, index: int, target_id: str, stage: Stage | None) -> None:
        lineage = self.datasets.lineage(index)
        statement = lineage.parsed.statement
        if stage:
            via = f"{stage.pipeline_id}.{stage.stage_name}"
        else:
            via = f"sql:{Path(statement.file).name}:{statement.line}"
        for source in lineage.sources:
            upstream = self.ids.upstream_id(lineage, source)
            if upstream != target_id:
                self._add(
                    "dataset_lineage",
                    DatasetLineage(
                        upstream=upstream, downstream=target_id, via=via, kind="stage" if stage else "sql"
                    ),
                    index,
                )
        for edge in lineage.edges or ():
            if edge.transformation == AMBIGUOUS:
                continue  # the statement's report names the candidates; the catalog keeps known edges only
            # An edge's kind is a name the model checks is one of the catalog's transformations.
            self._add(
                "column_lineage",
                ColumnLineage.model_validate(
                    dict(
                        downstream=target_id,
                        downstream_column=edge.target_column,
                        upstream=self.ids.upstream_id(lineage, edge.source),
                        upstream_column=edge.source_column,
                        transformation=edge.transformation,
                    )
                ),
                index,
            )

    def _removals(self) -> None:
        """Lineage rows of the onboarded datasets that the SQL no longer gives (its previous version's)."""
        made = {self.ids.target_id(d.name) for d in self.datasets if d.writers or d.changers}
        for table in ("column_lineage", "dataset_lineage"):
            keep = self.plan.rows.get(table, {})
            stale = [
                key
                for key, row in self.snapshot.tables[table].items()
                if _onboarded_lineage(row, made) and key not in keep
            ]
            if stale:
                self.plan.removals[table] = stale


def _onboarded_lineage(row: Row, made: set[str]) -> bool:
    """A lineage row into a dataset onboarding made, of a kind it writes: every column lineage row, and
    dataset lineage by stage or SQL."""
    if isinstance(row, ColumnLineage):
        return row.downstream in made
    return isinstance(row, DatasetLineage) and row.downstream in made and row.kind in ("stage", "sql")


def _validation_message(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}" for e in error.errors())
    if isinstance(error, ValueError):
        return str(error)
    return unexpected_error(error)
