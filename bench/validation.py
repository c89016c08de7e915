"""Benchmark: the cost of validation on a silver transform, and Medallion's rules against Great Expectations.

(a)   a silver transform alone: casts, dropDuplicates on the key, parquet write;
(b')  the same transform with the 10 rules attached to the write by `observe_rules`, as the silver stage does:
      every rule is computed while the rows are written, unique too, since the transform has just deduplicated
      on its column (`unique_on`), so nothing is read back;
rules `evaluate_rules` alone on (a)'s parquet, read back: the 10 rules in one aggregation, unique as an exact
      distinct count (what validating a written dataset after the fact costs: (a) + rules is the "transform,
      then checks" alternative to (b'));
GE    Great Expectations 1.x running the same 10 expectations as one suite, one batch, one validation, on the
      same parquet, with its Spark datasource's defaults (it persists the batch: that cost is inside its time)
      and the default result format (SUMMARY: counts and a sample of unexpected values, like our outcomes);
GE-b  the same with result_format BOOLEAN_ONLY, Great Expectations' cheapest setting (no counts at all).

Every step runs in Medallion's own session (`spark_session`: its shuffle partitions, Python workers over
Unix sockets). Nothing is cached across steps: each computes from the generated data or the written files.
(a) and (b') run in alternating order. Prints medians of `--repeats` runs, (b')/(a) (goal <= 1.15), and
Great Expectations' time against ours (goal >= 5): against what the observed rules add to the write,
(b') - (a), and against the rules alone on the written parquet (both then read the same files; only GE's is
a fair like-for-like without the dedupe's knowledge). (a) and (b') also print the CPU of Spark's processes
(the JVM and its Python workers), which a machine shared with other work stretches far less than wall time.

    python bench/validation.py --rows 2000000
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial

import great_expectations as gx
import psutil
from great_expectations.data_context.types.base import ProgressBarsConfig
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from medallion_assets.catalog.models import Rule
from medallion_assets.engine.spark import spark_session
from medallion_assets.engine.validation import evaluate_rules, observe_rules

SILVER_TYPES = {
    "event_id": "bigint",
    "user_id": "bigint",
    "status": "string",
    "amount": "decimal(12,2)",
    "age": "int",
    "email": "string",
    "event_ts": "timestamp",
}
STATUSES = ["active", "inactive", "pending"]
EMAIL = r"^[^@\s]+@[^@\s]+\.[a-z]+$"

RULES = [
    Rule(type="row_count", min=1),
    Rule(type="not_null", column="event_id"),
    Rule(type="not_null", column="user_id"),
    Rule(type="not_null", column="event_ts"),
    Rule(type="unique", column="event_id"),
    Rule(type="accepted_values", column="status", values=STATUSES),
    Rule(type="range", column="amount", min=0, max=10000),
    Rule(type="range", column="age", min=0, max=120),
    Rule(type="regex", column="email", pattern=EMAIL),
    Rule(type="schema_match", expected=SILVER_TYPES),
]


def expectations() -> list:
    """The 10 rules as Great Expectations 1.x expectations; schema_match becomes a check of the column
    names."""
    E = gx.expectations
    return [
        E.ExpectTableRowCountToBeBetween(min_value=1),
        E.ExpectColumnValuesToNotBeNull(column="event_id"),
        E.ExpectColumnValuesToNotBeNull(column="user_id"),
        E.ExpectColumnValuesToNotBeNull(column="event_ts"),
        E.ExpectColumnValuesToBeUnique(column="event_id"),
        E.ExpectColumnValuesToBeInSet(column="status", value_set=STATUSES),
        E.ExpectColumnValuesToBeBetween(column="amount", min_value=0, max_value=10000),
        E.ExpectColumnValuesToBeBetween(column="age", min_value=0, max_value=120),
        E.ExpectColumnValuesToMatchRegex(column="email", regex=EMAIL),
        E.ExpectTableColumnsToMatchSet(column_set=list(SILVER_TYPES), exact_match=True),
    ]


def bronze(spark: SparkSession, rows: int) -> DataFrame:
    """Bronze-like rows, all strings, with known defects: 1% duplicate keys, nulls, bad statuses, ranges,
    emails."""
    return spark.range(rows).selectExpr(
        f"CAST(id % {rows - rows // 100} AS STRING) AS event_id",
        "IF(id % 1000 = 0, NULL, CAST(id * 7919 % 100000 AS STRING)) AS user_id",
        "IF(id % 50 = 0, 'bogus', array('active', 'inactive', 'pending')[CAST(id % 3 AS INT)]) AS status",
        "CAST(id % 2000500 / 190 AS STRING) AS amount",
        "CAST(id % 125 AS STRING) AS age",
        "IF(id % 97 = 0, concat('user', id), concat('user', id, '@example.com')) AS email",
        "from_unixtime(1700000000 + id) AS event_ts",
    )


def silver(bronze_rows: DataFrame) -> DataFrame:
    """A typical silver transform: cast to the declared types, keep one row per key."""
    typed = bronze_rows.select(
        *(F.col(name).cast(type_name).alias(name) for name, type_name in SILVER_TYPES.items())
    )
    return typed.dropDuplicates(["event_id"])


def timed(action: Callable[..., object], *args: object) -> tuple[float, object]:
    start = time.perf_counter()
    result = action(*args)
    return time.perf_counter() - start, result


def spark_cpu(spark: SparkSession) -> float:
    """CPU seconds (user and system) Spark's processes have used so far: the driver's JVM and its Python
    workers, those that ended included (in their parent's children's time). On a machine shared with other
    work, wall time stretches with the load; this does far less."""
    jvm = psutil.Process(spark._jvm.java.lang.ProcessHandle.current().pid())
    total = 0.0
    for process in [jvm, *jvm.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):  # a worker that ended meanwhile
            total += sum(process.cpu_times()[:4])
    return total


def run_ge(df: DataFrame, result_format: str = "SUMMARY") -> object:
    """The suite in one validation run, with the Spark datasource's defaults (it persists the batch)."""
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (
        context.data_sources.add_spark("bench")
        .add_dataframe_asset("silver")
        .add_batch_definition_whole_dataframe("whole")
        .get_batch(batch_parameters={"dataframe": df})
    )
    result = batch.validate(
        gx.ExpectationSuite(name="silver", expectations=expectations()), result_format=result_format
    )
    df.unpersist()  # so that the next repeat starts cold
    return result


