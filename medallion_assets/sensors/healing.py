"""The healing sensor: a failed run whose failure matches a run-level healing rule is re-executed from
failure.

It is the run-level part of the failure lifecycle (control/healing/failures.py, which says why this is not
Dagster's own run retry or run failure sensor).

Step-level healing happens inside the failed step (control/healing/rules.py). What is left for this sensor is
a run that failed for good, where a rule says a new run should try again (`rerun_from_failure`): it requests a
run of the assets the failed run did not materialize, tagged with the run it re-executes. It never touches a
run Dagster itself will retry (`dagster/will_retry`), so no failure is retried twice.

The rules are read fresh on every tick and checked as the catalog loader checks them: a rule written by plain
SQL that names an unknown action fails the tick. A failed tick is recorded in the audit log, then raised, so
Dagster shows it as a failed tick in the UI: the sensor is itself monitored.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    DefaultSensorStatus,
    EventLogRecord,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.models import HealingAction, Stage
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.healing.failures import reexecution
from medallion_assets.control.healing.remedies import Fault
from medallion_assets.control.healing.rules import rule_problems
from medallion_assets.control.steering.flags import HALTED_TAGS, STATUS_TAG
from medallion_assets.dagster_compat import IMPLICIT_ASSET_JOB_NAME, SerializableErrorInfo
from medallion_assets.naming import PIPELINE_TAG
from medallion_assets.storage.lake.root import Lake

# On its first tick the sensor looks this far back; afterwards its cursor says where it stopped.
FIRST_LOOKBACK = timedelta(hours=1)
RERUN_OF, RERUN_NUMBER = "medallion/rerun_of", "medallion/rerun"


class UnusableHealingRules(ValueError):
    """healing_actions rows that the loader would have refused, written around it (plain SQL)."""


def _error_fault(error: SerializableErrorInfo, stage: Stage, layer: str, attempt: int, run_id: str) -> Fault:
    """A Fault from a failure recorded in the event log: class names and messages along its cause chain."""
    codes: set[str | None] = set()
    messages: list[str] = []
    cause: SerializableErrorInfo | None = error
    while cause is not None:
        codes.add(cause.cls_name)
        messages.append(cause.message.strip())
        cause = cause.cause or cause.context
    named = frozenset(code for code in codes if code is not None)
    return Fault(stage, layer, attempt, named, " | ".join(messages), run_id)


def failed_steps(instance: DagsterInstance, run: DagsterRun) -> list[tuple[str, SerializableErrorInfo]]:
    return [
        _step_failure(record)
        for record in instance.get_records_for_run(run.run_id, of_type=DagsterEventType.STEP_FAILURE).records
    ]


def _step_failure(record: EventLogRecord) -> tuple[str, SerializableErrorInfo]:
    event = record.event_log_entry.dagster_event
    # Dagster types these optional for events in general; a step failure always names its step, and every
    # place Dagster records one gives it the error.
    assert event is not None and event.step_key is not None
    error = event.step_failure_data.error
    assert error is not None
    return event.step_key, error


def _asset_key(record: EventLogRecord) -> AssetKey:
    event = record.event_log_entry.dagster_event
    # Optional for events in general; planned and done materializations always name their asset.
    assert event is not None and event.asset_key is not None
    return event.asset_key


def unmaterialized(instance: DagsterInstance, run: DagsterRun) -> list[AssetKey]:
    """The assets the run planned but did not materialize: the failed ones and those skipped after them."""

    def keys(event_type: DagsterEventType) -> set[AssetKey]:
        return {
            _asset_key(record)
            for record in instance.get_records_for_run(run.run_id, of_type=event_type).records
        }

    planned = keys(DagsterEventType.ASSET_MATERIALIZATION_PLANNED) - keys(
        DagsterEventType.ASSET_MATERIALIZATION
    )
    return sorted(planned, key=lambda key: tuple(key.path))


def rerun_requests(
    instance: DagsterInstance,
    snapshot: CatalogSnapshot,
    store: CatalogStore,
    runs: list[DagsterRun],
    lake: Lake,
    warehouse_url: str,
    translator: MedallionTranslator,
) -> list[RunRequest]:
    """A re-execution request for every failed run a run-level rule heals; every decision audited."""
    problems = [
        f"{rule.healing_id}: {problem}"
        # read_table types its rows as the base model; this table's rows are HealingAction.
        for rule in cast(list[HealingAction], store.read_table("healing_actions"))
        if rule.enabled
        for problem in rule_problems(rule)
    ]
    if problems:
        raise UnusableHealingRules("healing_actions rows the loader would refuse: " + "; ".join(problems))
    # A stage's step is named after its asset key (assets/factory.py).
    stages = {
        translator.get_asset_key(snapshot.targets[s.target_id]).to_python_identifier(): s
        for s in snapshot.stages()
    }
    requests = []
    for run in runs:
        if run.tags.get("dagster/will_retry") == "true":
            continue  # Dagster's own run retry has it
        if run.tags.get(STATUS_TAG) == HALTED_TAGS[STATUS_TAG]:
            continue  # a kill switch stopped it: nothing to heal
        attempt = int(run.tags.get(RERUN_NUMBER, "0")) + 1
        for step_key, error in failed_steps(instance, run):
            stage = stages.get(step_key)
            if stage is None:
                continue
            fault = _error_fault(error, stage, snapshot.targets[stage.target_id].layer, attempt, run.run_id)
            if reexecution(store, fault, lake, warehouse_url):
                tags = {
                    RERUN_OF: run.tags.get(RERUN_OF, run.run_id),
                    RERUN_NUMBER: str(attempt),
                    PIPELINE_TAG: stage.pipeline_id,
                }
                requests.append(
                    RunRequest(
                        run_key=f"rerun-{run.run_id}",
                        asset_selection=unmaterialized(instance, run),
                        tags=tags,
                    )
                )
                break
    return requests


def build_healing_sensor(
    snapshot: CatalogSnapshot,
    store: CatalogStore,
    lake: Lake,
    warehouse_url: str,
    translator: MedallionTranslator,
    interval_seconds: int,
) -> SensorDefinition:
    @sensor(
        name="medallion_healing",
        minimum_interval_seconds=interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        job_name=IMPLICIT_ASSET_JOB_NAME,
        description="Re-executes failed runs from failure when a run-level healing rule matches "
        "(healing_actions, read fresh every tick).",
    )
    def medallion_healing(context: SensorEvaluationContext) -> list[RunRequest] | SkipReason:
        since = (
            datetime.fromtimestamp(float(context.cursor), UTC)
            if context.cursor
            else datetime.now(UTC) - FIRST_LOOKBACK
        )
        try:
            records = context.instance.get_run_records(
                RunsFilter(statuses=[DagsterRunStatus.FAILURE], updated_after=since)
            )
            runs = [record.dagster_run for record in records]
            requests = rerun_requests(
                context.instance, snapshot, store, runs, lake, warehouse_url, translator
            )
        except Exception as error:
            store.record_audit(
                event="healing_sensor", status="failed", error=f"{type(error).__name__}: {error}"
            )
            raise
        if records:
            context.update_cursor(str(max(record.update_timestamp.timestamp() for record in records)))
        return requests or SkipReason(f"{len(runs)} failed run(s) seen; none to re-execute")

    return medallion_healing
