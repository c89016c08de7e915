"""Unit tests of stages as catalog rows (`stage_tests`): the seed's pass, a changed SQL fails them with the
exact row difference, quarantine reasons are compared, bad rows are refused in one line, and `plan --test`
exits 2 on a failing test. Every test shares the suite's one Spark session; none reads or writes a lake
table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner, Result

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.models import StageTest
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.change.plan import plan_schema
from medallion_assets.change.unit_tests import run_tests
from medallion_assets.cli import main
from medallion_assets.loading import validate_files
from tests.conftest import SEED
from tests.fixtures.seed import edited_seed

UE = "user_events_etl.yaml"
GOLD_EXPECTED = (
    "    expect_rows:\n"
    "      - {event_date: 2024-03-01, total_events: 2, unique_users: 1}\n"
    "      - {event_date: 2024-03-02, total_events: 1, unique_users: 1}\n"
)
# The gold stage's SQL counting users' events instead of distinct users: its seed test must fail.
COUNTS_EVENTS = ("COUNT(DISTINCT user_id) AS unique_users", "COUNT(user_id) AS unique_users")


def medallion(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def loaded_seed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A home of its own whose catalog holds the seed; the folder to put edited copies in."""
    folder = tmp_path_factory.mktemp("stage-tests")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDALLION_HOME", str(folder / "home"))
        patch.delenv("MEDALLION_CATALOG_URL", raising=False)
        patch.delenv("MEDALLION_LAKE_URL", raising=False)
        assert medallion("catalog", "load", str(SEED)).exit_code == 0
        yield folder


def test_the_seed_tests_pass_in_text_and_json(loaded_seed: Path, spark) -> None:
    result = medallion("test", "user_events_etl")
    assert (result.exit_code, result.stdout.splitlines()) == (
        0,
        [
            "PASS user_events_etl.silver_clean.quarantines_an_unreadable_time",
            "PASS user_events_etl.silver_clean.types_and_deduplicates_events",
            "PASS user_events_etl.gold_daily_aggregate.counts_events_and_users_per_day",
            "3 test(s): 3 passed, 0 failed",
        ],
    )
    as_json = medallion("test", "--json")
    assert as_json.exit_code == 0
    tests = json.loads(as_json.stdout)["tests"]
    assert [(t["test_name"], t["passed"]) for t in tests] == [
        ("quarantines_an_unreadable_time", True),
        ("types_and_deduplicates_events", True),
        ("counts_events_and_users_per_day", True),
    ]


def test_an_unknown_pipeline_exits_2(loaded_seed: Path) -> None:
    result = medallion("test", "user_event_etl")
    assert result.exit_code == 2
    assert result.stderr.startswith("unknown pipeline 'user_event_etl'; pipelines: customer_changes_etl, ")


def test_plan_test_prints_the_difference_and_exits_2_when_a_test_fails(loaded_seed: Path, spark) -> None:
    folder = edited_seed(loaded_seed / "counts_events", [(UE, *COUNTS_EVENTS)])
    result = medallion("plan", str(folder), "--test")
    assert result.exit_code == 2
    assert result.stdout.splitlines()[-3:] == [
        "FAIL user_events_etl.gold_daily_aggregate.counts_events_and_users_per_day",
        "  row {event_date: '2024-03-01', total_events: '2'}: unique_users expected '1', got '2'",
        "1 test(s): 0 passed, 1 failed",
    ]
    # Only the changed stage's tests run; a change meaning the same passes them: the plan's exit is its own.
    same = edited_seed(
        loaded_seed / "same", [(UE, "SELECT event_ts::DATE AS", "SELECT CAST(event_ts AS DATE) AS")]
    )
    result = medallion("plan", str(same), "--test")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-2:] == [
        "PASS user_events_etl.gold_daily_aggregate.counts_events_and_users_per_day",
        "1 test(s): 1 passed, 0 failed",
    ]
    # With --json the tests' results are in the plan's one JSON document, and nothing else is printed.
    result = medallion("plan", str(folder), "--test", "--json")
    document = json.loads(result.stdout)
    jsonschema.validate(document, plan_schema())
    assert (result.exit_code, result.stderr) == (2, "")
    [failed] = document["tests"]
    assert (failed["test_name"], failed["passed"], failed["changed"]) == (
        "counts_events_and_users_per_day",
        False,
        [
            {
                "expected": {"event_date": "2024-03-01", "total_events": "2", "unique_users": "1"},
                "actual": {"event_date": "2024-03-01", "total_events": "2", "unique_users": "2"},
            }
        ],
    )