def transform_and_write(spark: SparkSession, rows: int, path: str) -> None:
    silver(bronze(spark, rows)).write.parquet(path)


def transform_write_and_observe(spark: SparkSession, rows: int, path: str) -> list:
    """(b'): the rules observed during the write; the transform deduplicates on event_id, so unique is
    known."""
    observed, finish, _ = observe_rules(silver(bronze(spark, rows)), RULES, unique_on=["event_id"])
    observed.write.parquet(path)
    return finish(read_back(spark, path))


def read_back(spark: SparkSession, path: str) -> DataFrame:
    # The wrapper knows the declared schema, so reading back starts no job to infer it.
    return spark.read.schema(
        ", ".join(f"{name} {type_name}" for name, type_name in SILVER_TYPES.items())
    ).parquet(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    # Medallion's own session, as a silver stage runs in: its shuffle partitions, and regex rules' Python
    # tasks in this interpreter, reached over Unix sockets.
    spark = spark_session({"spark.driver.memory": "4g"}, app_name="medallion-bench")
    figures: dict[str, list[float]] = {"a": [], "b_observe": [], "rules": [], "ge": [], "ge_boolean": []}
    cpu: dict[str, list[float]] = {"a": [], "b_observe": []}
    with tempfile.TemporaryDirectory() as tmp:
        # One small untimed round first, so JVM start-up and code generation are not billed to run 1.
        transform_and_write(spark, 10_000, f"{tmp}/warm")
        transform_write_and_observe(spark, 10_000, f"{tmp}/warm_observe")
        evaluate_rules(read_back(spark, f"{tmp}/warm"), RULES)
        run_ge(read_back(spark, f"{tmp}/warm"))
        for repeat in range(args.repeats):
            steps = [
                ("a", partial(transform_and_write, spark, args.rows, f"{tmp}/a{repeat}")),
                ("b_observe", partial(transform_write_and_observe, spark, args.rows, f"{tmp}/o{repeat}")),
            ]
            results = {}
            for name, step in steps if repeat % 2 == 0 else steps[::-1]:
                before = spark_cpu(spark)
                seconds, results[name] = timed(step)
                figures[name].append(seconds)
                cpu[name].append(spark_cpu(spark) - before)
            written = f"{tmp}/a{repeat}"
            seconds, outcomes = timed(lambda path: evaluate_rules(read_back(spark, path), RULES), written)
            figures["rules"].append(seconds)
            seconds, ge_result = timed(lambda path: run_ge(read_back(spark, path)), written)
            figures["ge"].append(seconds)
            seconds, _ = timed(lambda path: run_ge(read_back(spark, path), "BOOLEAN_ONLY"), written)
            figures["ge_boolean"].append(seconds)
            # Observed during the write or evaluated over the written rows, the outcomes are the same.
            assert [o.message for o in results["b_observe"]] == [o.message for o in outcomes], (
                "both paths must agree"
            )
            print(
                f"run {repeat + 1}: "
                + ", ".join(f"{key} {values[-1]:.2f}s" for key, values in figures.items())
                + f"; CPU a {cpu['a'][-1]:.2f}s, b_observe {cpu['b_observe'][-1]:.2f}s"
            )
    for outcome in outcomes:
        print(f"  {'pass' if outcome.passed else 'FAIL'}  {outcome.message}")
    ge_failed = sorted(result.expectation_config.type for result in ge_result.results if not result.success)
    print(f"  Great Expectations failed: {', '.join(ge_failed)}")
    median = {key: statistics.median(values) for key, values in figures.items()}
    added = statistics.median(o - a for o, a in zip(figures["b_observe"], figures["a"]))
    print(
        f"rows {args.rows:,}, medians of {args.repeats}: "
        + ", ".join(f"{k} {v:.2f}s" for k, v in median.items())
    )
    print(
        f"(b')/(a) = {median['b_observe'] / median['a']:.3f}  (goal <= 1.15); "
        "transform then rules on the written files, ((a) + rules)/(a) = "
        f"{1 + median['rules'] / median['a']:.3f}"
    )
    print(f"what the observed rules add to the write, median of (b') - (a) per run: {added:.2f}s")
    cpu_a, cpu_b = statistics.median(cpu["a"]), statistics.median(cpu["b_observe"])
    print(
        f"CPU of Spark's processes, medians: a {cpu_a:.2f}s, b_observe {cpu_b:.2f}s, "
        f"(b')/(a) {cpu_b / cpu_a:.3f}"
    )
    for key, label in (("ge", "GE"), ("ge_boolean", "GE BOOLEAN_ONLY")):
        versus_added = f"{median[key] / added:.1f}" if added > 0 else "unbounded (no measurable cost)"
        print(
            f"{label} / rules alone = {median[key] / median['rules']:.1f}, "
            f"{label} / what observed rules add = {versus_added}  (goal >= 5)"
        )


if __name__ == "__main__":
    main()
