"""One category per changed dataset, as SQLMesh categorises a model's change, from sqlglot's semantic diff of
its SQL and from its declared columns, rules, source and rows:

- `breaking`: its rows or columns change meaning for what reads it (SQL that means something else, inputs,
  keys, a dropped or retyped column, a rule that drops rows): it and everything downstream are rebuilt;
- `non_breaking`: it only gains columns (or is new, or a new contract version): it alone is rebuilt;
- `checks_only`: only rules that judge (warn, fail) changed: nothing is rebuilt, the checks are judged again;
- `metadata_only`: owner, description, schedule, SLA, retries, layout, its unit tests…: nothing runs;
- `no_op`: its rows changed only in formatting or comments, or SQL rewritten to mean the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import sqlglot
from sqlglot import exp
from sqlglot.diff import Insert, Remove, Update
from sqlglot.optimizer import optimize

from medallion_assets.catalog.loader import declared_columns
from medallion_assets.catalog.models import Rule, Stage
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.sql_safety import parsed_statements

Category = Literal["breaking", "non_breaking", "checks_only", "metadata_only", "no_op"]
# Most consequential first: a dataset's category is its findings' first in this order.
CATEGORIES: tuple[Category, ...] = ("breaking", "non_breaking", "checks_only", "metadata_only", "no_op")

# Target fields whose change changes what the rows are, or which rows there are.
_ROW_FIELDS = (
    "layer",
    "kind",
    "location",
    "keys",
    "keep_latest_by",
    "load_mode",
    "cdc",
    "scd_type",
    "track_history_columns",
    "track_history_except",
    "validity_columns",
)
# Rule actions that change which rows a dataset holds; the others only judge them.
_ROW_ACTIONS = frozenset({"drop", "quarantine"})
# Type changes that keep every value a consumer could read: a column widened, not narrowed.
_WIDER = {
    "int": {"bigint", "long", "double", "string"},
    "bigint": {"long", "string"},
    "long": {"bigint", "string"},
    "float": {"double", "string"},
    "double": {"string"},
    "date": {"timestamp", "string"},
    "boolean": {"string"},
}


@dataclass(frozen=True)
class Finding:
    """What one part of a dataset's definition change means, and in which category it puts the dataset."""

    category: Category
    reason: str


def category_of(findings: Iterable[Finding]) -> Category:
    found = {finding.category for finding in findings}
    return next((category for category in CATEGORIES if category in found), "no_op")


def widens(old: str, new: str) -> bool:
    """Whether a column of type `old` may become `new` without a value its readers hold changing meaning."""
    old, new = old.replace(" ", "").lower(), new.replace(" ", "").lower()
    if old == new or new in _WIDER.get(old, ()):
        return True
    if old.startswith("decimal(") and new.startswith("decimal("):
        (p, s), (p2, s2) = (map(int, t[8:-1].split(",")) for t in (old, new))
        return s2 >= s and p2 - s2 >= p - s
    return False


def column_findings(what: str, old: dict[str, str] | None, new: dict[str, str] | None) -> list[Finding]:
    """Declared columns: dropped or narrowed breaks, added or widened does not."""
    old, new = old or {}, new or {}
    dropped = [name for name in old if name not in new]
    narrowed = [
        f"{name} {old[name]} → {new[name]}"
        for name in old
        if name in new and not widens(old[name], new[name])
    ]
    widened = [
        f"{name} {old[name]} → {new[name]}"
        for name in old
        if name in new and old[name] != new[name] and widens(old[name], new[name])
    ]
    added = [name for name in new if name not in old]
    findings = []
    if dropped:
        findings.append(Finding("breaking", f"{what}: dropped {', '.join(dropped)}"))
    if narrowed:
        findings.append(Finding("breaking", f"{what}: retyped {', '.join(narrowed)}"))
    if widened:
        findings.append(Finding("non_breaking", f"{what}: widened {', '.join(widened)}"))
    if added:
        findings.append(Finding("non_breaking", f"{what}: added {', '.join(added)}"))
    return findings


def canonical_query(sql: str, dialect: str, schemas: dict[str, object] | None) -> exp.Expr:
    """The query as sqlglot's optimizer normalizes it (qualified, simplified, predicates in canonical order),
    over its inputs' declared columns when all are declared; without comments. SQL that does not optimize
    (an input of unknown columns the SQL needs resolved) is compared as parsed."""
    statements = parsed_statements(sql, dialect)  # one query, as the loader accepts; else as sqlglot reads it
    parsed = statements[0] if len(statements) == 1 else sqlglot.parse_one(sql, read=dialect)
    try:
        return optimize(parsed, schema=schemas, dialect="spark")
    except (sqlglot.errors.SqlglotError, KeyError, ValueError):
        return parsed


