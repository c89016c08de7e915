"""The validation engine: evaluates catalog rules over a Spark DataFrame and says, in words, what it found.

Native rules become aggregate expressions that run together in a single `df.agg`, so a dataset is scanned
once however many rules it has; `observe_rules` attaches the same expressions to the write instead, so most
rules cost no scan at all (unique too, when the rows were just deduplicated on its columns). schema_match
reads only the schema, and great_expectations rules run afterwards through Great Expectations' Spark
datasource, which computes its own metrics (expectations.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce
from operator import and_, or_
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import arrow_udf
from pyspark.sql.types import BooleanType, StructType

from medallion_assets.catalog.models import HISTORY_RULE_TYPES, Rule, ValidityColumns
from medallion_assets.engine.expectations import expectations_of, run_expectations
from medallion_assets.engine.observed import Observed
from medallion_assets.patterns import compiled

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Spark's simpleString spells a 64-bit integer "bigint"; catalogs written by hand often say "long".
TYPE_SYNONYMS = {"long": "bigint"}


@dataclass(frozen=True)
class RuleOutcome:
    """What one rule found: whether it passed, the values it observed and a sentence for people."""

    rule: Rule
    passed: bool
    observed: dict[str, Any]
    failing_rows: int
    message: str
    carried: bool = False  # kept from the run that judged this version of the table, not judged in this one

    def verdict(self) -> dict[str, Any]:
        """This outcome as the ledger keeps it (JSON), with the rule as it was when judged."""
        return {
            "rule": self.rule.model_dump(mode="json"),
            "passed": self.passed,
            "observed": json.loads(json.dumps(self.observed, default=str)),
            "failing_rows": self.failing_rows,
            "message": self.message,
        }

    @classmethod
    def of_verdict(cls, rule: Rule, verdict: dict[str, Any]) -> RuleOutcome | None:
        """The outcome a kept `verdict` records, when it judged `rule` as the rule is now (None: it judged
        another rule, or an earlier form of it, so it says nothing of `rule`)."""
        if verdict["rule"] != rule.model_dump(mode="json"):
            return None
        return cls(
            rule, verdict["passed"], verdict["observed"], verdict["failing_rows"], verdict["message"], True
        )


def judges_per_key(rule: Rule, keys: list[str]) -> bool:
    """Whether the rule's verdict on a table is the sum of its verdicts on each key's rows: a type 2
    history's checks and a unique rule, over columns that hold every key column."""
    columns = set(rule.columns or ([rule.column] if rule.column else []))
    return bool(keys) and rule.type in {"unique", *HISTORY_RULE_TYPES} and set(keys) <= columns


def row_violation(rule: Rule) -> Column | None:
    """A boolean Column, true exactly where a row breaks a row-level rule; None for dataset-level rules.

    Nulls break only not_null: the other rules leave them to a not_null rule, as Great Expectations does.
    The Column is never null, so `df.filter(~violation)` keeps every row that does not break the rule.
    """
    if rule.type not in ("not_null", "accepted_values", "range", "regex"):
        return None
    column = F.col(_column_of(rule))
    if rule.type == "not_null":
        return column.isNull()
    if rule.type == "accepted_values":
        breaks = ~column.isin(rule.values)
    elif rule.type == "regex":
        assert rule.pattern is not None, "Rule requires the pattern of a regex rule"
        breaks = ~_found_by_re2(rule.pattern)(column.cast("string"))
    else:
        bounds = [column < rule.min] if rule.min is not None else []
        bounds += [column > rule.max] if rule.max is not None else []
        breaks = reduce(or_, bounds, F.lit(False))
    return column.isNotNull() & breaks


def _column_of(rule: Rule) -> str:
    """The column of a rule whose type names one: Rule's own validation requires it."""
    assert rule.column is not None, f"rule {rule.name} of type {rule.type} names no column"
    return rule.column


