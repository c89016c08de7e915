"""Silver and gold transformations over Spark DataFrames: SQL, casts to the declared schema, deduplication."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import reduce
from operator import or_

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F
from sqlglot import exp

from medallion_assets.dialects import redshift_semantics
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
    counts: Observation


def counted(frame: DataFrame, where: Column | None = None) -> tuple[DataFrame, Observation]:
    """`frame` with its rows (those `where` holds, if given) counted by the first action on it, and the
    Observation that then holds the count as `rows`: a count without a pass of its own."""
    observation = Observation()
    rows = F.count(F.lit(1)) if where is None else F.count(F.when(where, 1))
    return frame.observe(observation, rows.alias("rows")), observation


def to_spark_sql(sql: str, dialect: str, inputs: Mapping[str, Mapping[str, str]]) -> str:
    """The Spark SQL of a transformation (written for Spark, or for another engine such as Redshift), checked
    again just before it runs to be one query over `inputs` (each input's columns, name → Spark type), and
    generated from the checked syntax tree, with the source dialect's semantics kept (dialects.py)."""
    return redshift_semantics(checked_query(sql, dialect, inputs), dialect, inputs).sql(dialect="spark")


def run_sql(spark: SparkSession, inputs: Mapping[str, DataFrame], sql: str, dialect: str) -> DataFrame:
    """Run SQL in which each input is a table named by its catalog id."""
    schemas = {
        name: {f.name: f.dataType.simpleString() for f in frame.schema.fields}
        for name, frame in inputs.items()
    }
    spark_sql = to_spark_sql(sql, dialect, schemas)
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
    query = checked_query(sql, dialect, inputs)
    if not isinstance(query, exp.Select) or len(list(query.find_all(exp.Table))) != 1:
        return False
    return not any(isinstance(node, _NOT_ROW_BY_ROW) for node in query.walk())


class NotGroupwise(ValueError):
    """A query whose groups cannot be recomputed one by one; the message says why."""


def group_columns(sql: str, dialect: str, input_id: str, input_columns: Collection[str]) -> dict[str, str]:
    """Of an aggregation over one input (`SELECT …, agg(…) FROM input [WHERE …] GROUP BY … [HAVING …]`)
    whose GROUP BY keys are plain columns of the input, each projected as an output column: output column →
    the input column it is. A group's output rows then come from that group's input rows alone, so the
    groups a change touches can be recomputed from their rows and the other groups kept.

    Raises NotGroupwise, saying why, for anything else: no GROUP BY, ROLLUP/CUBE/GROUPING SETS, a key that is
    an expression or not an output column, a join, window, subquery, CTE, LIMIT, DISTINCT row, set operation,
    or a function whose value changes from run to run (`current_date`, `rand`)."""
    query = checked_query(sql, dialect, [input_id])
    if not isinstance(query, exp.Select) or len(list(query.find_all(exp.Table))) != 1:
        raise NotGroupwise("its SQL is not one SELECT over its input alone")
    group = query.args.get("group")
    if group is None or not group.expressions:
        raise NotGroupwise("its SQL has no GROUP BY")
    if query.args.get("distinct"):
        raise NotGroupwise("its SQL selects DISTINCT rows across groups")
    for node in query.walk():
        if isinstance(node, _ACROSS_GROUPS):
            raise NotGroupwise(f"its SQL holds {node.key.upper()}, which reads across groups")
        if isinstance(node, _VOLATILE):
            raise NotGroupwise(f"its SQL calls {node.sql(dialect)}, whose value changes from run to run")
    columns = {name.lower() for name in input_columns}
    outputs = {projection.alias_or_name.lower(): projection.unalias() for projection in query.selects}
    keys: dict[str, str] = {}
    for key in group.expressions:
        resolved = _resolved_key(key, query.selects, columns, outputs)
        if not isinstance(resolved, exp.Column) or resolved.name.lower() not in columns:
            raise NotGroupwise(f"its GROUP BY key {resolved.sql(dialect)} is not a plain column of its input")
        column = resolved.name.lower()
        output = next(
            (
                projection.alias_or_name
                for projection in query.selects
                if isinstance(projection.unalias(), exp.Column)
                and projection.unalias().name.lower() == column
            ),
            None,
        )
        if output is None:
            raise NotGroupwise(f"its GROUP BY key {column} is not an output column")
        keys[output] = column
    return keys


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
    # helper columns' names hold a space, which no declared column's name (an identifier) can.
    typed = {name: f"typed {name}" for name in columns}
    fails = {name: F.col(name).isNotNull() & F.col(typed[name]).isNull() for name in columns}
    try:
        checked = frame.withColumns(
            {typed[name]: F.col(name).try_cast(type_name) for name, type_name in columns.items()}
        ).withColumn("rejected row", reduce(or_, fails.values(), F.lit(False)))  # never null
    except AnalysisException as error:  # a declared column the SQL does not produce
        raise not_analyzable(error, "the casts to its declared columns") from error
    is_rejected = F.col("rejected row")
    # One observation for both counts: each costs a pass over the rows outside Spark's generated code.
    counts = Observation()
    observed = checked.observe(
        counts, F.count(F.when(is_rejected, 1)).alias("rows"), F.count(F.lit(1)).alias("rows in")
    )
    lineage = [c for c in INGESTION_COLUMNS if c in frame.columns]
    valid = observed.where(~is_rejected).select(
        *[F.col(typed[name]).alias(name) for name in columns], *lineage
    )
    # Only rejected rows have their reason spelled out.
    reason = F.concat_ws(
        "; ",
        *[
            F.when(
                fails[name],
                F.concat(
                    F.lit(f"{name}: cannot cast "), F.col(name).cast("string"), F.lit(f" to {type_name}")
                ),
            )
            for name, type_name in columns.items()
        ],
    )
    rejected = checked.where(is_rejected).select(
        *lineage, reason.alias("reason"), F.to_json(F.struct(*frame.columns)).alias("raw")
    )
    return Conformed(valid, rejected, counts)


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