def _text(query: exp.Expr) -> str:
    return query.sql(dialect="spark", comments=False)


def _adds_projections_only(old: exp.Expr, new: exp.Expr, canonical: Any) -> list[str]:
    """The columns `new` selects beyond `old`'s, when taking them out of it gives `old` back; else none."""
    if not isinstance(old, exp.Select) or not isinstance(new, exp.Select):
        return []
    old_names, new_names = old.named_selects, new.named_selects
    added = [name for name in new_names if name not in old_names]
    if not added or set(old_names) - set(new_names):
        return []
    pruned = new.copy()
    by_name = {projection.alias_or_name: projection for projection in pruned.expressions}
    pruned.set("expressions", [by_name[name] for name in old_names])
    return added if _text(canonical(_text(pruned))) == _text(old) else []


def _edits(old: exp.Expr, new: exp.Expr) -> str:
    """sqlglot's semantic diff of two queries, in a few words: the outermost parts removed, inserted and
    changed (a part inside one already named is not named again)."""
    edits = sqlglot.diff(old, new, delta_only=True)
    named = {id(e.expression) for e in edits if isinstance(e, (Insert, Remove))}
    shown = []
    for edit in edits:
        if isinstance(edit, (Insert, Remove)) and id(edit.expression.parent) not in named:
            verb = "inserted" if isinstance(edit, Insert) else "removed"
            shown.append(f"{verb} {_short(edit.expression)}")
        elif isinstance(edit, Update):
            shown.append(f"{_short(edit.source)} → {_short(edit.target)}")
    unique = list(dict.fromkeys(shown))
    return "; ".join(unique[:3]) + (f"; … ({len(edits)} edits)" if len(unique) > 3 else "")


def _short(node: exp.Expr) -> str:
    text = node.sql(dialect="spark", comments=False)
    return text if len(text) <= 40 else text[:37] + "..."


def sql_findings(
    old_stage: Stage, old: CatalogSnapshot, new_stage: Stage, new: CatalogSnapshot
) -> list[Finding]:
    """A stage's SQL, compared by meaning: formatting, comments and rewrites the optimizer proves equal are
    no change; only added output columns are non-breaking; anything else breaks."""
    if old_stage.transform_sql is None or new_stage.transform_sql is None:
        if old_stage.transform_sql == new_stage.transform_sql:
            return []
        return [
            Finding(
                "breaking", "transform_sql " + ("removed" if new_stage.transform_sql is None else "added")
            )
        ]

    def declared(snapshot: CatalogSnapshot, stage: Stage) -> dict[str, dict[str, str] | None]:
        return {input_id: declared_columns(snapshot, input_id) for input_id in stage.input_ids()}

    old_declared, new_declared = declared(old, old_stage), declared(new, new_stage)
    same_text = (old_stage.transform_sql, old_stage.sql_dialect) == (
        new_stage.transform_sql,
        new_stage.sql_dialect,
    )
    if same_text and old_declared == new_declared:  # the same SQL over the same columns: nothing to compare
        return []

    def canonical(stage: Stage, declared: dict[str, dict[str, str] | None]) -> Any:
        schemas: dict[str, object] = {k: v for k, v in declared.items() if v is not None}
        complete = schemas if len(schemas) == len(declared) else None
        return lambda sql, dialect=stage.sql_dialect: canonical_query(sql, dialect, complete)

    old_canonical, new_canonical = canonical(old_stage, old_declared), canonical(new_stage, new_declared)
    before = old_canonical(old_stage.transform_sql)
    after = new_canonical(new_stage.transform_sql)
    if _text(before) == _text(after):
        return []
    added = _adds_projections_only(before, after, lambda sql: new_canonical(sql, "spark"))
    if added:
        return [Finding("non_breaking", f"transform_sql: adds column(s) {', '.join(added)}")]
    return [Finding("breaking", f"transform_sql: {_edits(before, after) or 'means something else'}")]


def rule_findings(old: list[Rule], new: list[Rule]) -> list[Finding]:
    """Rules by name: a change to one that drops or quarantines rows changes the rows; others only judge."""
    before = {rule.name: rule for rule in old}
    after = {rule.name: rule for rule in new}
    findings = []
    for name in sorted({*before, *after}, key=str):
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        change = "added" if was is None else "removed" if now is None else "changed"
        if any(rule is not None and rule.action in _ROW_ACTIONS for rule in (was, now)):
            findings.append(Finding("breaking", f"rule {name} {change}: it decides which rows are kept"))
        else:
            findings.append(Finding("checks_only", f"rule {name} {change}"))
    return findings


