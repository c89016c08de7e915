"""Retries, decided from the catalog at the moment of failure.

Dagster's static RetryPolicy is fixed when definitions load; raising Dagster's RetryRequested instead lets
an updated retry_policies row apply to the very next attempt. Errors that another attempt cannot fix (a
malformed name, SQL that does not analyse, a breaking schema change) fail at once. A failure a healing rule
has remedied is retried under the stage's policy, or HEALED_RETRIES when the stage has none.
"""

from __future__ import annotations

import random

from dagster import Failure, RetryRequested
from pyspark.errors import AnalysisException

from medallion_assets.catalog.models import RetryPolicy, Stage
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.healing import Fault, Remedy, heal
from medallion_assets.errors import BreakingSourceSchemaChange
from medallion_assets.naming import InvalidIdentifier

NEVER_RETRY = (InvalidIdentifier, AnalysisException, BreakingSourceSchemaChange)
HEALED_RETRIES = RetryPolicy(retry_id="healed_default", max_retries=3, backoff_sec=1)


def current_policy(store: CatalogStore, stage: Stage) -> RetryPolicy | None:
    """The stage's policy, else its pipeline's default, as the catalog holds them now."""
    stages = {row.key(): row for row in store.read_table("stages")}
    pipelines = {row.pipeline_id: row for row in store.read_table("pipelines")}
    current = stages.get(stage.key(), stage)
    retry_id = current.retry_id or getattr(pipelines.get(stage.pipeline_id), "default_retry_id", None)
    policies = {row.retry_id: row for row in store.read_table("retry_policies")}
    return policies.get(retry_id) if retry_id else None


def retry_delay(policy: RetryPolicy, retry_number: int, rng: random.Random = random.Random()) -> float:
    """Seconds before attempt `retry_number + 1`: fixed or doubling backoff, ± jitter, capped by max delay."""
    base = policy.backoff_sec * (2 ** retry_number if policy.backoff == "exponential" else 1)
    delay = max(0.0, base + rng.uniform(-policy.jitter_sec, policy.jitter_sec))
    return min(delay, policy.max_delay_sec) if policy.max_delay_sec is not None else delay


def retry_or_fail(store: CatalogStore, stage: Stage, error: Exception, retry_number: int,
                  remedy: Remedy | None = None) -> Exception:
    """What to raise after `error` (and the healing `remedy`, if a rule matched): RetryRequested while the
    policy allows, else a final Failure."""
    attempts = f"attempt {retry_number + 1}"
    failed = f"{type(error).__name__}: {error}"
    if isinstance(error, NEVER_RETRY):
        return Failure(f"{failed} ({attempts}; never retried)", allow_retries=False)
    if remedy is not None and remedy.outcome == "give_up":
        return Failure(f"{failed} ({attempts}; healing gave up: {remedy.detail})", allow_retries=False)
    policy = current_policy(store, stage) or (HEALED_RETRIES if remedy else None)
    if policy is None or retry_number >= policy.max_retries:
        limit = f"of {policy.max_retries + 1}" if policy else "(no retry policy)"
        return Failure(f"{failed} ({attempts} {limit}; retries spent)", allow_retries=False)
    delay = retry_delay(policy, retry_number)
    store.record_audit(pipeline_id=stage.pipeline_id, stage_name=stage.stage_name, dataset=stage.target_id,
                       event="retry", status="scheduled", error=failed,
                       details={"attempt": retry_number + 1, "delay_sec": round(delay, 3), "retry_id": policy.retry_id,
                                **({"healed": remedy.detail} if remedy else {})})
    return RetryRequested(max_retries=policy.max_retries, seconds_to_wait=delay)


def after_failure(store: CatalogStore, fault: Fault, lake_root: str, warehouse_url: str) -> Exception:
    """Heal the fault if a rule matches (never a fault no attempt can fix), then decide on the next attempt."""
    remedy = None if isinstance(fault.error, NEVER_RETRY) else heal(store, fault, lake_root, warehouse_url)
    return retry_or_fail(store, fault.stage, fault.error, fault.attempt - 1, remedy)
