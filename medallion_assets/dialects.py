"""Redshift's meaning kept when its SQL runs in Spark: where sqlglot transpiles the text but not the meaning.

sqlglot turns `sql_dialect: redshift` text into Spark SQL; a few constructs come out computing something
else. Each is rewritten here on the parsed, type-annotated tree (`redshift_semantics`), and
`tests/test_redshift_semantics.py` compares every covered construct with PostgreSQL, the Redshift-family
engine of the tests, on the same rows:

- `/` of two integers is integer division in Redshift (7 / 2 = 3), true division in Spark: it becomes DIV;
- a cast of a decimal to an integer type rounds in Redshift (3.7::INT = 4), truncates in Spark: the value
  is rounded first (half away from zero for decimals, half to even for floating point, as PostgreSQL does);
- TRUNC(number, n) truncates toward zero (Spark's TRUNC is for dates, and sqlglot drops `n`), and
  TRUNC(timestamp) is the timestamp's date (sqlglot casts it to a number);
- DATEADD gives a timestamp, also of a date (Spark's DATE_ADD of days gives a date);
- DATEDIFF counts the boundaries crossed (DATEDIFF(month, '2024-01-31', '2024-02-01') = 1), where sqlglot
  uses Spark's MONTHS_BETWEEN, a fraction that rounds down to 0.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

# The dialects whose semantics this module keeps in Spark.
KEPT = frozenset({"redshift"})
# Constructs Spark would compute otherwise, with no faithful rewrite here: refused at `catalog validate`.
UNFAITHFUL: dict[type[exp.Expr], str] = {
    exp.PercentileCont: "PERCENTILE_CONT, which sqlglot turns into Spark's approximate PERCENTILE_APPROX",
    exp.SimilarTo: "SIMILAR TO, which Spark does not have",
}
# DATEDIFF units counted by calendar fields: each unit's number since year 0, whose difference is the count.
_CALENDAR_UNITS = {"YEAR": 1, "QUARTER": 4, "MONTH": 12}


def redshift_semantics(query: exp.Query, dialect: str, schemas: Mapping[str, Mapping[str, str]]) -> exp.Query:
    """The query rewritten so Spark computes what `dialect` would; unchanged for a dialect not in KEPT.
    `schemas` are the inputs' columns (name → Spark type), which say where a `/` divides integers."""
    if dialect not in KEPT:
        return query
    typed = annotate_types(
        qualify(
            query.copy(), dialect=dialect, schema=_schema(schemas), quote_identifiers=False, identify=False
        ),
        schema=_schema(schemas),
        dialect=dialect,
    )
    # Children before their parents (the reverse of a pre-order walk), so a rewritten node's operands are
    # rewritten too: sqlglot's own `transform` does not visit what it has replaced. No rewrite replaces the
    # root, a query.
    for node in reversed(list(typed.walk())):
        kept = _kept(node)
        if kept is not node:
            kept.type = kept.type or node.type  # for the rewrites of its parents (a division's operand)
            node.replace(kept)
    return typed


def unfaithful(query: exp.Query, dialect: str) -> str | None:
    """The first construct of the query Spark would not compute as `dialect` does, said for the user; None
    when there is none or the dialect is not one this module keeps."""
    if dialect not in KEPT:
        return None
    for node in query.walk():
        if isinstance(node, exp.GroupConcat) and isinstance(node.this, exp.Distinct):
            return "LISTAGG(DISTINCT …), which sqlglot turns into a LISTAGG call Spark refuses"
        if type(node) in UNFAITHFUL:
            return UNFAITHFUL[type(node)]
    return None


def _schema(schemas: Mapping[str, Mapping[str, str]]) -> MappingSchema:
    return MappingSchema(
        {
            name: {
                column: exp.DataType.build(type_name, dialect="spark")
                for column, type_name in columns.items()
            }
            for name, columns in schemas.items()
        },
        dialect="spark",
    )


def _kept(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Div) and _all_integers(node.this, node.expression):
        return exp.IntDiv(this=node.this, expression=node.expression)
    if isinstance(node, exp.Cast) and node.to.is_type(*exp.DataType.INTEGER_TYPES):
        source = node.this.type
        if source is not None and source.is_type(*exp.DataType.REAL_TYPES):
            rounding = exp.Round if source.is_type(exp.DataType.Type.DECIMAL) else _bround
            return exp.Cast(this=rounding(this=node.this), to=node.to)
    if isinstance(node, exp.TsOrDsAdd):  # Redshift's DATEADD is a timestamp, even of a date
        return exp.cast(node.copy(), exp.DataType.Type.TIMESTAMP)
    if isinstance(node, exp.Trunc):
        return _trunc(node)
    if (
        isinstance(node, exp.TsOrDsDiff)
        and node.unit is not None
        and node.unit.name.upper() in _CALENDAR_UNITS
    ):
        per_year = _CALENDAR_UNITS[node.unit.name.upper()]
        return exp.paren(_calendar_count(node.this, per_year) - _calendar_count(node.expression, per_year))
    return node


def _all_integers(*operands: exp.Expr) -> bool:
    return all(o.type is not None and o.type.is_type(*exp.DataType.INTEGER_TYPES) for o in operands)


def _bround(this: exp.Expr) -> exp.Expr:
    """Spark's BROUND: half to even, as PostgreSQL rounds a double cast to an integer."""
    return exp.Anonymous(this="BROUND", expressions=[this])


def _trunc(node: exp.Trunc) -> exp.Expr:
    value, decimals = node.this, node.args.get("decimals") or exp.Literal.number(0)
    if value.type is not None and value.type.is_type(*exp.DataType.TEMPORAL_TYPES):
        return exp.cast(value, exp.DataType.Type.DATE)
    # Toward zero: down for a positive number, up for a negative one (Spark's FLOOR and CEIL take a scale).
    floor = exp.Anonymous(this="FLOOR", expressions=[value.copy(), decimals.copy()])
    ceil = exp.Anonymous(this="CEIL", expressions=[value.copy(), decimals.copy()])
    return exp.If(this=exp.LT(this=value.copy(), expression=exp.Literal.number(0)), true=ceil, false=floor)


def _calendar_count(value: exp.Expr, per_year: int) -> exp.Expr:
    """How many `1 / per_year` years lie between year 0 and the date of `value`."""
    year = exp.Anonymous(this="YEAR", expressions=[value.copy()])
    if per_year == 1:
        return year
    month = exp.Anonymous(this="MONTH", expressions=[value.copy()])
    within = (
        month - 1
        if per_year == 12
        else exp.IntDiv(this=exp.paren(month - 1), expression=exp.Literal.number(3))
    )
    return year * per_year + within
