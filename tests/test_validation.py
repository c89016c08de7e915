"""The validation engine on small DataFrames with known defects, over the test run's local Spark session."""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from medallion_assets.catalog.models import Rule
from medallion_assets.engine.validation import _breaking, evaluate_rules, observe_rules, row_violation

UPDATED = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
NOW = datetime(2024, 5, 2, 6, 0, tzinfo=UTC)  # 18 hours after the newest row
SCHEMA = "user_id bigint, status string, age int, email string, amount decimal(12,2), updated_at timestamp"
# Defects: user_id null twice and repeated twice (3, 7); status "gone"; ages -1 and 130; one email without @.
ROWS = [
    (1, "active", 30, "a@x.com", Decimal("10.00"), UPDATED),
    (2, "active", 40, "b@x.com", Decimal("20.50"), UPDATED),
    (3, "inactive", -1, "c@x.com", Decimal("5.00"), UPDATED),
    (3, "active", 130, "bad-email", Decimal("7.25"), UPDATED),
    (None, "gone", 25, None, Decimal("1.00"), UPDATED),
    (5, None, None, "e@x.com", Decimal("3.00"), UPDATED),
    (6, "active", 50, "f@x.com", Decimal("99.99"), UPDATED),
    (7, "inactive", 60, "g@x.com", Decimal("0.00"), UPDATED),
    (7, "active", 70, "h@x.com", Decimal("12.00"), UPDATED),
    (None, "active", 20, "i@x.com", Decimal("8.00"), datetime(2024, 4, 30, tzinfo=UTC)),
]


@pytest.fixture(scope="module")
def users(spark):
    return spark.createDataFrame(ROWS, SCHEMA)


def one(df, rule: Rule):
    [outcome] = evaluate_rules(df, [rule], now=NOW)
    return outcome


@contextmanager
def jobs_counted(spark):
    """Collects the ids of the Spark jobs run inside the block, with adaptive execution off: it submits
    every shuffle stage as a job of its own, which would hide whether a query was one job."""
    context = spark.sparkContext
    group = f"validation-test-{uuid.uuid4().hex}"
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    context.setJobGroup(group, group)
    jobs: list[int] = []
    try:
        yield jobs
    finally:
        jobs.extend(context.statusTracker().getJobIdsForGroup(group))
        context.setLocalProperty("spark.jobGroup.id", None)
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)


def test_row_count(users):
    outcome = one(users, Rule(type="row_count", min=1, max=5))
    assert (outcome.passed, outcome.observed, outcome.failing_rows) == (False, {"row_count": 10}, 0)
    assert outcome.message == "row_count: 10 rows, expected between 1 and 5"
    assert one(users, Rule(type="row_count", min=10)).message == "row_count: 10 rows, expected at least 10"
    assert one(users, Rule(type="row_count", min=10)).passed


def test_not_null(users):
    outcome = one(users, Rule(type="not_null", column="user_id"))
    assert (outcome.passed, outcome.observed, outcome.failing_rows) == (
        False,
        {"null_count": 2, "row_count": 10},
        2,
    )
    assert outcome.message == "not_null_user_id: 2 of 10 rows have user_id null"
    assert one(users, Rule(type="not_null", column="updated_at")).passed


def test_unique_counts_repeats_among_non_null_keys(users):
    outcome = one(users, Rule(type="unique", column="user_id"))
    assert not outcome.passed
    assert outcome.observed == {"duplicate_count": 2, "distinct_count": 6, "row_count": 10}
    assert outcome.failing_rows == 0
    assert outcome.message == "unique_user_id: 2 of 10 rows repeat a value of user_id"


def test_unique_on_several_columns(users):
    outcome = one(users, Rule(type="unique", columns=["user_id", "status"]))
    assert outcome.passed
    assert outcome.observed == {"duplicate_count": 0, "distinct_count": 7, "row_count": 10}
    assert outcome.message == "unique_user_id_status: 0 of 10 rows repeat a value of (user_id, status)"


