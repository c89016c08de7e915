"""Silver and gold transformations over Spark DataFrames: SQL, casts to the declared schema, deduplication."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from medallion_assets.catalog.models.base import check_columns
from medallion_assets.dialects import redshift_semantics
from medallion_assets.engine.observed import Observed
from medallion_assets.errors import SqlNotAnalyzable
from medallion_assets.naming import INGESTION_COLUMNS
from medallion_assets.sql_safety import checked_query

# PySpark logs every SQL error it raises to stderr, with the JVM's whole stack trace, through these loggers of
# its own; the error itself is raised too, and a stage reports it in one line with the trace kept on its
# cause, in the run's log.
for _query_context_logger in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
    logging.getLogger(_query_context_logger).setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class Conformed:
    """Rows that fit the declared schema, and the rows that did not, each with its reason.

    `counts` is observed by the first action on `valid`: it holds `rows`, the number of rows in `rejected`
    (so the rejects need a pass of their own only when there are some), and `rows in`, every row conformed.
    """

    valid: DataFrame
    rejected: DataFrame
    counts: Observed


def counted(frame: DataFrame, where: Column | None = None) -> Observed:
    """`frame` with its rows (those `where` holds, if given) counted by the first action on it, as `rows`:
    a count without a pass of its own."""
    rows = F.count(F.lit(1)) if where is None else F.count(F.when(where, 1))
    return Observed(frame, rows.alias("rows"))


def to_spark_sql(
    sql: str, dialect: str, inputs: Mapping[str, Mapping[str, str]], names: Sequence[str] = ()
) -> str:
    """The Spark SQL of a transformation (written for Spark, or for another engine such as Redshift), checked
    again just before it runs to be one query over `inputs` (each input's columns, name → Spark type), and
    generated from the checked syntax tree, with the source dialect's semantics kept (dialects.py). An output
    without a name takes the one at its place in `names`, the target's declared columns (`checked_query`)."""
    query = checked_query(sql, dialect, inputs, names=names)
    return redshift_semantics(query, dialect, inputs).sql(dialect="spark")


def run_sql(
    spark: SparkSession, inputs: Mapping[str, DataFrame], sql: str, dialect: str, names: Sequence[str] = ()
) -> DataFrame:
    """Run SQL in which each input is a table named by its catalog id; `names`: the target's declared
    columns, which name the outputs the SQL leaves unnamed."""
    schemas = {
        name: {f.name: f.dataType.simpleString() for f in frame.schema.fields}
        for name, frame in inputs.items()
    }
    spark_sql = to_spark_sql(sql, dialect, schemas, names)
    for name, frame in inputs.items():
        frame.createOrReplaceTempView(name)
    try:
        return spark.sql(spark_sql)
    except AnalysisException as error:
        raise not_analyzable(error, "its SQL") from error


def not_analyzable(error: AnalysisException, what: str) -> SqlNotAnalyzable:
    """Spark's refusal in one line: its message's first, which names the error class and the column (not
    the position, which is in the generated Spark SQL); the plan and the JVM stack trace stay on the
    exception's cause."""
    return SqlNotAnalyzable(f"Spark cannot analyze {what}: {error.getMessage().strip().splitlines()[0]}")


# What makes a query's rows depend on rows of other groups, or on more than one input.
_ACROSS_GROUPS: tuple[type[exp.Expr], ...] = (
    exp.Join,
    exp.Limit,
    exp.Window,
    exp.Subquery,
    exp.With,
    exp.Lateral,
    exp.Explode,
    exp.Unnest,
    exp.Qualify,
)
# What makes a query's row depend on other rows, or on more than one input.
_NOT_ROW_BY_ROW = (*_ACROSS_GROUPS, exp.Group, exp.Having, exp.Distinct, exp.AggFunc, exp.Order)
# What gives another answer each time it runs: a group recomputed now would not match the others, kept.
_VOLATILE: tuple[type[exp.Expr], ...] = (
    exp.CurrentDate,
    exp.CurrentTimestamp,
    exp.CurrentTimestampLTZ,
    exp.CurrentDatetime,
    exp.CurrentTime,
    exp.Localtimestamp,
    exp.Localtime,
    exp.Rand,
    exp.Randn,
    exp.Uuid,
)


def row_by_row(sql: str, dialect: str, inputs: Collection[str]) -> bool:
    """Whether the query makes each output row from one input row alone (a projection and filter of one
    input): then it may run over new input rows only. No join, aggregation, window, DISTINCT, LIMIT, set
    operation, subquery or row generator."""
    query = checked_query(sql, dialect, inputs, names=None)
    if not isinstance(query, exp.Select) or len(list(query.find_all(exp.Table))) != 1:
        return False
    return not any(isinstance(node, _NOT_ROW_BY_ROW) for node in query.walk())


class NotGroupwise(ValueError):
    """A query whose groups cannot be recomputed one by one; the message says why."""


# Grouping sets make rows of several groupings at once, each spanning the groups of the finer ones.
_GROUPING_SETS: tuple[type[exp.Expr], ...] = (exp.Rollup, exp.Cube, exp.GroupingSets)


def group_keys(sql: str, dialect: str, input_id: str, input_columns: Collection[str]) -> dict[str, exp.Expr]:
    """Of an aggregation over one input (`SELECT …, agg(…) FROM input [WHERE …] GROUP BY … [HAVING …]`)
    whose GROUP BY keys are each a plain column of the input or a deterministic expression of its columns
    (`CAST(event_ts AS DATE)`), each projected as an output column: output column → the key's expression, its
    columns unqualified. A group's output rows then come from that group's input rows alone (the rows whose
    keys' values are the group's), so the groups a change touches can be recomputed from their rows and the
    other groups kept.

    Raises NotGroupwise, saying why, for anything else: no GROUP BY, ROLLUP/CUBE/GROUPING SETS, a key that
    holds an aggregate, names something other than an input column or is not an output column; a join,
    window, subquery, CTE, LIMIT, DISTINCT row, set operation; a function whose value changes from run to run
    (`current_date`, `rand`), or one sqlglot does not know, which may."""
    query = checked_query(sql, dialect, [input_id], names=None)
    if not isinstance(query, exp.Select) or len(list(query.find_all(exp.Table))) != 1:
        raise NotGroupwise("its SQL is not one SELECT over its input alone")
    group = query.args.get("group")
    if group is None or not group.expressions:
        raise NotGroupwise("its SQL has no GROUP BY")
    if query.args.get("distinct"):
        raise NotGroupwise("its SQL selects DISTINCT rows across groups")
    if any(group.args.get(kind) for kind in ("rollup", "cube", "grouping_sets", "totals")):
        raise NotGroupwise("its GROUP BY makes grouping sets, whose rows span groups")
    for node in query.walk():
        if isinstance(node, _ACROSS_GROUPS):
            raise NotGroupwise(f"its SQL holds {node.key.upper()}, which reads across groups")
        if isinstance(node, _VOLATILE):
            raise NotGroupwise(f"its SQL calls {node.sql(dialect)}, whose value changes from run to run")
    columns = {name.lower() for name in input_columns}
    outputs = {projection.alias_or_name.lower(): projection.unalias() for projection in query.selects}
    keys: dict[str, exp.Expr] = {}
    for key in group.expressions:
        resolved = _unqualified(_resolved_key(key, query.selects, columns, outputs), dialect)
        _check_key(resolved, columns, dialect)
        # The output whose value is the key's: a group's row is found by it in the table and the warehouse.
        output = next(
            (
                projection.alias_or_name
                for projection in query.selects
                if _unqualified(projection.unalias(), dialect) == resolved
            ),
            None,
        )
        if output is None:
            raise NotGroupwise(f"its GROUP BY key {resolved.sql(dialect)} is not an output column")
        keys[output] = resolved
    return keys


def _check_key(key: exp.Expr, columns: set[str], dialect: str) -> None:
    """Raises NotGroupwise unless the GROUP BY key is a scalar value of one input row: a grouping set, an
    aggregate, a name other than an input column's, or a function sqlglot does not know (a user-defined one,
    which may not be deterministic) is not."""
    text = key.sql(dialect)
    if isinstance(key, _GROUPING_SETS):
        raise NotGroupwise(f"its GROUP BY key {text} makes grouping sets, whose rows span groups")
    for node in key.walk():
        if isinstance(node, exp.AggFunc):
            raise NotGroupwise(f"its GROUP BY key {text} holds an aggregate")
        if isinstance(node, exp.Anonymous):
            raise NotGroupwise(f"its GROUP BY key {text} calls {node.name}, not known to be deterministic")
        if isinstance(node, exp.Column) and node.name.lower() not in columns:
            raise NotGroupwise(
                f"its GROUP BY key {text} names {node.name}, which is not a column of its input"
            )


def _unqualified(expression: exp.Expr, dialect: str) -> exp.Expr:
    """A copy of the expression of one input's columns without their table qualifier (`x.k1` is `k1`), its
    names normalized as the dialect resolves them, so two spellings of one key compare equal."""
    stripped = expression.copy().transform(
        lambda node: exp.column(node.this) if isinstance(node, exp.Column) and node.table else node
    )
    return normalize_identifiers(stripped, dialect=dialect)


def describe_groups(groups: Mapping[str, exp.Expr], dialect: str) -> str:
    """The group keys as a user reads them: an output that is the input column of its name by that name, any
    other by its expression (`event_date = CAST(event_ts AS DATE)`)."""
    return ", ".join(
        output
        if isinstance(key, exp.Column) and key.name.lower() == output.lower()
        else f"{output} = {key.sql(dialect)}"
        for output, key in groups.items()
    )


def group_key_column(output: str) -> str:
    """The helper column a group key's value is computed in; its name holds a space, which no catalog
    column's name (an identifier) can."""
    return f"group key {output}"


def with_group_keys(
    spark: SparkSession, rows: DataFrame, input_id: str, groups: Mapping[str, exp.Expr], dialect: str
) -> DataFrame:
    """Rows of the stage's input with each group key's value alongside, in its `group_key_column`: the key's
    expression run as the stage's SQL runs it (generated by sqlglot in the stage's dialect, then transpiled to
    Spark SQL with that dialect's semantics), so a row's group is the one the full query puts it in."""
    query = exp.select(
        exp.Star(),
        *[
            exp.alias_(key.copy(), exp.to_identifier(group_key_column(output), quoted=True))
            for output, key in groups.items()
        ],
    ).from_(exp.Table(this=exp.to_identifier(input_id, quoted=True)))
    return run_sql(spark, {input_id: rows}, query.sql(dialect=dialect, identify=True), dialect)


def _resolved_key(
    key: exp.Expr, selects: list[exp.Expr], columns: set[str], outputs: Mapping[str, exp.Expr]
) -> exp.Expr:
    """What a GROUP BY key groups by, resolved as Spark does: an ordinal is the output at that position, a
    name an input column before an output's alias."""
    if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit():
        position = int(key.this)
        return selects[position - 1].unalias() if 0 < position <= len(selects) else key
    if isinstance(key, exp.Column) and key.name.lower() not in columns:
        return outputs.get(key.name.lower(), key)
    return key


def conform(frame: DataFrame, columns: Mapping[str, str]) -> Conformed:
    """Cast to the declared schema. A present value that does not cast rejects its row, with the reason."""
    # Each value is cast once, into a column of its own: casts (a timestamp's parse) are the costly part. The
    # helper columns' names hold a space, which no declared column's name (an identifier) can. The
    # expressions are SQL text, one `selectExpr` for all: a PySpark column expression costs a py4j call per
    # function (about 1.5 ms each), sixteen casts 66 ms against 11. The text is safe to build: names are
    # checked identifiers, back-quoted, and types match the catalog's closed list of type spellings (checked
    # again here, as the catalog checks its rows).
    types = check_columns(columns)
    value = {name: f"`{name}`" for name in columns}
    typed = {name: f"`typed {name}`" for name in columns}
    fails = {name: f"({value[name]} IS NOT NULL AND {typed[name]} IS NULL)" for name in columns}
    try:
        checked = frame.selectExpr(
            "*", *[f"try_cast({value[name]} AS {types[name]}) AS {typed[name]}" for name in columns]
        ).selectExpr("*", f"({' OR '.join(['FALSE', *fails.values()])}) AS `rejected row`")  # never null
    except AnalysisException as error:  # a declared column the SQL does not produce
        raise not_analyzable(error, "the casts to its declared columns") from error
    # One observation for both counts: each costs a pass over the rows outside Spark's generated code.
    counts = Observed(
        checked, F.expr("count(CASE WHEN `rejected row` THEN 1 END) AS rows"), F.expr("count(1) AS `rows in`")
    )
    lineage = [f"`{c}`" for c in INGESTION_COLUMNS if c in frame.columns]
    valid = counts.frame.where("NOT `rejected row`").selectExpr(
        *[f"{typed[name]} AS {value[name]}" for name in columns], *lineage
    )
    # Only rejected rows have their reason spelled out.
    reasons = [
        f"CASE WHEN {fails[name]} THEN "
        f"concat('{name}: cannot cast ', CAST({value[name]} AS STRING), ' to {types[name]}') END"
        for name in columns
    ]
    everything = ", ".join(_back_quoted(c) for c in frame.columns)
    rejected = checked.where("`rejected row`").selectExpr(
        *lineage, f"concat_ws('; ', {', '.join(reasons)}) AS reason", f"to_json(struct({everything})) AS raw"
    )
    return Conformed(valid, rejected, counts)


def _back_quoted(name: str) -> str:
    """Any column name as a Spark SQL identifier (a back quote in it doubled)."""
    return "`" + name.replace("`", "``") + "`"


def deduplicate(frame: DataFrame, keys: list[str], keep_latest_by: str | None) -> DataFrame:
    """One row per key: the latest by `keep_latest_by` when given, else the earliest ingested."""
    if not keys:
        return frame
    # Ties of `keep_latest_by` go to the earliest ingested, as a merge of later batches keeps it.
    ingested = [F.col(c) for c in ("_ingested_at", "_source_file", "_source_line") if c in frame.columns]
    if keep_latest_by:
        order = [F.col(keep_latest_by).desc_nulls_last(), *ingested]
    elif ingested:
        order = ingested
    else:
        return frame.dropDuplicates(keys)
    ranked = frame.withColumn("_rank", F.row_number().over(Window.partitionBy(*keys).orderBy(*order)))
    return ranked.where(F.col("_rank") == 1).drop("_rank")


def top_quarantine_reasons(rows: DataFrame, limit: int = 3) -> dict[str, int]:
    """The commonest reasons among rejected `rows` (a run's quarantine), with their counts, most first. A
    failed cast's reason names its value (`amount: cannot cast abc to decimal(12,2)`); the value is left out,
    so the rows one cause rejects count together."""
    cause = F.regexp_replace("reason", r"cannot cast .*? to ", "cannot cast to ").alias("cause")
    counts = rows.groupBy(cause).count().orderBy(F.desc("count"), "cause").limit(limit).collect()
    return {row["cause"]: row["count"] for row in counts}