def _found_by_re2(pattern: str) -> Callable[[Column], Column]:
    """A UDF: whether RE2 finds `pattern` in each value, in time linear in the value. Spark's own `rlike` runs
    Java's backtracking engine, where a catalog pattern such as `(a+)+$` takes time exponential in the value.
    """

    compiled(pattern)  # refused here, with the reason, rather than inside a task

    # An Arrow UDF, not a pandas one: the batch stays in Arrow both ways, and no process imports pandas.
    # pyspark's stubs type only the arrow_udf forms that take a `functionType`, not this type-hinted one.
    @arrow_udf(BooleanType())  # type: ignore[call-overload, untyped-decorator]
    def found(values: pa.Array) -> pa.Array:
        # Arrow's match_substring_regex is RE2 (what `compiled` checked the pattern with), over a whole batch,
        # as Spark sends it: a cast of the strings would copy every value once more.
        return pc.match_substring_regex(values, pattern).fill_null(False)

    return cast(Callable[[Column], Column], found)


def evaluate_rules(df: DataFrame, rules: Sequence[Rule], now: datetime | None = None) -> list[RuleOutcome]:
    """Evaluate `rules` over `df` and return one outcome per rule, in the rules' order.

    All native rules and the rules on a type 2 history share one aggregation, a single Spark job (with a
    window over each key's versions for the latter); schema_match reads only the schema;
    great_expectations rules run afterwards. `now` is the reference time of freshness rules (default: the
    current time; a naive datetime is local time, as `datetime.timestamp` takes it). A rule naming a column
    that `df` lacks fails with a message naming the column. A great_expectations rule's `column`, if any, is
    the expectation's `column` argument. Raises ValueError when a great_expectations rule names an unknown
    expectation or gives it invalid arguments, before any data is read.
    """
    return _evaluate(df, rules, now, count_rows=False)[0]


def evaluate_rules_and_count(df: DataFrame, rules: Sequence[Rule]) -> tuple[list[RuleOutcome], int]:
    """evaluate_rules, and the rows of `df`, counted by the rules' own aggregation instead of a job of its
    own."""
    outcomes, rows = _evaluate(df, rules, None, count_rows=True)
    assert rows is not None, "the aggregation counts the rows when asked to"
    return outcomes, rows


def _evaluate(
    df: DataFrame, rules: Sequence[Rule], now: datetime | None, count_rows: bool
) -> tuple[list[RuleOutcome], int | None]:
    now = now or datetime.now(UTC)
    expectations = expectations_of(rules)
    outcomes, runnable = _screen(df, rules)
    expectations = {index: expectation for index, expectation in expectations.items() if index in runnable}
    histories = {index: rule for index, rule in runnable.items() if rule.type in HISTORY_RULE_TYPES}
    native = {
        index: rule
        for index, rule in runnable.items()
        if index not in expectations and index not in histories
    }
    rows = None
    if native or histories or count_rows:
        # The history rules' breaking rows are marked by windows over each key's versions, and counted by
        # the same aggregation as the native rules: one job for them all.
        marked = df.select("*", *[_breaking(rule).alias(_breaks(index)) for index, rule in histories.items()])
        breaking = [
            F.sum(F.col(f"`{_breaks(index)}`").cast("long")).alias(_breaks(index)) for index in histories
        ]
        values = marked.agg(*_aggregates(native), *breaking).collect()[0].asDict()
        outcomes.update(_judge({**native, **histories}, values, now))
        rows = int(values["row_count"])
    if expectations:
        verdicts = run_expectations(df, rules, expectations)
        outcomes.update(
            {
                i: RuleOutcome(rules[i], passed, observed, 0, said)
                for i, (passed, observed, said) in verdicts.items()
            }
        )
    return [outcomes[index] for index in range(len(rules))], rows