def test_accepted_values_leaves_nulls_to_not_null(users):
    outcome = one(users, Rule(type="accepted_values", column="status", values=["active", "inactive"]))
    assert (outcome.passed, outcome.failing_rows) == (False, 1)
    assert outcome.observed == {"unexpected_count": 1, "row_count": 10}
    assert outcome.message == "accepted_values_status: 1 of 10 rows have status not in ['active', 'inactive']"


def test_range(users):
    outcome = one(users, Rule(type="range", column="age", min=0, max=120, severity="warn"))
    assert (outcome.passed, outcome.failing_rows) == (False, 2)
    assert outcome.observed == {"unexpected_count": 2, "min": -1.0, "max": 130.0, "row_count": 10}
    assert outcome.message == "range_age: 2 of 10 rows have age outside [0, 120] (observed -1 to 130)"
    below = one(users, Rule(type="range", column="amount", min=1))
    assert below.message == "range_amount: 1 of 10 rows have amount below 1 (observed 0 to 99.99)"
    assert one(users, Rule(type="range", column="amount", max=100)).passed


def test_regex(users):
    outcome = one(users, Rule(type="regex", column="email", pattern=r"^[^@]+@[^@]+$"))
    assert (outcome.passed, outcome.failing_rows) == (False, 1)
    assert outcome.observed == {"unexpected_count": 1, "row_count": 10}
    assert outcome.message == "regex_email: 1 of 10 rows have email not matching '^[^@]+@[^@]+$'"


def test_schema_match_takes_long_for_bigint_and_ignores_spaces_in_decimals(users):
    expected = {
        "user_id": "long",
        "status": "string",
        "age": "int",
        "amount": "decimal(12, 2)",
        "updated_at": "timestamp",
    }
    outcome = one(users, Rule(type="schema_match", expected=expected))
    assert outcome.passed
    assert outcome.observed == {"missing": [], "mismatched": {}, "extra": ["email"]}
    assert outcome.message == "schema_match: 5 expected columns present with the expected types"


def test_schema_match_names_missing_and_mistyped_columns(users):
    outcome = one(
        users, Rule(type="schema_match", expected={"user_id": "int", "score": "double", "age": "int"})
    )
    assert (outcome.passed, outcome.failing_rows) == (False, 0)
    assert outcome.observed == {
        "missing": ["score"],
        "mismatched": {"user_id": "bigint"},
        "extra": ["status", "email", "amount", "updated_at"],
    }
    assert outcome.message == "schema_match: score is missing; user_id is bigint, expected int"


def test_freshness(users):
    fresh = one(users, Rule(type="freshness", column="updated_at", max_age_hours=24))
    assert fresh.passed
    assert fresh.observed == {"newest": "2024-05-01T12:00:00+00:00", "age_hours": 18.0}
    assert fresh.message == (
        "freshness_updated_at: newest updated_at is 2024-05-01T12:00:00+00:00, 18.0 hours old, "
        "expected at most 24"
    )
    assert not one(users, Rule(type="freshness", column="updated_at", max_age_hours=12)).passed


def test_an_empty_dataframe(spark, tmp_path):
    empty = spark.createDataFrame([], SCHEMA)
    rules = [
        Rule(type="row_count", min=1),
        Rule(type="not_null", column="user_id"),
        Rule(type="unique", column="user_id"),
        Rule(type="freshness", column="updated_at", max_age_hours=24),
    ]
    expected = [
        (False, "row_count: 0 rows, expected at least 1"),
        (True, "not_null_user_id: 0 of 0 rows have user_id null"),
        (True, "unique_user_id: 0 of 0 rows repeat a value of user_id"),
        (False, "freshness_updated_at: updated_at has no values, expected one at most 24 hours old"),
    ]
    assert [
        (outcome.passed, outcome.message) for outcome in evaluate_rules(empty, rules, now=NOW)
    ] == expected
    observed, finish, _ = observe_rules(empty, rules, now=NOW)
    observed.write.parquet(str(tmp_path / "empty"))
    outcomes = finish(spark.read.schema(empty.schema).parquet(str(tmp_path / "empty")))
    assert [(outcome.passed, outcome.message) for outcome in outcomes] == expected


