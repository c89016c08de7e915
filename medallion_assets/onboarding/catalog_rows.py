"""Onboarded statements → catalog rows, and the difference they make to the catalog.

Every table the SQL names becomes a dataset: one the catalog already holds (matched by its location, or by
its id for unqualified names), one the statements make (a new target, with a layer and the reason for it),
or an external table they only read. Each dataset that statements fill gets one stage whose SQL names its
inputs by catalog id, as the engine expects; COPY gets a raw source and a bronze ingest stage. Table and
column lineage, and validation rules marked as suggestions, come along.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError
from sqlglot import exp

from medallion_assets.catalog.models import (
    ColumnLineage, DatasetLineage, Pipeline, Row, Rule, Source, Stage, Target, ValidationRuleSet,
)
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.naming import check_identifier
from medallion_assets.onboarding.lineage import (
    AMBIGUOUS, IDENTITY, JOIN_KEY, UNKNOWN_TYPE, SqlAnalyzer, StatementLineage, stronger, union_all,
)
from medallion_assets.onboarding.parse import DEFAULT_SCHEMA, DIRECT_KINDS, LOAD_KINDS, CopyLoad, canonical_table

LAYERS = ("bronze", "silver", "gold")
# Schema names and table-name prefixes that say a layer, as teams commonly name them.
LAYER_WORDS = {
    "bronze": ("bronze", "raw", "landing", "staging", "stage", "stg", "src", "ods"),
    "silver": ("silver", "clean", "cleansed", "curated", "conformed", "core", "int", "intermediate", "refined"),
    "gold": ("gold", "analytics", "mart", "marts", "reporting", "report", "agg", "dm", "bi", "fct", "fact", "dim"),
}
_APPENDING = ("create_table_as", "insert", "insert_values", "select_into", "alter_table_append")
_CATALOG_TYPES = {
    exp.DataType.Type.TEXT: "string", exp.DataType.Type.VARCHAR: "string", exp.DataType.Type.CHAR: "string",
    exp.DataType.Type.NVARCHAR: "string", exp.DataType.Type.NCHAR: "string", exp.DataType.Type.BPCHAR: "string",
    exp.DataType.Type.INT: "int", exp.DataType.Type.SMALLINT: "int", exp.DataType.Type.TINYINT: "int",
    exp.DataType.Type.BIGINT: "bigint", exp.DataType.Type.DOUBLE: "double", exp.DataType.Type.FLOAT: "float",
    exp.DataType.Type.BOOLEAN: "boolean", exp.DataType.Type.DATE: "date",
    exp.DataType.Type.TIMESTAMP: "timestamp", exp.DataType.Type.TIMESTAMPTZ: "timestamp",
    exp.DataType.Type.TIMESTAMPNTZ: "timestamp", exp.DataType.Type.DATETIME: "timestamp",
}


@dataclass(frozen=True)
class LayerDecision:
    layer: str
    reason: str


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

    rows: dict[str, dict[tuple, Row]]
    removals: dict[str, list[tuple]]
    origins: dict[tuple[str, tuple], tuple[str, int]]
    outcomes: dict[int, StatementOutcome]
    failures: dict[int, str]


@dataclass
class _Dataset:
    name: str
    existing: Target | None
    writers: list[int] = field(default_factory=list)
    changers: list[int] = field(default_factory=list)


@functools.lru_cache(maxsize=1024)
def catalog_type(type_text: str, dialect: str) -> str | None:
    """The catalog's column type for a SQL type of `dialect`, or None when the catalog has none for it."""
    data_type = exp.DataType.build(type_text, dialect=dialect)
    if data_type.this == exp.DataType.Type.DECIMAL:
        precision, scale = [int(p.name) for p in data_type.expressions] or [18, 0]
        return f"decimal({precision},{scale})" if precision < 100 and scale < 100 else None
    return _CATALOG_TYPES.get(data_type.this)


