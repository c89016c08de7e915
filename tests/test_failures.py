"""The failure lifecycle's state between attempts: what healing asks of later attempts travels in the run's
tags."""

from __future__ import annotations

from dagster import Failure, RetryRequested

from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.healing.failures import (
    FAILURE_BACKOFF_SECONDS,
    adjustments,
    after_failure,
    backing_off,
    catalog_healed,
)
from medallion_assets.control.healing.rules import Fault
from medallion_assets.engine.ingest import BreakingSourceSchemaChange
from medallion_assets.loading import validate_files
from medallion_assets.storage.lake.root import Lake
from tests.conftest import SEED

TOO_LARGE = RuntimeError(
    "Total size of serialized results is bigger than spark.driver.maxResultSize (8.0 MiB)"
)


def seeded_store(tmp_path) -> CatalogStore:
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    return store


def test_adjustments_reach_the_next_attempts_through_the_run_tags_and_build_on_each_other(tmp_path):
    store = seeded_store(tmp_path)
    bronze, silver, gold = store.snapshot().stages("user_events_etl")
    run_tags: dict[str, str] = {}

    def fail(attempt: int) -> Exception:
        fault = Fault.of(TOO_LARGE, gold, "gold", attempt, "run-1")
        return after_failure(
            store,
            fault,
            Lake.resolve(tmp_path / "lake"),
            "duckdb:///unused.duckdb",
            dict(run_tags),
            run_tags.update,
        )

    assert isinstance(fail(1), RetryRequested)
    assert run_tags == {
        "medallion/catalog_healed": "true",
        "medallion/adjustments/user_events_etl.gold_daily_aggregate": '{"load_partitions": 16}',
    }
    assert isinstance(fail(2), RetryRequested)
    assert adjustments(run_tags, gold) == {"load_partitions": 32}
    assert adjustments(run_tags, silver) == {} and catalog_healed(run_tags)
    # The audit log records each decision, and is not what the next attempt reads.
    assert [entry["details"]["overrides"] for entry in store.audit_entries(event="healing")] == [
        {"load_partitions": 16},
        {"load_partitions": 32},
    ]


def test_a_failure_no_attempt_can_fix_is_not_healed_and_leaves_the_run_tags_alone(tmp_path):
    store = seeded_store(tmp_path)
    bronze = store.snapshot().stages("user_events_etl")[0]
    run_tags: dict[str, str] = {}
    breaking = BreakingSourceSchemaChange("source user_events_raw: declared field amount is gone")
    decided = after_failure(
        store,
        Fault.of(breaking, bronze, "bronze", 1, "run-1"),
        Lake.resolve(tmp_path / "lake"),
        "duckdb:///unused.duckdb",
        {},
        run_tags.update,
    )
    assert isinstance(decided, Failure)
    assert decided.description == (
        "BreakingSourceSchemaChange: source user_events_raw: declared field amount is "
        "gone (attempt 1; never retried)"
    )
    assert run_tags == {} and store.audit_entries(event="healing") == []


def test_the_launcher_backs_off_a_pipeline_only_for_a_while_after_its_last_run_failed():
    now = 1_000_000.0
    assert not backing_off(None, now)
    assert backing_off(now - 60, now)
    assert not backing_off(now - FAILURE_BACKOFF_SECONDS, now)