def test_an_unknown_column_fails_the_rule_by_name(users):
    outcomes = evaluate_rules(
        users,
        [
            Rule(type="not_null", column="user_idd"),
            Rule(type="unique", columns=["user_id", "region", "team"]),
            Rule(type="row_count", min=1),
        ],
    )
    assert [outcome.passed for outcome in outcomes] == [False, False, True]
    assert outcomes[0].observed == {"missing_columns": ["user_idd"]}
    assert outcomes[0].message == (
        "not_null_user_idd: column user_idd not found; "
        "the data has user_id, status, age, email, amount, updated_at"
    )
    assert outcomes[1].message.startswith("unique_user_id_region_team: columns region, team not found; ")


def test_great_expectations_passing_and_failing(users):
    rules = [
        Rule(
            type="great_expectations",
            expectation="ExpectColumnValuesToBeBetween",
            column="amount",
            kwargs={"min_value": 0, "max_value": 1000},
        ),
        Rule(
            type="great_expectations",
            expectation="ExpectColumnValuesToBeBetween",
            name="ge_age",
            kwargs={"column": "age", "min_value": 0, "max_value": 120},
        ),
        Rule(
            type="great_expectations", expectation="ExpectTableRowCountToBeBetween", kwargs={"max_value": 5}
        ),
        Rule(type="not_null", column="user_id"),
    ]
    amount, age, rows, not_null = evaluate_rules(users, rules, now=NOW)
    assert amount.passed
    assert (
        amount.message
        == "great_expectations_amount: ExpectColumnValuesToBeBetween passed: 0 of 10 rows unexpected"
    )
    assert not age.passed
    assert (age.observed["unexpected_count"], sorted(age.observed["partial_unexpected_list"])) == (
        2,
        [-1, 130],
    )
    assert age.message == "ge_age: ExpectColumnValuesToBeBetween failed: 2 of 10 rows unexpected"
    assert (rows.passed, rows.observed) == (False, {"observed_value": 10})
    assert rows.message == (
        "great_expectations_expecttablerowcounttobebetween: ExpectTableRowCountToBeBetween "
        "failed with observed value 10"
    )
    assert not_null.message == "not_null_user_id: 2 of 10 rows have user_id null"


def test_great_expectations_that_cannot_run_fails_with_its_reason(users):
    rule = Rule(
        type="great_expectations",
        expectation="ExpectCompoundColumnsToBeUnique",
        kwargs={"column_list": ["user_id", "region"]},
    )
    outcome = one(users, rule)
    assert not outcome.passed
    assert outcome.message == (
        "great_expectations_expectcompoundcolumnstobeunique: ExpectCompoundColumnsToBeUnique "
        'could not run: Error: The column "region" in BatchData does not exist.'
    )


def test_an_unknown_expectation_is_an_error_naming_the_rule(users):
    rule = Rule(type="great_expectations", expectation="ExpectValuesToBeNice", name="nice")
    with pytest.raises(
        ValueError, match="^rule nice: unknown Great Expectations expectation 'ExpectValuesToBeNice'$"
    ):
        evaluate_rules(users, [rule])
    with pytest.raises(ValueError, match="^rule nice: unknown Great Expectations expectation"):
        observe_rules(users, [rule])
    bad_kwargs = Rule(
        type="great_expectations",
        expectation="ExpectColumnValuesToBeBetween",
        column="age",
        kwargs={"minimum": 0},
    )
    with pytest.raises(
        ValueError,
        match="^rule great_expectations_age: invalid arguments for ExpectColumnValuesToBeBetween: ",
    ):
        evaluate_rules(users, [bad_kwargs])


