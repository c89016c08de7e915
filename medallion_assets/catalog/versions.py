"""Lineage versions: how each dataset is made, and every change to it, recorded automatically.

A dataset's *definition* is what decides its rows: the stage's inputs (in order: the main input first), its
transformation (SQL and dialect, and the validation rules, which drop or quarantine rows), and its output (the
target's layer, type, location, declared columns, keys and load mode; for a bronze stage also the raw schema
it ingests). Its fingerprint, a short hash of the definition, is the asset's Dagster `code_version`, so
Dagster flags data made by an older version as stale. Names, descriptions, owners, retry policies and where
raw files live are not part of it: changing them changes no data.

Whenever a catalog write leaves a dataset with a fingerprint other than its latest version's, a new version is
recorded with the time, the fingerprint and what changed: inputs added and removed, output columns added,
removed and retyped, and which other parts of the definition changed. The store's one write path
(`CatalogStore.upsert`) calls `record_lineage_versions` inside the transaction of every write that touches
stages, targets, sources or rules: the write and its versions commit together, or neither does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlglot
from sqlalchemy import Connection, select
from sqlglot import exp

from medallion_assets.catalog.models import ColumnLineage, Stage, Target
from medallion_assets.catalog.schema import conflict_insert, lineage_versions
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.sql_safety import parsed_statements

# The catalog tables whose rows make up definitions: a write to any other table cannot change a version.
DEFINING_TABLES = frozenset({"stages", "targets", "sources", "validation_rules", "column_lineage"})
_OUTPUT_FIELDS = {"target_id", "layer", "kind", "location", "columns", "keys", "keep_latest_by", "load_mode"}
_CHANGE_FIELDS = {
    "cdc",
    "scd_type",
    "track_history_columns",
    "track_history_except",
    "validity_columns",
    "version",
}
# The parts of a definition besides its inputs, in the order a diff names them.
_PARTS = ("transform", "rules", "output", "source")


def definition(stage: Stage, target: Target, snapshot: CatalogSnapshot) -> dict[str, Any]:
    """What decides the rows of the dataset `stage` makes: inputs, transformation, rules and output."""
    rules = snapshot.rule_sets.get(stage.validation_set_id) if stage.validation_set_id else None
    made: dict[str, Any] = {
        "inputs": stage.input_ids(),
        "transform": {"sql": stage.transform_sql, "dialect": stage.sql_dialect}
        if stage.transform_sql
        else None,
        "rules": [rule.model_dump(mode="json") for rule in rules.check_def] if rules else None,
        "output": target.model_dump(mode="json", include=_OUTPUT_FIELDS),
    }
    # Under the field's name before migration 0010: versions recorded before it keep their fingerprint.
    made["output"]["type"] = made["output"].pop("kind")
    # Fields added later count only where set: versions recorded before them keep their fingerprint.
    made["output"].update(target.model_dump(mode="json", include=_CHANGE_FIELDS, exclude_none=True))
    if target.cdc is not None and not target.cdc.from_snapshot:
        del made["output"]["cdc"]["from_snapshot"]  # a change feed keeps the fingerprint it had before
    source = snapshot.sources.get(stage.input_id) if target.layer == "bronze" else None
    if source is not None:
        made["source"] = source.model_dump(mode="json", include={"file_format", "columns", "options"})
    return made


def fingerprint(made: dict[str, Any]) -> str:
    """A short, stable hash of a definition: the lineage version's identity and the asset's code version."""
    return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()[:12]


def stage_fingerprint(stage: Stage, target: Target, snapshot: CatalogSnapshot) -> str:
    """The fingerprint of the dataset `stage` makes, as it stands in `snapshot`."""
    return fingerprint(definition(stage, target, snapshot))


def output_columns(stage: Stage, target: Target, snapshot: CatalogSnapshot) -> dict[str, str | None]:
    """The dataset's columns (name → type, None when only the name is known): declared on the target, else the
    raw schema a bronze stage ingests, else the names the SQL selects, else the catalog's column lineage."""
    if target.columns:
        return dict(target.columns)
    if target.layer == "bronze" and stage.input_id in snapshot.sources:
        return dict(snapshot.sources[stage.input_id].columns)
    if stage.transform_sql:
        try:
            # The loader accepts no transform SQL but a query (sql_safety.checked_query).
            statements = parsed_statements(stage.transform_sql, stage.sql_dialect)
            query = statements[0] if len(statements) == 1 else None
            names = query.named_selects if isinstance(query, exp.Query) else []
        except (sqlglot.errors.ParseError, ValueError):  # the loader refuses such SQL; nothing more to learn
            names = []
        # An unnamed expression or a star leaves the SQL's columns unknown.
        if names and all(name and name != "*" for name in names):
            return dict.fromkeys(names)
    lineage = [
        row
        for row in snapshot.rows_of("column_lineage", ColumnLineage).values()
        if row.downstream == target.target_id
    ]
    return dict.fromkeys(sorted({row.downstream_column for row in lineage}))


