"""Reading catalog YAML: every problem reported at once, with file, line, table, row key and field.

Validation runs against the catalog as it would be after the load (stored rows plus the files' rows), so a
file may refer to rows loaded earlier, and nothing is written when anything is wrong. The checks here are the
catalog's own (rows, references, cycles, SQL); the layers above add theirs as `RowCheck`s, and
`medallion_assets.loading` runs them all.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from medallion_assets.catalog.models import (
    LOADABLE,
    DeprecatedName,
    HealingAction,
    PipelineProfile,
    Row,
    Source,
    Stage,
    StageTest,
    Target,
    ValidityColumns,
)
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.config import configured_warehouse_url
from medallion_assets.dialects import unfaithful
from medallion_assets.naming import (
    INGESTION_COLUMN_TYPES,
    STAGING_SUFFIX,
    identifier_length_problems,
    split_qualified,
    warehouse_name_problems,
)
from medallion_assets.sql_safety import UnsafeSql, checked_query, named_by_place

# A check a layer above the catalog adds to a load: (table, row, field, message) for every row it refuses.
RowCheck = Callable[[CatalogSnapshot], Iterable[tuple[str, Row, str, str]]]

# libyaml's parser where PyYAML was built with it (its wheels are): pure Python takes seconds on a large
# catalog.
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Far above any real catalog file (the seed's largest holds under 300), far below an alias bomb's expansion.
MAX_YAML_VALUES = 100_000


@dataclass(frozen=True)
class CatalogProblem:
    file: str
    line: int | None
    table: str
    key: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        subject = f"{self.table}[{self.key}]" if self.key else self.table
        return f"{where}: {subject}{'.' + self.field if self.field else ''}: {self.message}"


class CatalogNote(UserWarning):
    """What the loader read in a way the user may not expect, though it is valid (an output column named by
    its place); `catalog validate` and `load` print it as a note."""


class CatalogInvalid(Exception):
    def __init__(self, problems: list[CatalogProblem]):
        self.problems = problems
        super().__init__(
            f"{len(problems)} problem(s) in the catalog:\n" + "\n".join(f"  {p}" for p in problems)
        )


@dataclass
class LoadedRows:
    """Rows parsed from YAML, with where each came from, so later checks can point at the file and line."""

    rows: dict[str, list[Row]]
    origins: dict[tuple[str, tuple[Any, ...]], tuple[str, int | None]]
    # Ids of rows that did not parse: a reference to one is not "unknown" too (a knock-on error).
    broken: set[str] = field(default_factory=set)
    # The file line of each stage's transform_sql first line, by stage key, when its lines are the file's
    # lines (a literal block, `|`, or a one-line value): a problem in the SQL points at its own line.
    sql_lines: dict[tuple[Any, ...], int] = field(default_factory=dict)


def yaml_files(paths: list[str | Path]) -> list[Path]:
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted([*path.rglob("*.yaml"), *path.rglob("*.yml")])
            if not found:  # validating nothing would say "valid" of a mistyped folder
                raise FileNotFoundError(f"catalog folder {path} holds no .yaml or .yml file")
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"no such catalog file or folder: {path}")
    return files


def _expanded_values(root: yaml.Node | None) -> int:
    """How many values a YAML document holds once every alias is expanded, counted without expanding them:
    an alias is the node it names, so each node's count is computed once."""
    counts: dict[int, int] = {}

    def count(node: yaml.Node) -> int:
        if id(node) not in counts:
            children = (
                node.value
                if isinstance(node, yaml.SequenceNode)
                else [part for pair in node.value for part in pair]
                if isinstance(node, yaml.MappingNode)
                else []
            )
            counts[id(node)] = 1 + sum(count(child) for child in children)
        return counts[id(node)]

    return count(root) if root is not None else 0


def _row_key_label(table: str, raw: Mapping[str, Any]) -> str:
    """How problems name a row: a stage by its pipeline and name, any other row by its key."""
    if table == "stages" and raw.get("stage_name"):
        return f"{raw.get('pipeline_id', '?')}.{raw['stage_name']}"
    return ", ".join(str(raw.get(name, "?")) for name in LOADABLE[table].key_fields)