NATIVE_RULES = [
    Rule(type="row_count", min=1),
    Rule(type="not_null", column="user_id"),
    Rule(type="not_null", column="email"),
    Rule(type="unique", column="user_id"),
    Rule(type="unique", columns=["user_id", "status"]),
    Rule(type="accepted_values", column="status", values=["active", "inactive"]),
    Rule(type="range", column="age", min=0, max=120),
    Rule(type="range", column="amount", min=0),
    Rule(type="regex", column="email", pattern="@"),
    Rule(type="freshness", column="updated_at", max_age_hours=24),
    Rule(type="schema_match", expected={"user_id": "bigint"}),
]
# What each of NATIVE_RULES finds in ROWS, worked out by hand (their defects are listed above them).
NATIVE_OUTCOMES = [
    (True, "row_count: 10 rows, expected at least 1"),
    (False, "not_null_user_id: 2 of 10 rows have user_id null"),
    (False, "not_null_email: 1 of 10 rows have email null"),
    (False, "unique_user_id: 2 of 10 rows repeat a value of user_id"),
    (True, "unique_user_id_status: 0 of 10 rows repeat a value of (user_id, status)"),
    (False, "accepted_values_status: 1 of 10 rows have status not in ['active', 'inactive']"),
    (False, "range_age: 2 of 10 rows have age outside [0, 120] (observed -1 to 130)"),
    (True, "range_amount: 0 of 10 rows have amount below 0 (observed 0 to 99.99)"),
    (False, "regex_email: 1 of 10 rows have email not matching '@'"),
    (
        True,
        "freshness_updated_at: newest updated_at is 2024-05-01T12:00:00+00:00, 18.0 hours old, "
        "expected at most 24",
    ),
    (True, "schema_match: 1 expected column present with the expected types"),
]


def judged(outcomes) -> list[tuple[bool, str]]:
    return [(outcome.passed, outcome.message) for outcome in outcomes]


def test_all_native_rules_run_in_one_spark_job(spark, users):
    with jobs_counted(spark) as jobs:
        outcomes = evaluate_rules(users, NATIVE_RULES, now=NOW)
    assert len(jobs) == 1
    assert judged(outcomes) == NATIVE_OUTCOMES


def test_schema_match_runs_no_spark_job(spark, users):
    with jobs_counted(spark) as jobs:
        evaluate_rules(users, [Rule(type="schema_match", expected={"user_id": "bigint"})])
    assert jobs == []


def test_row_violation_selects_exactly_the_failing_rows(users):
    row_level = [rule for rule in NATIVE_RULES if row_violation(rule) is not None]
    assert [rule.type for rule in row_level] == [
        "not_null",
        "not_null",
        "accepted_values",
        "range",
        "range",
        "regex",
    ]
    for rule in row_level:
        assert users.filter(row_violation(rule)).count() == one(users, rule).failing_rows
    age = Rule(type="range", column="age", min=0, max=120)
    assert sorted(row.age for row in users.filter(row_violation(age)).collect()) == [-1, 130]
    status = Rule(type="accepted_values", column="status", values=["active", "inactive"])
    assert (
        users.filter(~row_violation(status)).count() == 9
    )  # the null status stays: only not_null rejects nulls


def test_observed_rules_cost_the_write_no_extra_job(spark, users, tmp_path):
    rules, expected = zip(
        *((rule, outcome) for rule, outcome in zip(NATIVE_RULES, NATIVE_OUTCOMES) if rule.type != "unique")
    )
    observed, finish, _ = observe_rules(users, list(rules), now=NOW)
    with jobs_counted(spark) as jobs:
        observed.write.parquet(str(tmp_path / "users"))
        # With the schema given, reading back needs no job to infer it.
        outcomes = finish(spark.read.schema(users.schema).parquet(str(tmp_path / "users")))
    assert len(jobs) == 1  # the write
    assert judged(outcomes) == list(expected)


def test_observed_rules_with_unique_and_great_expectations_match_evaluate_rules(spark, users, tmp_path):
    rules = [
        *NATIVE_RULES,
        Rule(type="not_null", column="nope"),
        Rule(type="great_expectations", expectation="ExpectColumnValuesToNotBeNull", column="status"),
    ]
    observed, finish, _ = observe_rules(users, rules, now=NOW)
    observed.write.parquet(str(tmp_path / "users"))
    outcomes = finish(spark.read.parquet(str(tmp_path / "users")))
    assert [outcome.rule for outcome in outcomes] == rules
    assert judged(outcomes) == [
        *NATIVE_OUTCOMES,
        (
            False,
            "not_null_nope: column nope not found; "
            "the data has user_id, status, age, email, amount, updated_at",
        ),
        (False, "great_expectations_status: ExpectColumnValuesToNotBeNull failed: 1 of 10 rows unexpected"),
    ]


