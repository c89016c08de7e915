"""Benchmark: a `regex` validation rule evaluated by RE2 (linear time) against Spark's own `rlike` (Java's
backtracking engine), on the same generated emails.

Baseline: the aggregation `evaluate_rules` builds for a regex rule, written by hand with `rlike`. Measured:
`evaluate_rules` with the rule, whose matching runs RE2 in an Arrow UDF. Both read the same cached DataFrame;
each runs `--repeats` times, alternating, after an untimed warm-up. Prints the medians and the ratio.

    python bench/regex_rules.py --rows 1000000
"""

from __future__ import annotations

import argparse
import statistics
import time

from pyspark.sql import functions as F

from medallion_assets.catalog.models import Rule
from medallion_assets.engine.spark import spark_session
from medallion_assets.engine.validation import evaluate_rules

EMAIL = r"^[^@\s]+@[^@\s]+\.[a-z]+$"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    spark = spark_session({"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    emails = (
        spark.range(arguments.rows)
        .select(
            F.when(F.col("id") % 100 == 0, F.concat(F.lit("broken "), F.col("id").cast("string")))
            .otherwise(F.concat(F.lit("user"), F.col("id").cast("string"), F.lit("@example.com")))
            .alias("email")
        )
        .cache()
    )
    emails.count()
    rule = Rule(type="regex", column="email", pattern=EMAIL)

    def java() -> int:
        breaks = F.col("email").isNotNull() & ~F.col("email").rlike(EMAIL)
        return emails.agg(F.sum(F.when(breaks, 1).otherwise(0))).collect()[0][0]

    def re2() -> int:
        return evaluate_rules(emails, [rule])[0].failing_rows

    assert java() == re2() == arguments.rows // 100
    times: dict[str, list[float]] = {"rlike": [], "re2": []}
    for _ in range(arguments.repeats):
        for name, run in (("rlike", java), ("re2", re2)):
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    rlike, re2_time = statistics.median(times["rlike"]), statistics.median(times["re2"])
    print(
        f"{arguments.rows:,} rows, medians of {arguments.repeats}: rlike {rlike:.2f} s, "
        f"RE2 {re2_time:.2f} s, RE2 / rlike {re2_time / rlike:.1f}×"
    )


if __name__ == "__main__":
    main()