def observe_rules(
    df: DataFrame, rules: Sequence[Rule], now: datetime | None = None, unique_on: Sequence[str] = ()
) -> tuple[DataFrame, Callable[[DataFrame], list[RuleOutcome]], Callable[[], int]]:
    """Evaluate rules during another action on `df`, typically its write, instead of in a scan of their own.

    Returns `df` with a Spark observation attached, `finish(written)`, to call once the first action on that
    DataFrame has succeeded (the observation blocks until then), and `rows()`, the rows that action saw,
    counted by the same observation (each observation costs a pass outside Spark's generated code). The
    action computes every native rule
    except unique, whose distinct count Spark cannot observe; `finish` judges them, evaluates unique and
    great_expectations rules over `written` (e.g. the files just written, read back) with `evaluate_rules`,
    and returns one outcome per rule in the rules' order. `written` is read only when such a rule is left.
    Observed rules see the rows at the point of `df` in the plan: attach the observation before a filter to
    count the rows it drops, after it to judge the rows that are kept.

    `unique_on` names columns `df` is known to hold no two rows alike on, nulls included (the keys it was just
    deduplicated on): a unique rule on those columns, or on more, holds by construction, so it is judged from
    the observed counts instead of a distinct count over `written`.
    """
    now = now or datetime.now(UTC)
    expectations_of(rules)  # an unknown expectation is an error now, not after the write
    outcomes, runnable = _screen(df, rules)
    observable = {index: rule for index, rule in runnable.items() if not reads_written_data(rule, unique_on)}
    known_unique = {index for index, rule in observable.items() if rule.type == "unique"}
    observed = Observed(df, *_aggregates(observable, known_unique))

    def finish(written: DataFrame) -> list[RuleOutcome]:
        result = dict(outcomes)
        if observable:
            result.update(_judge(observable, observed.result, now))
        rest = [index for index in runnable if index not in observable]
        if rest:
            result.update(zip(rest, evaluate_rules(written, [rules[index] for index in rest], now)))
        return [result[index] for index in range(len(rules))]

    return observed.frame, finish, lambda: int(observed.result["row_count"])


def reads_written_data(rule: Rule, unique_on: Sequence[str] = ()) -> bool:
    """Whether `observe_rules(..., unique_on)` evaluates `rule` over the written data, not observing it."""
    if rule.type == "unique":
        return not (unique_on and set(unique_on) <= set(rule.subject_columns()))
    return rule.type == "great_expectations" or rule.type in HISTORY_RULE_TYPES


def _screen(df: DataFrame, rules: Sequence[Rule]) -> tuple[dict[int, RuleOutcome], dict[int, Rule]]:
    """Outcomes known from the schema alone (missing columns, schema_match), and rules that need the data."""
    outcomes: dict[int, RuleOutcome] = {}
    runnable: dict[int, Rule] = {}
    for index, rule in enumerate(rules):
        missing = [name for name in _referenced_columns(rule) if name not in df.columns]
        if missing:
            outcomes[index] = _missing_columns(rule, missing, df.columns)
        elif rule.type == "schema_match":
            outcomes[index] = _schema_match(rule, df.schema)
        else:
            runnable[index] = rule
    return outcomes, runnable


def _aggregates(rules: dict[int, Rule], known_unique: AbstractSet[int] = frozenset()) -> list[Column]:
    """One list of aggregate expressions for all the rules, each named `index:key` so `_judge` can split them.

    A unique rule in `known_unique` holds by construction: its keyed rows are all distinct, so it needs no
    distinct count (which would make Spark group every other aggregate by the rule's columns).
    """
    aggregates = [F.count(F.lit(1)).alias("row_count")]
    for index, rule in rules.items():
        own = _keyed_rows(rule) if index in known_unique else _AGGREGATES[rule.type](rule)
        aggregates += [value.alias(f"{index}:{key}") for key, value in own.items()]
    return aggregates


def _judge(rules: dict[int, Rule], values: dict[str, Any], now: datetime) -> dict[int, RuleOutcome]:
    own: dict[int, dict[str, Any]] = {index: {} for index in rules}
    for name, value in values.items():
        if name != "row_count":
            index, key = name.split(":", 1)
            own[int(index)][key] = value
    return {
        index: _JUDGES[rule.type](rule, own[index], values["row_count"], now) for index, rule in rules.items()
    }


def _referenced_columns(rule: Rule) -> list[str]:
    columns = rule.subject_columns()
    if rule.type == "great_expectations" and "column" in rule.kwargs:
        columns.append(rule.kwargs["column"])
    if rule.type in HISTORY_RULE_TYPES:
        names = _validity(rule)
        columns += [names.valid_from, names.valid_to, names.is_current]
    return columns


def _validity(rule: Rule) -> ValidityColumns:
    return ValidityColumns(**rule.kwargs)


def _breaks(index: int) -> str:
    """The name of the rule's count of breaking rows, as `_judge` splits it: `index:key`."""
    return f"{index}:breaks"