@dataclass(frozen=True)
class LineageVersion:
    """One recorded version of a dataset's lineage."""

    dataset: str
    version: int
    fingerprint: str
    via: str | None
    inputs: list[str]
    columns: dict[str, str | None]
    definition: dict[str, Any]
    transform_sql: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LineageVersion:
        # Versions written before migration 0004 know only their inputs and SQL.
        return cls(
            row["dataset"],
            row["version"],
            row["fingerprint"],
            row.get("via"),
            list(row["inputs"]),
            dict(row.get("columns") or {}),
            dict(row.get("definition") or {}),
            row["transform_sql"],
            row["created_at"],
        )


def version_diff(previous: LineageVersion | None, current: LineageVersion) -> dict[str, list[str]]:
    """What changed from `previous` to `current`: inputs added and removed, columns added, removed and retyped
    (`name: old → new`), and `changed`, the other parts of the definition that differ (transform, rules,
    output, source). Against no previous version, every input and column is added."""
    before_inputs = previous.inputs if previous else []
    before_columns = previous.columns if previous else {}
    after_columns = current.columns
    retyped = [
        f"{name}: {before_columns[name]} → {after_columns[name]}"
        for name in after_columns
        if name in before_columns
        and None not in (before_columns[name], after_columns[name])
        and before_columns[name] != after_columns[name]
    ]
    changed = (
        []
        if previous is None or not previous.definition
        else [
            part
            for part in _PARTS
            if _without_columns(previous.definition.get(part))
            != _without_columns(current.definition.get(part))
        ]
    )
    return {
        "inputs_added": [i for i in current.inputs if i not in before_inputs],
        "inputs_removed": [i for i in before_inputs if i not in current.inputs],
        "columns_added": [c for c in after_columns if c not in before_columns],
        "columns_removed": [c for c in before_columns if c not in after_columns],
        "columns_retyped": retyped,
        "changed": changed,
    }


def _without_columns(part: Any) -> Any:
    """A part of a definition without its columns, which a diff reports one by one."""
    return {k: v for k, v in part.items() if k != "columns"} if isinstance(part, dict) else part


def stored_versions(connection: Connection, dataset: str | None = None) -> list[LineageVersion]:
    """Recorded versions, of one dataset or of all, oldest first per dataset."""
    query = select(lineage_versions).order_by(lineage_versions.c.dataset, lineage_versions.c.version)
    if dataset is not None:
        query = query.where(lineage_versions.c.dataset == dataset)
    return [LineageVersion.from_row(dict(row)) for row in connection.execute(query).mappings()]


def record_lineage_versions(
    connection: Connection, snapshot: CatalogSnapshot, now: datetime | None = None
) -> list[LineageVersion]:
    """Record, in the caller's transaction, a new version of every dataset whose definition in `snapshot`
    differs from its latest recorded version (or that has none yet). Idempotent; returns those recorded.

    Two processes recording the same change at once both compute the same version number; the second insert
    is skipped, not an error.
    """
    now = now or datetime.now(UTC)
    latest = {v.dataset: v for v in stored_versions(connection)}
    new = []
    for stage in snapshot.stages():
        target = snapshot.targets.get(stage.target_id)
        if target is None:
            continue
        made = definition(stage, target, snapshot)
        identity = fingerprint(made)
        before = latest.get(stage.target_id)
        if before is not None and before.fingerprint == identity:
            continue
        new.append(
            LineageVersion(
                stage.target_id,
                before.version + 1 if before else 1,
                identity,
                f"{stage.pipeline_id}.{stage.stage_name}",
                stage.input_ids(),
                output_columns(stage, target, snapshot),
                made,
                stage.transform_sql,
                now,
            )
        )
    if new:
        statement = conflict_insert(connection, lineage_versions).on_conflict_do_nothing(
            index_elements=["dataset", "version"]
        )
        connection.execute(statement, [v.__dict__ for v in new])
    return new


def history_report(versions: list[LineageVersion]) -> list[dict[str, Any]]:
    """The versions of one dataset as `medallion lineage history --json` prints them, each with its diff."""
    report, previous = [], None
    for version in versions:
        report.append(
            {
                "version": version.version,
                "created_at": version.created_at.isoformat(),
                "code_version": version.fingerprint,
                "via": version.via,
                "inputs": version.inputs,
                "columns": version.columns,
                **version_diff(previous, version),
                "transform_sql": version.transform_sql,
            }
        )
        previous = version
    return report


def describe_changes(entry: dict[str, Any]) -> str:
    """A version's diff in one line, e.g. `+silver_weather; columns +rain_mm ~revenue: double → decimal(18,2);
    transform changed`."""
    inputs = [*(f"+{i}" for i in entry["inputs_added"]), *(f"-{i}" for i in entry["inputs_removed"])]
    columns = [
        *(f"+{c}" for c in entry["columns_added"]),
        *(f"-{c}" for c in entry["columns_removed"]),
        *(f"~{c}" for c in entry["columns_retyped"]),
    ]
    parts = [" ".join(inputs)] if inputs else []
    if columns:
        parts.append("columns " + " ".join(columns))
    return "; ".join([*parts, *(f"{part} changed" for part in entry["changed"])])