def dataset_findings(old: CatalogSnapshot, new: CatalogSnapshot, target_id: str) -> list[Finding]:
    """Every part of how the dataset is made that differs between the two catalogs, categorised."""
    old_target, new_target = old.targets.get(target_id), new.targets.get(target_id)
    old_stage, new_stage = old.stage_producing(target_id), new.stage_producing(target_id)
    if new_target is None or new_stage is None:
        return []
    if old_target is None or old_stage is None:
        return [Finding("non_breaking", "a new dataset")]
    findings = []
    if old_stage.input_ids() != new_stage.input_ids():
        findings.append(
            Finding(
                "breaking", f"inputs: {', '.join(old_stage.input_ids())} → {', '.join(new_stage.input_ids())}"
            )
        )
    findings += sql_findings(old_stage, old, new_stage, new)
    findings += _metadata(
        "stage",
        old_stage.model_dump(
            exclude={"input_id", "inputs", "transform_sql", "sql_dialect", "validation_set_id"}
        ),
        new_stage.model_dump(
            exclude={"input_id", "inputs", "transform_sql", "sql_dialect", "validation_set_id"}
        ),
    )
    findings += column_findings("columns", old_target.columns, new_target.columns)
    for name in _ROW_FIELDS:
        if getattr(old_target, name) != getattr(new_target, name):
            findings.append(Finding("breaking", f"target {name} changed"))
    if (old_target.version or 1) != (new_target.version or 1):
        findings.append(
            Finding(
                "non_breaking",
                f"version {old_target.version or 1} → {new_target.version or 1}: builds "
                f"{new_target.warehouse_table()} beside {old_target.warehouse_table()}",
            )
        )
    old_layout, new_layout = old_target.lake_table, new_target.lake_table
    place = ("catalog", "namespace", "name")
    if any(getattr(old_layout, f, None) != getattr(new_layout, f, None) for f in place):
        findings.append(Finding("breaking", "lake_table: the dataset moves to another table"))
    findings += _metadata(
        "target",
        old_target.model_dump(exclude={"columns", "version", *_ROW_FIELDS}),
        new_target.model_dump(exclude={"columns", "version", *_ROW_FIELDS}),
    )
    findings += rule_findings(_rules(old, old_stage), _rules(new, new_stage))
    findings += _test_findings(old, old_stage, new, new_stage)
    findings += _source_findings(old, old_stage, new, new_stage)
    findings += _metadata(
        "pipeline",
        _dump(old.pipelines.get(old_stage.pipeline_id)),
        _dump(new.pipelines.get(new_stage.pipeline_id)),
    )
    findings += _metadata(
        "pipeline profile",
        _dump(old.tables["pipeline_profiles"].get((old_stage.pipeline_id,))),
        _dump(new.tables["pipeline_profiles"].get((new_stage.pipeline_id,))),
    )
    return findings


def _rules(snapshot: CatalogSnapshot, stage: Stage) -> list[Rule]:
    rule_set = snapshot.rule_sets.get(stage.validation_set_id) if stage.validation_set_id else None
    return list(rule_set.check_def) if rule_set else []


def _test_findings(
    old: CatalogSnapshot, old_stage: Stage, new: CatalogSnapshot, new_stage: Stage
) -> list[Finding]:
    """The stage's unit tests (`stage_tests` rows): they run only when asked (`medallion test`, `plan
    --test`), never in a run, so a change to them alone is metadata."""

    def tests(snapshot: CatalogSnapshot, stage: Stage) -> dict[str, Any]:
        return {  # as their rows compare (change/rows.py): a file's dates are a stored row's strings
            key[2]: row.model_dump(mode="json")
            for key, row in snapshot.tables["stage_tests"].items()
            if key[:2] == (stage.pipeline_id, stage.stage_name)
        }

    return _metadata("stage tests", tests(old, old_stage), tests(new, new_stage))


def _source_findings(
    old: CatalogSnapshot, old_stage: Stage, new: CatalogSnapshot, new_stage: Stage
) -> list[Finding]:
    """A bronze dataset's raw source: its format, options and columns decide the rows it ingests."""
    was, now = old.sources.get(old_stage.input_id), new.sources.get(new_stage.input_id)
    if was is None or now is None:
        return []
    findings = column_findings("source columns", was.columns, now.columns)
    for name in ("file_format", "options"):
        if getattr(was, name) != getattr(now, name):
            findings.append(Finding("breaking", f"source {name} changed"))
    findings += _metadata(
        "source",
        was.model_dump(exclude={"columns", "file_format", "options"}),
        now.model_dump(exclude={"columns", "file_format", "options"}),
    )
    return findings


def _dump(row: Any) -> dict[str, Any]:
    return row.model_dump() if row is not None else {}


def _metadata(what: str, old: dict[str, Any], new: dict[str, Any]) -> list[Finding]:
    changed = sorted(name for name in {*old, *new} if old.get(name) != new.get(name))
    return [Finding("metadata_only", f"{what} {', '.join(changed)} changed")] if changed else []
