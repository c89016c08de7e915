"""A gold target's days (`incremental: {by, lookback}`), as its definition makes them: the column of its main
input whose day each of its rows' `by` is, followed through its SQL by sqlglot's column lineage. Checked when
the catalog is validated and when a run plans; Spark is not needed for either."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.lineage import lineage

from medallion_assets.catalog.loader import declared_columns
from medallion_assets.catalog.models import Incremental, Stage, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.sql_safety import checked_query


def day_column(key: exp.Expr) -> str | None:
    """The input column an expression (a group key) is, or is the day of (`CAST(c AS DATE)`, `c::DATE`,
    `TO_DATE(c)`, `DATE(c)`); None for any other expression. A group's rows then lie within its days of that
    column."""
    if isinstance(key, (exp.Cast, exp.TryCast)) and key.to.is_type(exp.DataType.Type.DATE):
        key = key.this
    elif isinstance(key, (exp.TsOrDsToDate, exp.Date)) and not key.args.get("format"):
        key = key.this
    return key.name if isinstance(key, exp.Column) else None


class NotDaywise(ValueError):
    """A gold query whose `incremental.by` column is not the day of an event time of its main input; the
    message says why."""


_DAY_TYPES = ("date", "timestamp", "timestamp_ntz")


def day_source(
    sql: str, dialect: str, by: str, main_input: str, schemas: Mapping[str, Mapping[str, str]]
) -> str:
    """The column of `main_input` whose day the query's output column `by` is, followed through every CTE
    and subquery by sqlglot's column lineage: at each step `by` is one column, or the day of one
    (`day_column`), so each output row's `by` falls on the day of the main input's row it came from. Then
    the rows of some days of gold come from the rows of those days of the main input (and whatever the other
    inputs, dimensions, join to them). `schemas`: each input's columns (name → Spark type), which resolve
    the query's unqualified columns.

    Raises NotDaywise, saying why: `by` is not an output, is made from several columns or none, from a
    column of another input, by anything but a day (an aggregate, a window, `DATE_TRUNC`), or from a column
    that is not a date or timestamp."""
    query = checked_query(sql, dialect, list(schemas), names=None)
    known = {name: dict(columns) for name, columns in schemas.items() if columns}
    try:
        step = lineage(by, query, schema=known, dialect=dialect)
    except SqlglotError:
        raise NotDaywise(f"its SQL outputs no column {by}") from None
    column = by
    while step.downstream:
        made_of = step.expression.unalias()
        day_of = day_column(made_of)
        if day_of is None:
            raise NotDaywise(f"{by} is {made_of.sql(dialect)}, not a column or the day of one")
        if len(step.downstream) > 1:
            raise NotDaywise(f"{by} is made from {len(step.downstream)} columns, not from one")
        column, step = day_of, step.downstream[0]
    if not isinstance(step.expression, exp.Table):
        raise NotDaywise(f"{by} is made from a column {column} of no known input: qualify it with its input")
    table = step.expression.name
    if table.lower() != main_input.lower():
        raise NotDaywise(
            f"{by} is made from {table}.{column}, a column of the dimension input {table}, not of the main "
            f"input {main_input}"
        )
    # Unknown when the input's columns are not declared: the run checks the column it reads.
    spelled, kind = next(
        ((name, kind) for name, kind in schemas[main_input].items() if name.lower() == column.lower()),
        (column, None),
    )
    if kind is not None and kind.lower() not in _DAY_TYPES:
        raise NotDaywise(f"{by} is made from {table}.{column}, which is {kind}, not a date or timestamp")
    return spelled


def gold_day_source(stage: Stage, target: Target, schemas: dict[str, dict[str, str]]) -> str:
    """The column of a gold stage's main input whose days its `incremental.by` falls on (`day_source`), given
    each input's columns (`schemas`). Raises NotDaywise, saying why, when gold cannot be recomputed by
    those days."""
    assert isinstance(target.incremental, Incremental)
    by = target.incremental.by
    if not stage.transform_sql:
        why = f"it has no SQL to make {by} of"
    else:
        try:
            return day_source(stage.transform_sql, stage.sql_dialect, by, stage.input_id, schemas)
        except NotDaywise as not_daywise:
            why = str(not_daywise)
    raise NotDaywise(f"it cannot be recomputed by the days of {by}: {why}")


def declared_schemas(stage: Stage, snapshot: CatalogSnapshot) -> dict[str, dict[str, str]]:
    """Each input's declared columns as the stage's SQL reads them (none when undeclared)."""
    return {input_id: declared_columns(snapshot, input_id) or {} for input_id in stage.input_ids()}


def check_gold_days(snapshot: CatalogSnapshot) -> Iterator[tuple[str, Target, str, str]]:
    """Gold targets declared `incremental: {by, lookback}` whose stage's SQL does not make `by` the day of
    an event time of its main input, as far as the inputs' declared columns tell (a RowCheck of
    `medallion catalog validate`)."""
    for target in snapshot.targets.values():
        stage = snapshot.stage_producing(target.target_id)
        if target.layer != "gold" or not isinstance(target.incremental, Incremental) or stage is None:
            continue
        try:
            gold_day_source(stage, target, declared_schemas(stage, snapshot))
        except NotDaywise as not_daywise:
            yield "targets", target, "incremental", str(not_daywise)