def canonical_name(name: str) -> str:
    """`table` → `public.table`; `schema.table` and s3:// urls as they are, in lower case but for urls."""
    if name.startswith("s3://"):
        return name
    return name.lower() if "." in name else f"{DEFAULT_SCHEMA}.{name.lower()}"


def _layer_by_convention(name: str, allowed: tuple[str, ...]) -> LayerDecision | None:
    if name.startswith("s3://"):
        return None
    schema, _, table = name.rpartition(".")
    for layer in allowed:
        if schema in LAYER_WORDS[layer]:
            return LayerDecision(layer, f"schema {schema!r} is a {layer} schema by naming convention")
    prefix = table.split("_")[0]
    for layer in allowed:
        if prefix in LAYER_WORDS[layer]:
            return LayerDecision(layer, f"table name prefix {prefix!r} means {layer} by naming convention")
    return None


def slug(text: str) -> str:
    """Text as a name: lower case, runs of other characters as one underscore."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


class PlanBuilder:
    """Builds the catalog rows for onboarded statements against one catalog snapshot."""

    def __init__(self, snapshot: CatalogSnapshot, analyzer: SqlAnalyzer, *, pipeline_id: str,
                 layer_overrides: Mapping[str, str], dialect: str):
        self.snapshot = snapshot
        self.analyzer = analyzer
        self.pipeline_id = check_identifier(pipeline_id, "pipeline id")
        self.dialect = dialect
        self.overrides = {canonical_name(name): layer for name, layer in layer_overrides.items()}
        self.known: dict[str, Target] = {}
        for target in snapshot.targets.values():
            self.known.setdefault(canonical_name(target.target_id), target)
        for target in snapshot.targets.values():
            if target.location:
                self.known[canonical_name(target.location)] = target
        self.producers = {stage.target_id: stage for stage in snapshot.stages()}

    def build(self, lineages: list[StatementLineage | None]) -> CatalogPlan:
        """Rows for every statement that has a lineage (None marks statements that failed or were skipped)."""
        self.lineages = lineages
        self.datasets: dict[str, _Dataset] = {}
        self.decisions: dict[str, LayerDecision] = {}
        self.deciding: set[str] = set()
        self.ids: dict[str, str] = {}
        self.source_ids: dict[str, str] = {}
        self.stage_plans: dict[str, tuple[list[int], list[str]]] = {}
        self.taken = set(self.snapshot.targets) | set(self.snapshot.sources)
        self.plan = CatalogPlan({}, {}, {}, {}, {})
        self.next_order = 1 + max((s.stage_order for s in self.snapshot.stages(self.pipeline_id)), default=0)
        for index, lineage in enumerate(lineages):
            if lineage is None:
                continue
            self.plan.outcomes[index] = StatementOutcome(warnings=list(lineage.warnings))
            dataset = self._dataset(lineage.target)
            (dataset.writers if lineage.kind in (*DIRECT_KINDS, *LOAD_KINDS) else dataset.changers).append(index)
            for source in lineage.sources:
                if not source.startswith("s3://"):
                    self._dataset(source)
        for dataset in list(self.datasets.values()):
            try:
                self._dataset_rows(dataset)
            except (ValidationError, ValueError) as error:
                for index in dataset.writers + dataset.changers:
                    self.plan.failures[index] = _validation_message(error)
        self._removals()
        return self.plan

    def _dataset(self, name: str) -> _Dataset:
        if name not in self.datasets:
            self.datasets[name] = _Dataset(name, self.known.get(name))
        return self.datasets[name]

    # --- layers -------------------------------------------------------------------------------------------

    def decide(self, name: str) -> LayerDecision | None:
        """The dataset's layer and why; None while it is being decided (a cycle, which validation reports)."""
        if name in self.decisions:
            return self.decisions[name]
        if name in self.deciding:
            return None
        self.deciding.add(name)
        self.decisions[name] = self._decide(self._dataset(name))
        return self.decisions[name]

    def _decide(self, dataset: _Dataset) -> LayerDecision:
        override = self.overrides.get(dataset.name) or (
            dataset.existing and self.overrides.get(canonical_name(dataset.existing.target_id)))
        if override:
            return LayerDecision(override, f"set by --layer for {dataset.name}")
        if dataset.existing:
            return LayerDecision(dataset.existing.layer,
                                 f"already in the catalog as {dataset.existing.layer} ({dataset.existing.target_id})")
        writers = [self.lineages[i] for i in dataset.writers]
        copy = next((w for w in writers if isinstance(w.parsed, CopyLoad)), None)
        if copy:
            return LayerDecision("bronze", f"loaded from raw files by {copy.parsed.kind.replace('_', ' ').upper()} "
                                           f"at {copy.parsed.statement.where()}")
        aggregating = next((w for w in writers if w.aggregates), None)
        if aggregating:
            return LayerDecision("gold", f"aggregates (GROUP BY or aggregate functions) at "
                                         f"{aggregating.parsed.statement.where()}")
        inputs = [s for w in writers for s in w.sources if not s.startswith("s3://")]
        decided = {source: self.decide(source) for source in inputs}
        for layer, verb in (("gold", "reads gold table"), ("bronze", "cleans bronze table")):
            source = next((s for s, d in decided.items() if d and d.layer == layer), None)
            if source:
                return LayerDecision("gold" if layer == "gold" else "silver", f"{verb} {source}")
        convention = _layer_by_convention(dataset.name, ("silver", "gold") if writers else LAYERS)
        if convention:
            return convention
        if writers:
            return LayerDecision("silver", "transforms tables without aggregating: silver by default")
        return LayerDecision("silver", "read but not made by the SQL, no naming convention: silver by default")

    # --- ids ----------------------------------------------------------------------------------------------

    def target_id(self, name: str) -> str:
        """The dataset's catalog id: its own if it has one, else `<layer>_<table>` made unique."""
        dataset = self._dataset(name)
        if dataset.existing:
            return dataset.existing.target_id
        if name not in self.ids:
            layer = self.decide(name).layer
            schema, _, table = name.rstrip("/").rpartition("/" if name.startswith("s3://") else ".")
            table = slug(table) or "dataset"
            own = table if table.startswith(f"{layer}_") else f"{layer}_{table}"
            self.ids[name] = self._free([own, f"{layer}_{slug(schema.rpartition('/')[2])}_{table}"])
        return self.ids[name]

    def source_id(self, copy: CopyLoad) -> str:
        """The raw source's id: the catalog's source at the same S3 path, else `<table>_raw` made unique."""
        existing = next((s for s in self.snapshot.sources.values()
                         if s.s3_path.rstrip("/") == copy.s3_path.rstrip("/")), None)
        if existing:
            return existing.source_id
        if copy.s3_path not in self.source_ids:
            schema, _, table = copy.target.rpartition(".")
            self.source_ids[copy.s3_path] = self._free([f"{slug(table)}_raw", f"{slug(schema)}_{slug(table)}_raw"])
        return self.source_ids[copy.s3_path]

    def _free(self, candidates: list[str]) -> str:
        for candidate in candidates:
            if candidate not in self.taken:
                break
        else:
            base, suffix = candidates[-1], 2
            while f"{base}_{suffix}" in self.taken:
                suffix += 1
            candidate = f"{base}_{suffix}"
        self.taken.add(check_identifier(candidate, "catalog id"))
        return candidate

    def _upstream_id(self, lineage: StatementLineage, source: str) -> str:
        """A source's catalog id: the raw source of a COPY, or the dataset of a table."""
        return self.source_id(lineage.parsed) if source.startswith("s3://") else self.target_id(source)

    # --- rows ---------------------------------------------------------------------------------------------

    def _add(self, table: str, row: Row, index: int) -> None:
        """Add a row; of two with one key the first stays, but column lineage keeps the strongest kind."""
        statement = self.lineages[index].parsed.statement
        rows = self.plan.rows.setdefault(table, {})
        kept = rows.get(row.key())
        if kept is None:
            rows[row.key()] = row
            self.plan.origins[(table, row.key())] = (statement.file, statement.line)
        elif table == "column_lineage":
            strongest = stronger(kept.transformation, row.transformation)
            rows[row.key()] = kept.model_copy(update={"transformation": strongest})

    def _dataset_rows(self, dataset: _Dataset) -> None:
        if not dataset.writers and not dataset.changers:
            if dataset.existing is None:
                self._external_target(dataset)
            return
        decision = self.decide(dataset.name)
        target_id = self.target_id(dataset.name)
        for index in dataset.writers + dataset.changers:
            self.plan.outcomes[index].target_id = target_id
            self.plan.outcomes[index].decision = decision
        # Output columns become parquet and warehouse column names, quoted but never free text.
        for index in dataset.writers + dataset.changers:
            for column in self.lineages[index].columns:
                check_identifier(column, f"column of {dataset.name}")
        stage_statements, keys = self._stage_plan(dataset.name)
        first = (stage_statements or dataset.writers or dataset.changers)[0]
        target = self._target(dataset, decision, keys, first)
        self._add("targets", target, first)
        stage = self._stage(dataset, target, stage_statements) if stage_statements else None
        for index in dataset.writers:
            if isinstance(self.lineages[index].parsed, CopyLoad):
                self._source(index)
        for index in dataset.writers + dataset.changers:
            in_stage = stage is not None and index in stage_statements
            self._lineage_rows(index, target_id, stage if in_stage else None)
            if in_stage:
                self.plan.outcomes[index].stage = f"{stage.pipeline_id}.{stage.stage_name}"

    def _stage_statements(self, dataset: _Dataset) -> tuple[list[int], list[str]]:
        """The statements whose rows make the dataset (replayed by one stage), and its merge keys if any."""
        writers = dataset.writers
        if not writers:
            for index in dataset.changers:
                self._warn(index, f"changes {dataset.name} in place, which no stage replays: lineage only")
            return [], []
        first = self.lineages[writers[0]]
        if first.kind not in _APPENDING:
            chosen = [writers[0]]
        else:
            chosen = [i for i in writers if self.lineages[i].kind in _APPENDING]
        for index in writers:
            if index not in chosen:
                self._warn(index, f"{dataset.name} is already made by the statement at "
                                  f"{first.parsed.statement.where()}: this one gives lineage only")
        if any(self.lineages[i].stage is None and self.lineages[i].kind not in LOAD_KINDS for i in chosen):
            return [], []
        keys = list(first.parsed.merge_keys) if first.kind == "merge" else []
        for index in dataset.changers:
            changer = self.lineages[index]
            reads_same = set(changer.sources) & {s for i in chosen for s in self.lineages[i].sources}
            if changer.kind == "delete" and changer.parsed.merge_keys and len(chosen) == 1 and first.kind == "insert" \
                    and reads_same and not keys:
                keys = list(changer.parsed.merge_keys)
                self._warn(index, f"DELETE … USING then INSERT is a merge on {', '.join(keys)}: the stage loads "
                                  "with load_mode merge")
            else:
                self._warn(index, f"changes {dataset.name} in place, which the stage does not replay: lineage only")
        return chosen, keys

    def _stage_plan(self, name: str) -> tuple[list[int], list[str]]:
        """The statements one stage replays to make the dataset (none: lineage only) and its merge keys."""
        if name not in self.stage_plans:
            self.stage_plans[name] = ([], [])  # while deciding: a table that reads itself gets no stage
            dataset = self._dataset(name)
            chosen, keys = self._stage_statements(dataset)
            if chosen and not self._inputs_made(dataset, chosen):
                chosen = []
            self.stage_plans[name] = (chosen, keys)
        return self.stage_plans[name]

    def _made_by_a_stage(self, name: str) -> bool:
        dataset = self._dataset(name)
        existing_stage = dataset.existing is not None and dataset.existing.target_id in self.producers
        return existing_stage or bool(self._stage_plan(name)[0])

    def _inputs_made(self, dataset: _Dataset, statements: list[int]) -> bool:
        """A stage can run only if it reads tables and each is made by a stage, existing or onboarded now."""
        for index in statements:
            lineage = self.lineages[index]
            if not lineage.sources:
                self._warn(index, f"reads no table: no stage for {dataset.name}, lineage only")
                return False
            for source in lineage.sources:
                if source.startswith("s3://") or self._made_by_a_stage(source):
                    continue
                if source == dataset.name:
                    why = "it reads the table it writes"
                elif self._dataset(source).writers:
                    why = f"{source} is made by no stage"
                else:
                    why = f"{source} is not made by any stage (an external table)"
                self._warn(index, f"{why}: no stage for {dataset.name}, lineage only")
                return False
        return True

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
                    self._warn(index, f"column {column} of type {type_text} has no catalog type: "
                                      "the target declares no columns")
                return None
            columns[column] = mapped
        return columns

    def _target(self, dataset: _Dataset, decision: LayerDecision, keys: list[str], index: int) -> Target:
        lineage = self.lineages[index]
        columns = None if decision.layer == "bronze" else self._declared_columns(dataset.name, index)
        merge = {"keys": keys, "load_mode": "merge"} if keys else {}
        if dataset.existing:
            updates = {"layer": decision.layer, **merge}
            if columns:
                updates["columns"] = columns
            return Target.model_validate({**dataset.existing.model_dump(), **updates})
        is_table = not dataset.name.startswith("s3://")
        return Target.model_validate(dict(
            target_id=self.target_id(dataset.name), layer=decision.layer,
            kind="warehouse" if decision.layer == "gold" and is_table else "lake", location=dataset.name,
            columns=columns, description=f"onboarded from SQL ({lineage.kind} at {lineage.parsed.statement.where()}); "
                                         f"layer: {decision.reason}", **merge))

    def _source(self, index: int) -> None:
        """The raw files a COPY reads, with the table's columns as their schema."""
        lineage = self.lineages[index]
        copy = lineage.parsed
        types = self.analyzer.column_types(copy.target) or {}
        columns = {c: catalog_type(types[c], self.dialect) if c in types else None for c in lineage.columns}
        fields = dict(file_format=copy.file_format, options=copy.options, compression=copy.compression,
                      columns={c: type_name or "string" for c, type_name in columns.items()})
        existing = self.snapshot.sources.get(self.source_id(copy))
        if existing:
            source = Source.model_validate({**existing.model_dump(), **fields})
        else:
            source = Source(source_id=self.source_id(copy), s3_path=copy.s3_path,
                            description=f"raw files read by {copy.kind.replace('_', ' ').upper()} at "
                                        f"{copy.statement.where()}", **fields)
        self._add("sources", source, index)

    def _external_target(self, dataset: _Dataset) -> None:
        """A table the SQL reads but no statement or stage makes: a warehouse table, for lineage."""
        decision = self.decide(dataset.name)
        reader = next(i for i, lineage in enumerate(self.lineages)
                      if lineage is not None and dataset.name in lineage.sources)
        target = Target(target_id=self.target_id(dataset.name), layer=decision.layer, kind="warehouse",
                        location=dataset.name,
                        columns=self._declared_columns(dataset.name, reader),
                        description="external table read by onboarded SQL; no stage makes it. "
                                    f"layer: {decision.reason}")
        self._add("targets", target, reader)

    def _stage(self, dataset: _Dataset, target: Target, statements: list[int]) -> Stage:
        lineages = [self.lineages[i] for i in statements]
        inputs = list(dict.fromkeys(self._upstream_id(lineage, s) for lineage in lineages for s in lineage.sources))
        existing = self.producers.get(target.target_id)
        rules = self._suggested_rules(target, lineages, statements[0])
        sql = None if lineages[0].kind in LOAD_KINDS else self._transform_sql(lineages)
        fields = dict(input_id=inputs[0], inputs=inputs[1:], transform_sql=sql,
                      sql_dialect=self.dialect if sql else "spark")
        if existing:
            stage = existing.model_copy(update={**fields, "validation_set_id": existing.validation_set_id or rules})
        else:
            stage = Stage(pipeline_id=self.pipeline_id, stage_order=self.next_order, stage_name=target.target_id,
                          target_id=target.target_id, validation_set_id=rules, **fields)
            self.next_order += 1
            if self.pipeline_id not in self.snapshot.pipelines:
                self._add("pipelines", Pipeline(pipeline_id=self.pipeline_id,
                                                description="onboarded from SQL by medallion onboard"), statements[0])
        self._add("stages", Stage.model_validate(stage.model_dump()), statements[0])
        return stage

    def _transform_sql(self, lineages: list[StatementLineage]) -> str:
        """The stage's SQL: the statements' queries (UNION ALL for several INSERTs) over inputs named by id."""
        query = union_all([lineage.stage.copy() for lineage in lineages])
        for table in query.find_all(exp.Table):
            name = canonical_table(table) if isinstance(table.this, exp.Identifier) and table.db else None
            if name in self.datasets:
                # The engine registers each input under its id; the comment keeps the name the SQL used.
                table.set("this", exp.to_identifier(self.target_id(name)))
                table.set("db", None)
                table.add_comments([name])
        return query.sql(dialect=self.dialect, pretty=True, identify=True)

    def _suggested_rules(self, target: Target, lineages: list[StatementLineage], index: int) -> str:
        """A rule set marked as a suggestion: rows exist; join and group keys are not null; merge keys unique."""
        rules = [Rule(type="row_count", min=1, severity="warn")]
        not_null = [c for lineage in lineages for c in lineage.group_columns]
        for lineage in lineages:
            join_keys = {(e.source, e.source_column) for e in lineage.edges or () if e.transformation == JOIN_KEY}
            not_null += [e.target_column for e in lineage.edges or ()
                         if e.transformation == IDENTITY and (e.source, e.source_column) in join_keys]
        rules += [Rule(type="not_null", column=c, severity="warn") for c in dict.fromkeys(not_null)]
        if target.load_mode == "merge":
            rules.append(Rule(type="unique", columns=target.keys, severity="warn"))
        rule_set = ValidationRuleSet(
            rule_set_id=f"{target.target_id}_suggested",
            description=f"SUGGESTED by medallion onboard for {lineages[0].target}: review, then keep, edit or detach",
            check_def=rules)
        self._add("validation_rules", rule_set, index)
        return rule_set.rule_set_id

    def _lineage_rows(self, index: int, target_id: str, stage: Stage | None) -> None:
        lineage = self.lineages[index]
        statement = lineage.parsed.statement
        if stage:
            via = f"{stage.pipeline_id}.{stage.stage_name}"
        else:
            via = f"sql:{Path(statement.file).name}:{statement.line}"
        for source in lineage.sources:
            upstream = self._upstream_id(lineage, source)
            if upstream != target_id:
                self._add("dataset_lineage", DatasetLineage(upstream=upstream, downstream=target_id, via=via,
                                                            kind="stage" if stage else "sql"), index)
        for edge in lineage.edges or ():
            if edge.transformation == AMBIGUOUS:
                continue  # the statement's report names the candidates; the catalog keeps known edges only
            self._add("column_lineage", ColumnLineage(
                downstream=target_id, downstream_column=edge.target_column,
                upstream=self._upstream_id(lineage, edge.source), upstream_column=edge.source_column,
                transformation=edge.transformation), index)

    def _removals(self) -> None:
        """Lineage rows of the onboarded datasets that the SQL no longer gives (its previous version's)."""
        made = {self.target_id(d.name) for d in self.datasets.values() if d.writers or d.changers}
        for table, kinds in (("column_lineage", None), ("dataset_lineage", ("stage", "sql"))):
            keep = self.plan.rows.get(table, {})
            stale = [key for key, row in self.snapshot.tables[table].items()
                     if row.downstream in made and key not in keep and (kinds is None or row.kind in kinds)]
            if stale:
                self.plan.removals[table] = stale


def _validation_message(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}" for e in error.errors())
    return str(error)