def test_changed_missing_and_extra_rows_and_quarantine_reasons(stored: CatalogSnapshot, spark) -> None:
    """Rows and reasons are compared as multisets; a row expected and one made with the same key (the target's
    keys) are one changed row, its differing columns said."""
    test = StageTest(
        pipeline_id="user_events_etl",
        stage_name="silver_clean",
        test_name="wrong_expectations",
        given={
            "bronze_user_events": [
                {"event_id": "e1", "user_id": "u1", "event_type": "view", "event_ts": "2024-03-01 10:00:00"},
                {"event_id": "e3", "user_id": "u3", "event_type": "view", "event_ts": "2024-03-01 11:00:00"},
                {"event_id": "e2", "event_ts": "noon"},
            ]
        },
        expect_rows=[{"event_id": "e1", "user_id": "u2"}, {"event_id": "e9", "user_id": "u1"}],
        expect_quarantined=["rule not_null failed"],
    )
    [result] = run_tests(spark, stored, [test])
    assert not result.passed
    assert result.lines() == [
        "FAIL user_events_etl.silver_clean.wrong_expectations",
        "  row {event_id: 'e1'}: user_id expected 'u2', got 'u1'",
        "  missing row: {event_id: 'e9', user_id: 'u1'}",
        "  extra row:   {event_id: 'e3', user_id: 'u3'}",
        "  missing quarantine reason: 'rule not_null failed'",
        "  extra quarantine reason:   'event_ts: cannot cast noon to timestamp'",
    ]


def test_an_input_value_that_does_not_cast_is_the_tests_error(stored: CatalogSnapshot, spark) -> None:
    """An input's values are cast to its declared types as Spark casts them; one that does not cast stops the
    test with Spark's message, the test failing."""
    given = {"event_id": "e1", "event_ts": "2024-03-01 10:00:00", "value": "a lot"}
    test = StageTest(
        pipeline_id="user_events_etl",
        stage_name="silver_clean",
        test_name="bad_value",
        given={"bronze_user_events": [given]},
        expect_rows=[],
    )
    [result] = run_tests(spark, stored, [test])
    assert result.error is not None and result.error.startswith("[CAST_INVALID_INPUT] The value 'a lot' ")
    assert result.lines() == ["FAIL user_events_etl.silver_clean.bad_value", f"  error: {result.error}"]


@pytest.mark.parametrize(
    "edit, refusal",
    [
        (
            ("stage_name: gold_daily_aggregate\n    test_name:", "stage_name: gold_daily\n    test_name:"),
            "stage_tests[user_events_etl, gold_daily, counts_events_and_users_per_day].stage_name: unknown "
            "stage user_events_etl.gold_daily",
        ),
        (
            (
                "      silver_user_events:\n        - {event_id: e1",
                "      silver_events:\n        - {event_id: e1",
            ),
            "stage_tests[user_events_etl, gold_daily_aggregate, counts_events_and_users_per_day]"
            ".given.silver_events: unknown input 'silver_events'; the stage reads silver_user_events",
        ),
        (
            (
                "      silver_user_events:\n        - {event_id: e1",
                "      silver_events:\n        - {event_id: e1",
            ),
            "stage_tests[user_events_etl, gold_daily_aggregate, counts_events_and_users_per_day]"
            ".given: no rows for input 'silver_user_events': give [] for none",
        ),
        (
            ("event_ts: yesterday, value: 2}", "event_ts: yesterday, amount: 2}"),
            "stage_tests[user_events_etl, silver_clean, quarantines_an_unreadable_time]"
            ".given.bronze_user_events: unknown column 'amount'; it has event_id, user_id, event_type, "
            "event_ts, value, ",
        ),
        (
            ("expect_rows: [{event_id: e4}]", "expect_rows: [{event_key: e4}]"),
            "stage_tests[user_events_etl, silver_clean, quarantines_an_unreadable_time].expect_rows: unknown "
            "column 'event_key'; it has event_id, user_id, event_type, event_ts, value",
        ),
    ],
    ids=[
        "unknown_stage",
        "unknown_input",
        "input_without_rows",
        "unknown_input_column",
        "unknown_output_column",
    ],
)
def test_bad_rows_are_refused_in_one_line(edit: tuple[str, str], refusal: str, tmp_path: Path) -> None:
    folder = edited_seed(tmp_path, [(UE, *edit)])
    with pytest.raises(CatalogInvalid) as raised:
        validate_files(CatalogSnapshot(), [folder])
    said = [str(problem) for problem in raised.value.problems]
    assert all(line.startswith(f"{folder / UE}:") and "\n" not in line for line in said), said
    assert [line for line in said if refusal in line], said


def test_rows_from_a_csv_file_beside_the_yaml_and_none_from_outside_its_folder(tmp_path: Path) -> None:
    folder = edited_seed(tmp_path, [(UE, GOLD_EXPECTED, "    expect_rows: tests/daily.csv\n")])
    (folder / "tests").mkdir()
    (folder / "tests" / "daily.csv").write_text("event_date,total_events,unique_users\n2024-03-01,2,\n")
    loaded = validate_files(CatalogSnapshot(), [folder])
    [gold_test] = [
        t
        for t in loaded.rows["stage_tests"]
        if isinstance(t, StageTest) and t.stage_name == "gold_daily_aggregate"
    ]
    assert gold_test.expect_rows == [{"event_date": "2024-03-01", "total_events": "2", "unique_users": None}]
    (folder / UE).write_text((folder / UE).read_text().replace("tests/daily.csv", "../daily.csv"))
    with pytest.raises(CatalogInvalid) as raised:
        validate_files(CatalogSnapshot(), [folder])
    [problem] = raised.value.problems
    assert str(problem) == (
        f"{folder / UE}:101: stage_tests[user_events_etl, gold_daily_aggregate, "
        "counts_events_and_users_per_day].expect_rows: cannot read CSV file '../daily.csv': path part "
        f"'../daily.csv' under '{folder}' holds the segment '..'"
    )