def _breaking(rule: Rule) -> Column:
    """Whether a row breaks a rule on a type 2 history, among the versions of its key.

    Both rules see the versions in the same window, ordered by valid_from: Spark computes windows of one
    partitioning and order in one operator, so a table's versions are sorted once for both."""
    keys, names = [F.col(f"`{c}`") for c in rule.subject_columns()], _validity(rule)
    valid_from, valid_to = F.col(f"`{names.valid_from}`"), F.col(f"`{names.valid_to}`")
    versions = Window.partitionBy(*keys).orderBy(valid_from)
    if rule.type == "scd2_one_current":
        current = F.col(f"`{names.is_current}`")
        every_version = versions.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
        return current & (F.sum(current.cast("int")).over(every_version) > 1)
    following = F.lead(valid_from).over(versions)
    return following.isNotNull() & (valid_to.isNull() | (following < valid_to))


def _judge_history(rule: Rule, values: dict[str, Any], rows: int, now: datetime) -> RuleOutcome:
    failing = int(values["breaks"] or 0)
    if rule.type == "scd2_one_current":
        what = "are current versions of a key with more than one"
    else:
        what = "overlap the validity interval of the key's next version"
    message = f"{rule.name}: {failing} rows {what}" if failing else f"{rule.name}: holds"
    return RuleOutcome(rule, failing == 0, {"failing_rows": failing}, failing, message)


def _missing_columns(rule: Rule, missing: list[str], present: list[str]) -> RuleOutcome:
    noun = "column" if len(missing) == 1 else "columns"
    return RuleOutcome(
        rule,
        False,
        {"missing_columns": missing},
        0,
        f"{rule.name}: {noun} {', '.join(missing)} not found; "
        f"the data has {', '.join(present) or 'no columns'}",
    )


def _schema_match(rule: Rule, schema: StructType) -> RuleOutcome:
    """Missing columns and other types fail; extra columns (e.g. ingestion columns) are only reported."""
    actual = {field.name: field.dataType.simpleString() for field in schema.fields}
    assert rule.expected is not None, "Rule requires the expected columns of a schema_match rule"
    expected = {name: _type_name(type_name) for name, type_name in rule.expected.items()}
    missing = [name for name in expected if name not in actual]
    mismatched = {
        name: actual[name]
        for name, type_name in expected.items()
        if name in actual and actual[name] != type_name
    }
    extra = [name for name in actual if name not in expected]
    problems = [f"{name} is missing" for name in missing]
    problems += [
        f"{name} is {type_name}, expected {expected[name]}" for name, type_name in mismatched.items()
    ]
    plural = "s" if len(expected) != 1 else ""
    message = (
        "; ".join(problems) or f"{len(expected)} expected column{plural} present with the expected types"
    )
    observed = {"missing": missing, "mismatched": mismatched, "extra": extra}
    return RuleOutcome(rule, not problems, observed, 0, f"{rule.name}: {message}")


def _type_name(type_name: str) -> str:
    name = type_name.replace(" ", "").lower()
    return TYPE_SYNONYMS.get(name, name)


def _count_violations(rule: Rule) -> Column:
    violation = row_violation(rule)
    assert violation is not None, f"rule {rule.name} of type {rule.type} is not row-level"
    return F.count(F.when(violation, 1))


def _keyed_rows(rule: Rule) -> dict[str, Column]:
    # count(DISTINCT a, b) skips rows where any key is null, so nulls are compared with non-null keys only.
    columns = [F.col(name) for name in rule.subject_columns()]
    return {"keyed_rows": F.count(F.when(reduce(and_, [column.isNotNull() for column in columns]), 1))}


def _unique_aggregates(rule: Rule) -> dict[str, Column]:
    return {**_keyed_rows(rule), "distinct_count": F.count_distinct(*map(F.col, rule.subject_columns()))}


def _freshness_aggregates(rule: Rule) -> dict[str, Column]:
    # Epoch microseconds are absolute, so the age does not depend on the session or Python time zone.
    return {"newest_micros": F.max(F.unix_micros(F.col(_column_of(rule)).cast("timestamp")))}


