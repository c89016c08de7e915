"""Limits: a YAML alias bomb, a catastrophic regular expression and a password in a URL are all contained."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from medallion_assets.catalog.loader import MAX_YAML_VALUES, CatalogInvalid
from medallion_assets.catalog.models import HealingAction, Rule, Stage
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.cli import main
from medallion_assets.control.healing.rules import Fault, matching_rule
from medallion_assets.definitions import build_definitions
from medallion_assets.engine.validation import evaluate_rules
from medallion_assets.loading import validate_files
from medallion_assets.redaction import printable, scrub
from tests.conftest import SEED

# The classic "billion laughs": nine levels of nine aliases, 9^9 values from a few hundred bytes.
ALIAS_BOMB = (
    "\n".join(
        ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        + [f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, 9)]
        + ["pipelines: [*l8]"]
    )
    + "\n"
)


@pytest.fixture
def store(tmp_path) -> CatalogStore:
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    return store


def test_a_yaml_alias_bomb_is_refused_before_it_is_expanded(store, tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB.encode()) < 600
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [bomb])
    assert [str(problem) for problem in refused.value.problems] == [
        f"{bomb}:1: : expands to over {MAX_YAML_VALUES:,} values through its aliases (926,177,116); refused"
    ]
    assert store.table_rows("pipelines") == []


def test_ordinary_aliases_still_load(store, tmp_path):
    shared = tmp_path / "shared.yaml"
    shared.write_text(
        "retry_policies:\n  - &std {retry_id: std, max_retries: 3, backoff_sec: 60}\n"
        "  - {<<: *std, retry_id: patient, backoff_sec: 600}\n"
    )
    store.upsert(validate_files(store.snapshot(), [shared]).rows)
    assert sorted((p["retry_id"], p["backoff_sec"]) for p in store.table_rows("retry_policies")) == [
        ("patient", 600),
        ("std", 60),
    ]


CATASTROPHIC = "(a+)+$"  # exponential for a backtracking engine on 'aaaa…b'


def test_a_catastrophic_signature_matches_in_linear_time():
    rule = HealingAction(healing_id="slow", message_pattern=CATASTROPHIC, action="reconnect_warehouse")
    stage = Stage(pipeline_id="p", stage_order=1, stage_name="s", input_id="a", target_id="b")
    fault = Fault(stage, "gold", 1, frozenset({"ValueError"}), "a" * 100_000 + "b")
    # With Python's backtracking `re`, this call would not return within the lifetime of the test run.
    assert matching_rule([rule], fault) is None


@pytest.mark.parametrize(
    "pattern, reason",
    [
        (r"(\w+) \1", "invalid escape sequence: \\1"),
        (r"error(?!s)", "invalid perl operator: (?!"),
        ("x" * 1001, None),
    ],
)
def test_patterns_that_need_backtracking_are_refused_at_load(pattern, reason):
    for build in (
        lambda: Rule(type="regex", column="email", pattern=pattern),
        lambda: HealingAction(healing_id="h", message_pattern=pattern, action="reconnect_warehouse"),
    ):
        with pytest.raises(ValidationError) as refused:
            build()
        expected = reason and (
            f"invalid regular expression {pattern!r} (RE2 syntax, matched in linear time; no "
            f"backreferences or lookarounds): {reason}"
        )
        assert (expected or "regular expression of 1001 characters; at most 1000") in str(refused.value)


def test_catalog_init_never_prints_the_password_of_the_catalog_url(pg_database, monkeypatch):
    # The server's real password where it asks for one (libpq's PGPASSWORD, as `make test` sets it).
    password = os.environ.get("PGPASSWORD") or "hunter2-catalog"
    with_password = pg_database.replace("postgres@", f"postgres:{password}@")
    monkeypatch.setenv("MEDALLION_CATALOG_URL", with_password)
    result = CliRunner().invoke(main, ["catalog", "init"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"catalog ready at {pg_database.replace('postgres@', 'postgres:***@')}\n"


def test_the_audit_log_never_stores_a_password(tmp_path, store):
    store.record_audit(
        pipeline_id="p",
        event="stage",
        status="failed",
        error="OperationalError: could not connect to postgresql://loader:pa55word-x@db:5432/gold",
        details={"warehouse": "redshift://loader:pa55word-x@cluster:5439/dev"},
    )
    [entry] = store.audit_entries(pipeline_id="p")
    assert "pa55word" not in entry["error"] + str(entry["details"])
    assert entry["details"] == {"warehouse": "redshift://loader:***@cluster:5439/dev"}


def test_printable_escapes_every_control_character_but_layout():
    assert printable("ok\tline\n\x1b[31mred\x07\x9b2J\x00") == "ok\tline\n\\x1b[31mred\\x07\\x9b2J\\x00"
    assert scrub("s3://bucket/key postgresql://u:p4ssw0rd@h/db") == "s3://bucket/key postgresql://u:***@h/db"


def test_dagster_metadata_never_shows_a_password_of_the_lake_url(store, tmp_path):
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    defs = build_definitions(
        store.url,
        "s3a://AKIAEXAMPLE:pa55-lake-secret@lake-bucket/lake",
        f"duckdb:///{tmp_path}/warehouse.duckdb",
    )
    locations = {
        spec.key.to_user_string(): spec.metadata.get("location") for spec in defs.resolve_all_asset_specs()
    }
    assert "pa55-lake-secret" not in str(locations)
    assert locations["silver/orders"] == "s3a://AKIAEXAMPLE:***@lake-bucket/lake/silver/orders"


def test_a_catastrophic_regex_rule_runs_in_linear_time_in_spark(spark):
    rows = spark.createDataFrame([("a" * 100_000 + "b",), ("aaa",), (None,)], "code string")
    [outcome] = evaluate_rules(rows, [Rule(type="regex", column="code", pattern=CATASTROPHIC)])
    # Spark's own rlike (Java's backtracking engine) took 3 s on 30 a's and a b, twice as long for each more
    # a.
    assert outcome.message == "regex_code: 1 of 3 rows have code not matching '(a+)+$'"
    assert outcome.failing_rows == 1