def test_unique_on_deduplicated_keys_is_judged_during_the_write(spark, users, tmp_path):
    # Deduplicated on user_id (nulls included), user_id and any superset of it are unique by construction.
    deduplicated = users.dropDuplicates(["user_id"])
    rules = [
        Rule(type="unique", column="user_id"),
        Rule(type="unique", columns=["user_id", "status"]),
        Rule(type="unique", column="status"),
        Rule(type="not_null", column="user_id"),
    ]
    observed, finish, _ = observe_rules(deduplicated, rules[:2] + rules[3:], now=NOW, unique_on=["user_id"])
    with jobs_counted(spark) as jobs:
        observed.write.parquet(str(tmp_path / "users"))
        outcomes = finish(spark.read.schema(users.schema).parquet(str(tmp_path / "users")))
    assert len(jobs) == 1  # the write: no distinct count, nothing read back
    # Seven rows are left, one per user_id (the two nulls count as one key), so one null user_id remains.
    by_key = [
        (True, "unique_user_id: 0 of 7 rows repeat a value of user_id"),
        (True, "unique_user_id_status: 0 of 7 rows repeat a value of (user_id, status)"),
    ]
    null_id = (False, "not_null_user_id: 1 of 7 rows have user_id null")
    assert judged(outcomes) == [*by_key, null_id]
    assert outcomes[0].observed == {"duplicate_count": 0, "distinct_count": 6, "row_count": 7}
    # A unique rule on other columns is still an exact distinct count over the written rows.
    observed, finish, _ = observe_rules(deduplicated, rules, now=NOW, unique_on=["user_id"])
    observed.write.parquet(str(tmp_path / "again"))
    outcomes = finish(spark.read.parquet(str(tmp_path / "again")))
    # "active" is kept for users 1, 2 and 6 whichever duplicates were dropped; the rest depends on which were.
    statuses = [row.status for row in spark.read.parquet(str(tmp_path / "again")).collect() if row.status]
    repeats = len(statuses) - len(set(statuses))
    assert repeats >= 2
    unique_status = (False, f"unique_status: {repeats} of 7 rows repeat a value of status")
    assert judged(outcomes) == [*by_key, unique_status, null_id]


def test_history_rules_count_the_versions_that_break_them_in_one_window(spark):
    validity = {"valid_from": "valid_from", "valid_to": "valid_to", "is_current": "is_current"}
    # Key 1 is sound; key 2 has two current versions (both overlap the next one's start: a current version
    # has no end); key 3's first version ends after its second starts; key 4's versions start together.
    history = spark.createDataFrame(
        [
            (1, 1, 2, False),
            (1, 2, None, True),
            (2, 1, None, True),
            (2, 3, None, True),
            (3, 1, 5, False),
            (3, 4, None, True),
            (4, 1, 2, False),
            (4, 1, None, True),
        ],
        "customer_id bigint, valid_from bigint, valid_to bigint, is_current boolean",
    )
    rules = [
        Rule(type="scd2_one_current", name="one_current", columns=["customer_id"], kwargs=validity),
        Rule(type="scd2_no_overlap", name="no_overlap", columns=["customer_id"], kwargs=validity),
        Rule(type="unique", name="unique_valid_from", columns=["customer_id", "valid_from"]),
    ]
    outcomes = evaluate_rules(history, rules)
    assert judged(outcomes) == [
        (False, "one_current: 2 rows are current versions of a key with more than one"),
        (False, "no_overlap: 3 rows overlap the validity interval of the key's next version"),
        (False, "unique_valid_from: 1 of 8 rows repeat a value of (customer_id, valid_from)"),
    ]
    assert [outcome.failing_rows for outcome in outcomes[:2]] == [2, 3]
    marked = history.select(*[_breaking(rule) for rule in rules[:2]])
    assert marked._jdf.queryExecution().executedPlan().toString().count("Window [") == 1