def parse_files(paths: list[str | Path]) -> tuple[LoadedRows, list[CatalogProblem]]:
    loaded = LoadedRows(rows={name: [] for name in LOADABLE}, origins={})
    problems: list[CatalogProblem] = []
    for file in yaml_files(paths):
        text = file.read_text()
        try:
            root = yaml.compose(text, Loader=SafeLoader)
            if (values := _expanded_values(root)) > MAX_YAML_VALUES:
                problems.append(
                    CatalogProblem(
                        str(file),
                        1,
                        "",
                        "",
                        "",
                        f"expands to over {MAX_YAML_VALUES:,} "
                        f"values through its aliases ({values:,}); refused",
                    )
                )
                continue
            # Built from the composed nodes: the text is parsed once.
            document = (SafeLoader("").construct_document(root) if root is not None else None) or {}
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            problems.append(
                CatalogProblem(
                    str(file), mark.line + 1 if mark else None, "", "", "", f"invalid YAML: {error}"
                )
            )
            continue
        if not isinstance(document, dict):
            problems.append(
                CatalogProblem(
                    str(file), 1, "", "", "", "a catalog file is a mapping of table name → list of rows"
                )
            )
            continue
        # Line numbers come from the composed node tree; safe_load drops them.
        item_nodes = {
            key.value: value.value if isinstance(value, yaml.SequenceNode) else []
            for key, value in (root.value if root is not None else [])  # None: a file of comments only
        }
        for table, items in document.items():
            if table not in LOADABLE:
                problems.append(
                    CatalogProblem(
                        str(file), None, table, "", "", f"unknown table; tables: {', '.join(LOADABLE)}"
                    )
                )
                continue
            if not isinstance(items, list):
                problems.append(CatalogProblem(str(file), None, table, "", "", "must be a list of rows"))
                continue
            for raw, node in zip(items, item_nodes.get(table, [None] * len(items))):
                problems.extend(_parse_row(loaded, file, node, table, raw))
    return loaded, problems


def _parse_row(
    loaded: LoadedRows, file: Path, node: yaml.Node | None, table: str, raw: Any
) -> list[CatalogProblem]:
    line = node.start_mark.line + 1 if node else None
    if not isinstance(raw, dict):
        return [CatalogProblem(str(file), line, table, "", "", "a row must be a mapping of field → value")]
    key_label = _row_key_label(table, raw)
    try:
        with warnings.catch_warnings(record=True, action="always", category=DeprecatedName) as deprecated:
            row = LOADABLE[table].model_validate(raw)
    except ValidationError as error:
        loaded.broken.add(str(raw.get(LOADABLE[table].key_fields[0])))
        return [
            CatalogProblem(
                str(file),
                _line_of(node, e["loc"]) if node else None,
                table,
                key_label,
                ".".join(map(str, e["loc"])),
                _quoting(e),
            )
            for e in error.errors()
        ]
    if isinstance(row, StageTest):
        row, unread = row.with_csv_rows(file.parent)
        if unread:
            return [CatalogProblem(str(file), line, table, key_label, name, said) for name, said in unread]
    origin_key = (table, row.key())
    if origin_key in loaded.origins:
        first_file, first_line = loaded.origins[origin_key]
        return [
            CatalogProblem(
                str(file),
                line,
                table,
                key_label,
                "",
                f"duplicate key, first defined at {first_file}:{first_line}",
            )
        ]
    loaded.origins[origin_key] = (str(file), line)
    loaded.rows[table].append(row)
    sql = node and next((v for k, v in node.value if k.value == "transform_sql"), None)
    if isinstance(sql, yaml.ScalarNode) and (sql.style == "|" or sql.start_mark.line == sql.end_mark.line):
        # A literal block's text starts on the line after its `|`.
        loaded.sql_lines[row.key()] = sql.start_mark.line + (2 if sql.style == "|" else 1)
    for warning in deprecated:  # said again with where the old spelling is, for the user to fix
        if not isinstance(warning.message, DeprecatedName):
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
            continue
        old_name = warning.message.field
        where = _line_of(node, (old_name,)) if node else line
        warnings.warn(DeprecatedName(f"{file}:{where}: {warning.message}", old_name), stacklevel=2)
    return []


