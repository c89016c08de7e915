"""Retries decided from retry_policies at the moment of failure, with every attempt on record."""

from __future__ import annotations

import random
import threading
import time

import boto3
import pytest

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.models import RetryPolicy
from medallion_assets.control.healing.failures import retry_delay
from medallion_assets.sample_data import write_sample_data


def test_backoff_is_fixed_or_doubling_with_jitter_and_a_cap():
    fixed = RetryPolicy(retry_id="r", max_retries=3, backoff_sec=10)
    assert [retry_delay(fixed, n) for n in range(3)] == [10, 10, 10]
    doubling = RetryPolicy(
        retry_id="r", max_retries=5, backoff_sec=10, backoff="exponential", max_delay_sec=50
    )
    assert [retry_delay(doubling, n) for n in range(4)] == [10, 20, 40, 50]
    jittered = RetryPolicy(retry_id="r", max_retries=1, backoff_sec=10, jitter_sec=2)
    delays = [retry_delay(jittered, 0, random.Random(seed)) for seed in range(50)]
    assert all(8 <= d <= 12 for d in delays) and len(set(delays)) > 1


def test_absurd_policies_are_refused_with_the_allowed_range(medallion, tmp_path):
    bad = tmp_path / "retry.yaml"
    bad.write_text("retry_policies:\n  - {retry_id: forever, max_retries: 1000, backoff_sec: 100000}\n")
    with pytest.raises(CatalogInvalid) as raised:
        medallion.load(bad)
    assert [p.message for p in raised.value.problems] == [
        "Input should be less than or equal to 100; got 1000",
        "Input should be less than or equal to 86400; got 100000",
    ]


def test_data_that_arrives_late_is_picked_up_by_a_retry(medallion):
    """The bucket is missing on the first attempt and appears before the second: the run succeeds."""
    medallion.move_source("user_events_raw", "s3://late-bucket/user_events/")
    medallion.set_retries(2)

    def deliver_after_first_failure():
        while not medallion.store.audit_entries(event="retry"):
            time.sleep(0.05)
        boto3.client("s3").create_bucket(Bucket="late-bucket")
        write_sample_data("s3://late-bucket", rows=500)

    courier = threading.Thread(target=deliver_after_first_failure)
    courier.start()
    report = medallion.run("user_events_etl")
    courier.join()
    assert report.status == "success"
    attempts = [(e["event"], e["status"]) for e in medallion.store.audit_entries(stage_name="bronze_ingest")]
    assert attempts == [("stage", "failed"), ("retry", "scheduled"), ("stage", "success")]
    [retry] = medallion.store.audit_entries(event="retry")
    assert retry["details"] == {"attempt": 1, "delay_sec": 1.0, "retry_id": "std_retry"}


def test_retries_spent_fail_visibly_and_an_updated_policy_applies_next_time(medallion):
    medallion.move_source("user_events_raw", "s3://never-there/user_events/")
    medallion.set_retries(1)
    assert medallion.run("user_events_etl").status == "failed"
    assert [
        e["status"] for e in medallion.store.audit_entries(stage_name="bronze_ingest", event="stage")
    ] == ["failed", "failed"]
    medallion.set_retries(2)
    medallion.run("user_events_etl")
    assert len(medallion.store.audit_entries(stage_name="bronze_ingest", event="stage")) == 2 + 3


def test_sql_that_cannot_analyse_is_never_retried(medallion, raw_data, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("""
stages:
  - {pipeline_id: user_events_etl, stage_order: 3, stage_name: gold_daily_aggregate,
     input_id: silver_user_events, target_id: gold_daily_user_events,
     transform_sql: "SELECT no_such_function(event_ts) AS event_date, 1 AS total_events, 1 AS unique_users
       FROM silver_user_events"}
""")
    medallion.load(broken)
    medallion.set_retries(3)
    report = medallion.run("user_events_etl")
    assert report.status == "failed"
    gold = medallion.store.audit_entries(stage_name="gold_daily_aggregate")
    assert [e["status"] for e in gold] == ["failed"]
    assert "NO_SUCH_FUNCTION" in gold[0]["error"] and medallion.store.audit_entries(event="retry") == []