_AGGREGATES: dict[str, Callable[[Rule], dict[str, Column]]] = {
    "row_count": lambda rule: {},
    "not_null": lambda rule: {"null_count": _count_violations(rule)},
    "accepted_values": lambda rule: {"unexpected_count": _count_violations(rule)},
    "regex": lambda rule: {"unexpected_count": _count_violations(rule)},
    "range": lambda rule: {
        "unexpected_count": _count_violations(rule),
        "min": F.min(F.col(_column_of(rule))).cast("double"),
        "max": F.max(F.col(_column_of(rule))).cast("double"),
    },
    "unique": _unique_aggregates,
    "freshness": _freshness_aggregates,
}


def _judge_row_count(rule: Rule, values: dict[str, Any], rows: int, now: datetime) -> RuleOutcome:
    passed = (rule.min is None or rows >= rule.min) and (rule.max is None or rows <= rule.max)
    if rule.min is not None and rule.max is not None:
        expected = f"between {rule.min:g} and {rule.max:g}"
    elif rule.min is not None:
        expected = f"at least {rule.min:g}"
    elif rule.max is not None:
        expected = f"at most {rule.max:g}"
    else:
        expected = "any number"
    return RuleOutcome(rule, passed, {"row_count": rows}, 0, f"{rule.name}: {rows} rows, expected {expected}")


def _judge_row_level(rule: Rule, values: dict[str, Any], rows: int, now: datetime) -> RuleOutcome:
    failing = values["null_count"] if rule.type == "not_null" else values["unexpected_count"]
    if rule.type == "not_null":
        breach = "null"
    elif rule.type == "accepted_values":
        breach = f"not in {rule.values!r}"
    elif rule.type == "regex":
        breach = f"not matching '{rule.pattern}'"
    else:
        breach = _range_breach(rule)
        if values["min"] is not None:
            breach += f" (observed {values['min']:g} to {values['max']:g})"
    message = f"{rule.name}: {failing} of {rows} rows have {rule.column} {breach}"
    return RuleOutcome(rule, failing == 0, {**values, "row_count": rows}, failing, message)


def _range_breach(rule: Rule) -> str:
    if rule.min is not None and rule.max is not None:
        return f"outside [{rule.min:g}, {rule.max:g}]"
    if rule.min is not None:
        return f"below {rule.min:g}"
    if rule.max is not None:
        return f"above {rule.max:g}"
    return "outside an unbounded range"


def _judge_unique(rule: Rule, values: dict[str, Any], rows: int, now: datetime) -> RuleOutcome:
    # No distinct count was taken when the rows are unique by construction: every keyed row is distinct.
    distinct = values.get("distinct_count", values["keyed_rows"])
    duplicates = values["keyed_rows"] - distinct
    key = rule.column or f"({', '.join(rule.subject_columns())})"
    observed = {"duplicate_count": duplicates, "distinct_count": distinct, "row_count": rows}
    message = f"{rule.name}: {duplicates} of {rows} rows repeat a value of {key}"
    return RuleOutcome(rule, duplicates == 0, observed, 0, message)


def _judge_freshness(rule: Rule, values: dict[str, Any], rows: int, now: datetime) -> RuleOutcome:
    assert rule.max_age_hours is not None, "Rule requires the max_age_hours of a freshness rule"
    if values["newest_micros"] is None:
        message = (
            f"{rule.name}: {rule.column} has no values, expected one at most {rule.max_age_hours:g} hours old"
        )
        return RuleOutcome(rule, False, {"newest": None, "age_hours": None}, 0, message)
    newest = EPOCH + timedelta(microseconds=values["newest_micros"])
    age_hours = (now.timestamp() - newest.timestamp()) / 3600
    message = (
        f"{rule.name}: newest {rule.column} is {newest.isoformat()}, {age_hours:.1f} hours old, "
        f"expected at most {rule.max_age_hours:g}"
    )
    observed = {"newest": newest.isoformat(), "age_hours": age_hours}
    return RuleOutcome(rule, age_hours <= rule.max_age_hours, observed, 0, message)


_JUDGES: dict[str, Callable[[Rule, dict[str, Any], int, datetime], RuleOutcome]] = {
    "row_count": _judge_row_count,
    "not_null": _judge_row_level,
    "accepted_values": _judge_row_level,
    "regex": _judge_row_level,
    "range": _judge_row_level,
    "unique": _judge_unique,
    "freshness": _judge_freshness,
    **{history: _judge_history for history in HISTORY_RULE_TYPES},
}