def _line_of(node: yaml.Node, loc: tuple[int | str, ...]) -> int:
    """The line of the item an error's location names inside a row (a rule of a rule set, say)."""
    for part in loc:
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((value for key, value in node.value if key.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
        node = child or node  # a part that names no node (a union's tag) is skipped
    return node.start_mark.line + 1


def _quoting(error: ErrorDetails) -> str:
    """Pydantic's message, with the offending value when it is a plain one the message does not quote yet."""
    value = error.get("input")
    if error["type"] == "missing" or isinstance(value, (dict, list)) or repr(value) in error["msg"]:
        return error["msg"]
    shown = repr(value)
    return f"{error['msg']}; got {shown if len(shown) <= 80 else shown[:77] + '...'}"


def merged_snapshot(stored: CatalogSnapshot, loaded: LoadedRows) -> CatalogSnapshot:
    merged = CatalogSnapshot({table: dict(rows) for table, rows in stored.tables.items()})
    for table, rows in loaded.rows.items():
        for row in rows:
            merged.add(table, row)
    return merged


def check_references(
    snapshot: CatalogSnapshot,
    origins: Mapping[tuple[str, tuple[Any, ...]], tuple[str, int | None]],
    checks: Sequence[RowCheck],
    broken: AbstractSet[str] = frozenset(),
    sql_lines: Mapping[tuple[Any, ...], int] | None = None,
    checked: CatalogSnapshot | None = None,
) -> list[CatalogProblem]:
    """Dangling references, inputs of the wrong kind, targets made twice, cycles, unparseable SQL, and what
    `checks` refuse. A reference to a row in `broken` (rows that did not parse, already reported) is no
    problem. A problem in a stage's SQL points at its line through `sql_lines` (LoadedRows.sql_lines).

    `checked`: a catalog checked already (the stored one, before a load): a stage's SQL is checked only when
    what its check reads (the stage, its target's columns, its inputs' declared columns) differs there, so a
    load of a large catalog parses the SQL it changes, not all of it."""
    problems = []

    def unknown(ref: str | None, known: Container[str]) -> bool:
        return bool(ref) and ref not in known and ref not in broken

    def located(table: str, row: Row, field: str, message: str, sql_line: int | None) -> CatalogProblem:
        file, line = origins.get((table, row.key()), ("catalog", None))
        first_sql_line = (sql_lines or {}).get(row.key()) if table == "stages" else None
        if sql_line is not None and first_sql_line is not None:
            line = first_sql_line + sql_line - 1
        return CatalogProblem(file, line, table, _row_key_label(table, row.model_dump()), field, message)

    def problem(table: str, row: Row, field: str, message: str, sql_line: int | None = None) -> None:
        problems.append(located(table, row, field, message, sql_line))

    sources, targets, pipelines = snapshot.sources, snapshot.targets, snapshot.pipelines
    for pipeline in pipelines.values():
        if unknown(pipeline.default_retry_id, snapshot.retry_policies):
            problem(
                "pipelines",
                pipeline,
                "default_retry_id",
                f"unknown retry policy {pipeline.default_retry_id!r}",
            )
    producers: dict[str, str] = {}
    graph = nx.DiGraph()
    for stage in snapshot.stages():
        if unknown(stage.pipeline_id, pipelines):
            problem("stages", stage, "pipeline_id", f"unknown pipeline {stage.pipeline_id!r}")
        target = targets.get(stage.target_id)
        if target is None:
            if unknown(stage.target_id, targets):
                problem("stages", stage, "target_id", f"unknown target {stage.target_id!r}")
        elif stage.target_id in producers:
            problem(
                "stages",
                stage,
                "target_id",
                f"target {stage.target_id!r} is already made by stage {producers[stage.target_id]}",
            )
        producers.setdefault(stage.target_id, f"{stage.pipeline_id}.{stage.stage_name}")
        for field_name, input_id in [("input_id", stage.input_id), *[("inputs", i) for i in stage.inputs]]:
            upstream = sources.get(input_id) or targets.get(input_id)
            if upstream is None:
                if unknown(input_id, {**sources, **targets}):
                    problem("stages", stage, field_name, f"unknown source or target {input_id!r}")
            elif target is not None and (target.layer == "bronze") != isinstance(upstream, Source):
                expected = (
                    "a raw source" if target.layer == "bronze" else "an upstream target (bronze or silver)"
                )
                problem(
                    "stages", stage, field_name, f"{input_id!r} must be {expected} for a {target.layer} stage"
                )
            elif (
                isinstance(upstream, Target)
                and upstream.layer == "gold"
                and target
                and target.layer != "gold"
            ):
                problem(
                    "stages", stage, field_name, f"{target.layer} stage cannot read gold target {input_id!r}"
                )
            graph.add_edge(input_id, stage.target_id)
        references: list[tuple[str, str | None, Container[str], str]] = [
            ("validation_set_id", stage.validation_set_id, snapshot.rule_sets, "rule set"),
            ("retry_id", stage.retry_id, snapshot.retry_policies, "retry policy"),
        ]
        for field_name, ref, known, what in references:
            if unknown(ref, known):
                problem("stages", stage, field_name, f"unknown {what} {ref!r}")
        if stage.transform_sql and not (checked and _same_sql_check(checked, snapshot, stage)):
            declared = {input_id: declared_columns(snapshot, input_id) for input_id in stage.input_ids()}
            schemas = {input_id: columns for input_id, columns in declared.items() if columns is not None}
            try:
                query = checked_query(
                    stage.transform_sql,
                    stage.sql_dialect,
                    stage.input_ids(),
                    None if len(schemas) < len(declared) else schemas,
                    target.columns if target is not None else None,
                    list(target.columns or ()) if target is not None else (),
                )
            except UnsafeSql as error:
                problem("stages", stage, "transform_sql", str(error), error.line)
            else:
                for named, sql_line in named_by_place(query):
                    noted = located("stages", stage, "transform_sql", named, sql_line)
                    warnings.warn(CatalogNote(str(noted)), stacklevel=2)
                if construct := unfaithful(query, stage.sql_dialect):
                    problem(
                        "stages",
                        stage,
                        "transform_sql",
                        f"uses {construct}: Spark would not compute it as {stage.sql_dialect} does",
                    )
    try:
        cycle = nx.find_cycle(graph)
        first = snapshot.stage_producing(cycle[0][1])
        assert first is not None, "every edge of the graph ends at a stage's target"
        problem(
            "stages",
            first,
            "input_id",
            "cycle between stages: " + " → ".join([cycle[0][0], *(v for _, v in cycle)]),
        )
    except nx.NetworkXNoCycle:
        pass
    for row in snapshot.rows_of("pipeline_profiles", PipelineProfile).values():
        if row.pipeline_id not in pipelines:
            problem("pipeline_profiles", row, "pipeline_id", f"unknown pipeline {row.pipeline_id!r}")
    for rule in snapshot.rows_of("healing_actions", HealingAction).values():
        if rule.pipeline_id and rule.pipeline_id not in pipelines:
            problem("healing_actions", rule, "pipeline_id", f"unknown pipeline {rule.pipeline_id!r}")
    locations = {
        target.target_id: target.location
        for target in targets.values()
        # A warehouse target always has a location (Target checks it); the test is for the type checker.
        if target.kind == "warehouse" and target.location is not None
    }
    for target_id, message in warehouse_name_problems(locations).items():
        problem("targets", targets[target_id], "location", message)
    for target_id, location in locations.items():
        # The table's name first: a name too long is too long for its staging table too, said once.
        names = [*split_qualified(location), split_qualified(location)[-1] + STAGING_SUFFIX]
        for message in identifier_length_problems(names, configured_warehouse_url())[:1]:
            problem("targets", targets[target_id], "location", message)
        columns = list(targets[target_id].columns or ())
        for message in identifier_length_problems(columns, configured_warehouse_url()):
            problem("targets", targets[target_id], "columns", message)
    for check in checks:
        for refused in check(snapshot):
            problem(*refused)
    return problems


def _same_sql_check(checked: CatalogSnapshot, snapshot: CatalogSnapshot, stage: Stage) -> bool:
    """Whether checking `stage`'s SQL in `snapshot` reads what it read in `checked`: the same stage row, its
    target's declared columns and its inputs' declared columns."""
    before = checked.tables["stages"].get(stage.key())
    target, was = snapshot.targets.get(stage.target_id), checked.targets.get(stage.target_id)
    return (
        before == stage
        and (target and target.columns) == (was and was.columns)
        and all(declared_columns(checked, i) == declared_columns(snapshot, i) for i in stage.input_ids())
    )


def declared_columns(snapshot: CatalogSnapshot, dataset_id: str) -> dict[str, str] | None:
    """The columns (name → Spark type) a dataset is declared to have as a stage's SQL reads it, or None when
    not declared.

    Bronze holds its source's columns and the ingestion columns; silver and gold hold their declared columns,
    except the event columns a change feed keeps out (`except_columns`), and a type 2 history its validity
    columns too, in the terms of its sequence.
    """
    target = snapshot.targets.get(dataset_id)
    if target is None or target.layer != "bronze":
        if target is None or target.columns is None:
            return None
        if target.cdc is None:
            return dict(target.columns)
        left_out = target.cdc.except_columns
        columns = {name: kind for name, kind in target.columns.items() if name not in left_out}
        if target.scd_type == 2:
            validity = target.validity_columns or ValidityColumns()
            sequence = target.columns[target.cdc.sequence_by]
            columns.update(
                {validity.valid_from: sequence, validity.valid_to: sequence, validity.is_current: "boolean"}
            )
        return columns
    producer = snapshot.stage_producing(dataset_id)
    source = snapshot.sources.get(producer.input_id) if producer else None
    if source is None or source.columns is None:
        return None
    return {**source.columns, **INGESTION_COLUMN_TYPES}


def validate_files(
    stored: CatalogSnapshot, paths: list[str | Path], checks: Sequence[RowCheck]
) -> LoadedRows:
    """Parse and check files against the stored catalog; raises CatalogInvalid listing every problem."""
    loaded, problems = parse_files(paths)
    problems += check_references(
        merged_snapshot(stored, loaded), loaded.origins, checks, loaded.broken, loaded.sql_lines, stored
    )
    if problems:
        raise CatalogInvalid(problems)
    return loaded
