"""The failure lifecycle: everything that happens to a failure, from the step that raised it to the circuit
breaker.

```
 step attempt fails ──► never retried? (bad name, SQL that does not analyse, breaking schema change)
        │                 ──yes──► step fails
        ▼
 in-step healing rule matches? ──yes──► its action runs ──► Remedy: give_up ──────────────────► step fails
        │ no                                   │ retry (with adjustments for the next attempt: run tags)
        ▼                                      ▼
 retry policy (read now) allows another attempt? ──yes──► RetryRequested(backoff)
        │ no                                                  ──► next attempt reads the tags
        ▼
 step fails ──► run fails ──► run-level healing rule matches (healing sensor)?
                                    │ no                ──yes──► re-execution from failure
                                    ▼
        launcher: a pipeline whose last run failed is not relaunched for FAILURE_BACKOFF_SECONDS
```
The circuit breaker is a healing action (`trip_circuit_breaker`, control/actions.py): it counts the
pipeline's failed attempts in its window and, past its limit, sets the pipeline's kill switch, which halts
every later run.

Each step of the picture is a function here (`after_failure` for the step, `reexecution` for the run,
`backing_off` for the launcher); healing rules and their actions live in control/healing.py and
control/actions.py, the sensor that re-executes runs in sensors/healing.py.

Adjustments between attempts (smaller load batches, evolving the warehouse table's schema, reading a
catalog that healing changed) are run tags written when the retry is decided and read by the next attempt:
state that the run carries and the UI shows, never read back from the audit log, which only records what
happened.

Dagster's own mechanisms, where they do the job:
- Step retries are Dagster's: the step raises `RetryRequested`. Not a static `RetryPolicy`, which is fixed
  when definitions load: the retry_policies row is read at the moment of failure, so an update applies to
  the very next attempt.
- Run retries (`dagster/max_retries`, `retry_on_asset_or_op_failure`) are not used: they re-execute every
  failed run a number of times fixed at launch, where a run here is re-executed only when a run-level
  healing rule matches its failure and its action agrees, under the rule's `max_reruns` as the catalog holds
  it now. A run that Dagster will retry all the same (`dagster/will_retry`, set by an operator's tag) is left
  to Dagster, so no failure is retried twice.
- `run_failure_sensor` is not used: a run status sensor can only request jobs it is given as definitions
  (`request_job`), while the re-execution is an asset selection in Dagster's implicit asset job, which has no
  definition to give; an asset job of our own over every asset would double the code location's load time
  (dagster_compat.IMPLICIT_ASSET_JOB_NAME). The healing sensor is a plain sensor with its own cursor over
  failed runs instead.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from typing import Any, cast

from dagster import Failure, RetryRequested

from medallion_assets.catalog.models import Pipeline, RetryPolicy, Stage
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.healing.remedies import Fault, Remedy
from medallion_assets.control.healing.rules import heal
from medallion_assets.control.rows import rows_as
from medallion_assets.storage.lake.root import Lake

# Failures another attempt cannot fix: a malformed name, SQL that does not analyse, a declared field gone.
# Named, not imported, so the control plane imports neither the engine nor Spark.
NEVER_RETRY = frozenset(
    {"InvalidIdentifier", "AnalysisException", "SqlNotAnalyzable", "BreakingSourceSchemaChange"}
)
# A failure a healing rule remedied is retried under the stage's policy, or this one when the stage has none.
HEALED_RETRIES = RetryPolicy(retry_id="healed_default", max_retries=3, backoff_sec=1)
# A pipeline whose last run failed is not due again for this long, so new files do not relaunch a broken run
# on every tick.
FAILURE_BACKOFF_SECONDS = 15 * 60
# The jitter's random source when the caller gives none: one for the process, made once.
_JITTER_RNG = random.Random()

# Run tags: the adjustments healing asked of a stage's next attempts, and that healing changed the catalog.
ADJUSTMENTS_TAG = "medallion/adjustments/{pipeline_id}.{stage_name}"
CATALOG_HEALED_TAG = "medallion/catalog_healed"


def never_retried(error: BaseException) -> bool:
    return any(kind.__name__ in NEVER_RETRY for kind in type(error).__mro__)


def current_policy(store: CatalogStore, stage: Stage) -> RetryPolicy | None:
    """The stage's policy, else its pipeline's default, as the catalog holds them now."""
    stages = {row.key(): row for row in rows_as(Stage, store.read_table("stages"))}
    pipelines = {row.pipeline_id: row for row in rows_as(Pipeline, store.read_table("pipelines"))}
    current = stages.get(stage.key(), stage)
    retry_id = current.retry_id or getattr(pipelines.get(stage.pipeline_id), "default_retry_id", None)
    policies = {row.retry_id: row for row in rows_as(RetryPolicy, store.read_table("retry_policies"))}
    return policies.get(retry_id) if retry_id else None


def retry_delay(policy: RetryPolicy, retry_number: int, rng: random.Random = _JITTER_RNG) -> float:
    """Seconds before attempt `retry_number + 1`: fixed or doubling backoff, ± jitter, capped by max delay."""
    base = policy.backoff_sec * (2**retry_number if policy.backoff == "exponential" else 1)
    delay = max(0.0, base + rng.uniform(-policy.jitter_sec, policy.jitter_sec))
    return min(delay, policy.max_delay_sec) if policy.max_delay_sec is not None else delay


def retry_or_fail(
    store: CatalogStore, stage: Stage, error: BaseException, retry_number: int, remedy: Remedy | None = None
) -> Exception:
    """What to raise after `error` (and the healing `remedy`, if a rule matched): RetryRequested while the
    policy allows, else a final Failure."""
    attempts = f"attempt {retry_number + 1}"
    failed = f"{type(error).__name__}: {error}"
    if never_retried(error):
        return Failure(f"{failed} ({attempts}; never retried)", allow_retries=False)
    if remedy is not None and remedy.outcome == "give_up":
        return Failure(f"{failed} ({attempts}; healing gave up: {remedy.detail})", allow_retries=False)
    policy = current_policy(store, stage) or (HEALED_RETRIES if remedy else None)
    if policy is None or retry_number >= policy.max_retries:
        limit = f"of {policy.max_retries + 1}" if policy else "(no retry policy)"
        return Failure(f"{failed} ({attempts} {limit}; retries spent)", allow_retries=False)
    delay = retry_delay(policy, retry_number)
    store.record_audit(
        pipeline_id=stage.pipeline_id,
        stage_name=stage.stage_name,
        dataset=stage.target_id,
        event="retry",
        status="scheduled",
        error=failed,
        details={
            "attempt": retry_number + 1,
            "delay_sec": round(delay, 3),
            "retry_id": policy.retry_id,
            **({"healed": remedy.detail} if remedy else {}),
        },
    )
    return RetryRequested(max_retries=policy.max_retries, seconds_to_wait=delay)


def after_failure(
    store: CatalogStore,
    fault: Fault,
    lake: Lake,
    warehouse_url: str,
    run_tags: Mapping[str, str],
    add_run_tags: Callable[[dict[str, str]], None],
) -> Exception:
    """The step's part of the lifecycle: heal the fault if a rule matches (never a fault no attempt can fix),
    leave what the remedy asks of the next attempts in the run's tags, then decide on the next attempt.

    `run_tags` are the run's tags now; `add_run_tags` adds to them (Dagster's instance.add_run_tags)."""
    assert fault.error is not None, "an in-step fault (Fault.of) carries its exception"
    remedy = None if never_retried(fault.error) else heal(store, fault, lake, warehouse_url)
    if remedy is not None:
        add_run_tags(adjustment_tags(run_tags, fault.stage, remedy))
    return retry_or_fail(store, fault.stage, fault.error, fault.attempt - 1, remedy)


def adjustment_tags(run_tags: Mapping[str, str], stage: Stage, remedy: Remedy) -> dict[str, str]:
    """The run tags that carry a remedy to later attempts: the stage's adjustments (merged with earlier ones),
    and, once healing has acted, that later steps read the catalog as healing left it."""
    tags = {CATALOG_HEALED_TAG: "true"}
    if remedy.outcome == "retry" and remedy.overrides:
        tags[_adjustments_tag(stage)] = json.dumps(
            {**adjustments(run_tags, stage), **remedy.overrides}, sort_keys=True
        )
    return tags


def adjustments(run_tags: Mapping[str, str], stage: Stage) -> dict[str, Any]:
    """The adjustments healing asked of the stage's next attempts in this run (see
    engine.stage.Adjustments)."""
    # The tag holds the JSON object adjustment_tags wrote.
    return cast(dict[str, Any], json.loads(run_tags.get(_adjustments_tag(stage), "{}")))


def catalog_healed(run_tags: Mapping[str, str]) -> bool:
    """Whether healing acted in this run, and may have changed the catalog (a new column) its steps read."""
    return run_tags.get(CATALOG_HEALED_TAG) == "true"


def _adjustments_tag(stage: Stage) -> str:
    return ADJUSTMENTS_TAG.format(pipeline_id=stage.pipeline_id, stage_name=stage.stage_name)


def reexecution(store: CatalogStore, fault: Fault, lake: Lake, warehouse_url: str) -> bool:
    """The run's part of the lifecycle: whether a failed run is re-executed from failure, as the run-level
    healing rule matching its failed step decides (no rule: it is not)."""
    remedy = heal(store, fault, lake, warehouse_url, run_level=True)
    return remedy is not None and remedy.outcome == "retry"


def backing_off(failed_at: float | None, now: float) -> bool:
    """The launcher's part of the lifecycle: a pipeline whose last run failed at `failed_at` (None: its last
    run did not fail) is not relaunched for FAILURE_BACKOFF_SECONDS; the healing sensor re-executes it, or an
    operator looks."""
    return failed_at is not None and failed_at + FAILURE_BACKOFF_SECONDS > now
