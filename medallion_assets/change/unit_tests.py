"""Running `stage_tests` rows (`medallion test`, `medallion plan --test`), as dbt runs its unit tests: each
input's rows become a DataFrame with the input's declared types, the stage's own transformation (`shape`: its
SQL, the casts to its target's columns, deduplication, drop and quarantine rules) runs over them, and what it
makes is compared with what the test expects. No lake table, warehouse or catalog row is read or written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from medallion_assets.catalog.loader import declared_columns
from medallion_assets.catalog.models import Rule, Stage, StageTest
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.engine.stage.context import stage_rules
from medallion_assets.engine.stage.shape import shape
from medallion_assets.errors import SqlNotAnalyzable
from medallion_assets.naming import INGESTION_COLUMNS

# A row as compared: its values as Spark spells them in text, by column; None is a null.
Values = dict[str, str | None]


@dataclass(frozen=True)
class UnitTestRun:
    """What a stage's transformation asks of its run (`shape.Shaping`) in a unit test: Spark and rules."""

    spark: SparkSession
    snapshot: CatalogSnapshot

    def rules(self, stage: Stage) -> list[Rule]:
        return stage_rules(self.snapshot, stage)


@dataclass
class TestResult:
    """One test's outcome: rows it expected that the stage did not make (`missing`), rows the stage made that
    it did not expect (`extra`), a pair of each by the target's keys when both have the row's key
    (`changed`: expected, actual), the same of quarantine reasons, or the error that stopped the stage."""

    test: StageTest
    missing: list[Values] = field(default_factory=list)
    extra: list[Values] = field(default_factory=list)
    changed: list[tuple[Values, Values]] = field(default_factory=list)
    reasons_missing: list[str] = field(default_factory=list)
    reasons_extra: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.test.pipeline_id}.{self.test.stage_name}.{self.test.test_name}"

    @property
    def passed(self) -> bool:
        differences = (self.missing, self.extra, self.changed, self.reasons_missing, self.reasons_extra)
        return self.error is None and not any(differences)

    def lines(self) -> list[str]:
        """The outcome as text: a line for the test, then one per difference."""
        if self.passed:
            return [f"PASS {self.name}"]
        lines = [f"FAIL {self.name}"]
        if self.error is not None:
            return [*lines, f"  error: {self.error}"]
        for expected, actual in self.changed:
            differ = [column for column in expected if expected[column] != actual[column]]
            lines.append(
                f"  row {_shown(expected, [c for c in expected if c not in differ])}: "
                + ", ".join(f"{c} expected {expected[c]!r}, got {actual[c]!r}" for c in differ)
            )
        lines += [f"  missing row: {_shown(row)}" for row in self.missing]
        lines += [f"  extra row:   {_shown(row)}" for row in self.extra]
        lines += [f"  missing quarantine reason: {reason!r}" for reason in self.reasons_missing]
        lines += [f"  extra quarantine reason:   {reason!r}" for reason in self.reasons_extra]
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline_id": self.test.pipeline_id,
            "stage_name": self.test.stage_name,
            "test_name": self.test.test_name,
            "passed": self.passed,
            "missing": self.missing,
            "extra": self.extra,
            "changed": [{"expected": expected, "actual": actual} for expected, actual in self.changed],
            "quarantine_reasons_missing": self.reasons_missing,
            "quarantine_reasons_extra": self.reasons_extra,
            "error": self.error,
        }


def _shown(row: Values, columns: Iterable[str] | None = None) -> str:
    return "{" + ", ".join(f"{c}: {row[c]!r}" for c in (row if columns is None else columns)) + "}"


def run_tests(spark: SparkSession, snapshot: CatalogSnapshot, tests: Sequence[StageTest]) -> list[TestResult]:
    """Run each test in `snapshot` (whose checks it passed, catalog/stage_tests.py) on `spark`."""
    run = UnitTestRun(spark, snapshot)
    return [_run_test(run, test) for test in tests]


def _run_test(run: UnitTestRun, test: StageTest) -> TestResult:
    snapshot = run.snapshot
    stage = next(s for s in snapshot.stages(test.pipeline_id) if s.stage_name == test.stage_name)
    target = snapshot.targets[stage.target_id]
    inputs = {
        input_id: _frame(run.spark, rows, declared_columns(snapshot, input_id))
        for input_id, rows in test.given.items()
        if isinstance(rows, list)  # a loaded test holds its CSV files' rows
    }
    result = TestResult(test)
    try:
        shaped = shape(run, stage, target, inputs)
        if isinstance(test.expect_rows, list):
            made = shaped.frame.drop(*INGESTION_COLUMNS)
            columns = list(dict.fromkeys(c for row in test.expect_rows for c in row)) or made.columns
            expected = _frame(run.spark, test.expect_rows, {c: _type_of(made, c) for c in columns})
            _compare(result, _values(expected, columns), _values(made, columns), target.keys)
        if test.expect_quarantined is not None:
            reasons = [
                row["reason"] for frame, _ in shaped.rejects for row in frame.select("reason").collect()
            ]
            result.reasons_missing = list((Counter(test.expect_quarantined) - Counter(reasons)).elements())
            result.reasons_extra = list((Counter(reasons) - Counter(test.expect_quarantined)).elements())
    except (PySparkException, SqlNotAnalyzable) as error:
        result.error = str(error).splitlines()[0]
    return result


def _frame(spark: SparkSession, rows: list[dict[str, Any]], columns: Mapping[str, str] | None) -> DataFrame:
    """`rows` as a DataFrame of `columns` (name → Spark type; None: the columns the rows name, as text): each
    value is cast from its text as a run casts raw values, and a column no row names is null."""
    types = dict(columns) if columns is not None else dict.fromkeys((c for r in rows for c in r), "string")
    text = StructType([StructField(name, StringType()) for name in types])
    frame = spark.createDataFrame([tuple(_text(row.get(name)) for name in types) for row in rows], text)
    return frame.select(*[F.col(name).cast(kind).alias(name) for name, kind in types.items()])


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return str(value).lower() if isinstance(value, bool) else str(value)


def _type_of(frame: DataFrame, column: str) -> str:
    """The type the stage made `column` (text for one it did not make: the comparison then says so)."""
    found = [f.dataType.simpleString() for f in frame.schema.fields if f.name == column]
    return found[0] if found else "string"


def _values(frame: DataFrame, columns: list[str]) -> list[Values]:
    present = [F.col(c) if c in frame.columns else F.lit(None) for c in columns]
    return [
        row.asDict()
        for row in frame.select(*[v.cast("string").alias(c) for v, c in zip(present, columns)]).collect()
    ]


def _compare(result: TestResult, expected: list[Values], made: list[Values], keys: list[str]) -> None:
    """Rows expected and made, as multisets; a missing and an extra row of one key are a changed row."""

    def counted(rows: list[Values]) -> Counter[tuple[tuple[str, str | None], ...]]:
        return Counter(tuple(row.items()) for row in rows)

    missing = [dict(row) for row in (counted(expected) - counted(made)).elements()]
    extra = [dict(row) for row in (counted(made) - counted(expected)).elements()]
    keyed = bool(keys) and all(key in row for key in keys for row in [*missing, *extra])
    by_key = {tuple(row[k] for k in keys): row for row in extra} if keyed else {}
    for row in missing:
        actual = by_key.pop(tuple(row[k] for k in keys), None) if keyed else None
        if actual is None:
            result.missing.append(row)
        else:
            result.changed.append((row, actual))
    result.extra = [row for row in extra if not keyed or tuple(row[k] for k in keys) in by_key]
