"""The control sensor: queued runs that touch work a kill switch disabled are cancelled on the next tick,
the instance's concurrency pools follow the catalog's throttles, and catalog changes made by plain SQL are
planned: recorded with their category and impact in audit_log and on the assets, and a change that breaks a
warehouse contract held by its stage's kill switch. Between runs, it also says on each warehouse dataset's
asset whether its warehouse table holds the lake's current version (after a rollback it may not).

Running runs need no help: every asset checks the switches when it starts and before it commits a load.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetKey,
    AssetObservation,
    DagsterRunStatus,
    DefaultSensorStatus,
    MetadataValue,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from medallion_assets.assets.monitoring import WAREHOUSE_CHECK, warehouse_verdict
from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore, change_count
from medallion_assets.change.plan import HELD, WAIVED_EVENT, Plan, plan_since
from medallion_assets.control.steering.flags import (
    HALT_REASON_TAG,
    STATUS_TAG,
    disabled_reason,
    read_control_state,
    set_flag,
)
from medallion_assets.control.steering.throttles import sync_pool_limits


def cancel_disabled_queued_runs(
    context: SensorEvaluationContext,
    snapshot: CatalogSnapshot,
    store: CatalogStore,
    translator: MedallionTranslator,
) -> list[str]:
    """Cancel every queued run whose selection includes a disabled asset; returns the run ids cancelled."""
    state = read_control_state(store)
    disabled = {}
    for stage in snapshot.stages():
        reason = disabled_reason(snapshot, state, stage)
        if reason:
            disabled[translator.get_asset_key(snapshot.targets[stage.target_id])] = (stage, reason)
    if not disabled:
        return []
    cancelled = []
    for run in context.instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.QUEUED])):
        touched = [key for key in run.asset_selection or () if key in disabled]
        if not touched:
            continue
        stage, reason = disabled[touched[0]]
        # The run page shows why: its tags, and an event in its log ahead of Dagster's own "canceled".
        context.instance.add_run_tags(run.run_id, {STATUS_TAG: "cancelled", HALT_REASON_TAG: reason})
        context.instance.report_engine_event(f"cancelled by the medallion_control sensor: {reason}", run)
        context.instance.run_coordinator.cancel_run(run.run_id)
        store.record_audit(
            run_id=run.run_id,
            pipeline_id=stage.pipeline_id,
            stage_name=stage.stage_name,
            dataset=stage.target_id,
            event="cancel",
            status="cancelled",
            error=reason,
        )
        context.log.info(f"cancelled queued run {run.run_id}: {reason}")
        cancelled.append(run.run_id)
    return cancelled


def record_catalog_changes(
    context: SensorEvaluationContext, snapshot: CatalogSnapshot, store: CatalogStore, seen: dict[str, Any]
) -> tuple[list[AssetObservation], dict[str, Any]]:
    """Plan what changed in the catalog since the definitions read `snapshot`, when the catalog's change
    counter moved and the plan is not the one recorded last (`seen`, the sensor's cursor): an audit_log entry
    holding the plan, an observation on each changed dataset's asset (its category, why, what it rebuilds),
    and each stage whose change breaks a warehouse contract held by its kill switch, once per problem, unless
    `catalog load --allow-breaking` waived that problem. Returns the observations and the new cursor."""
    with store.engine.connect() as connection:
        counter = change_count(connection)
    if counter == seen.get("counter"):
        return [], seen
    made = plan_since(snapshot, store.snapshot(), None)
    recorded = made.as_dict()
    digest = hashlib.sha256(json.dumps(recorded, sort_keys=True, default=str).encode()).hexdigest()[:16]
    cursor = {**seen, "counter": counter, "digest": digest}
    if digest == seen.get("digest") or not made.rows:
        return [], cursor
    held = _hold_contract_breaks(context, snapshot, store, made, [str(p) for p in seen.get("held", [])])
    cursor["held"] = [*seen.get("held", []), *held]
    store.record_audit(
        event="catalog_change",
        status="held" if held else "planned",
        error="; ".join(held) or None,
        details=recorded,
    )
    rebuilt = {r.dataset: r for r in made.rebuilds}
    observations = [
        AssetObservation(
            AssetKey(change.asset_key),
            metadata={
                "catalog_change/category": change.category,
                "catalog_change/reasons": MetadataValue.md("\n".join(f"- {r}" for r in change.reasons)),
                "catalog_change/rebuild": MetadataValue.text(
                    f"{rebuilt[change.dataset].mode}: {rebuilt[change.dataset].why}"
                    if change.dataset in rebuilt
                    else "nothing rebuilt"
                ),
                "catalog_change/rebuilds": MetadataValue.text(", ".join(r.dataset for r in made.rebuilds)),
            },
        )
        for change in made.datasets
    ]
    context.log.info(f"catalog changed: {len(made.rows)} row(s), {len(made.rebuilds)} rebuild(s)")
    return observations, cursor


def _hold_contract_breaks(
    context: SensorEvaluationContext,
    snapshot: CatalogSnapshot,
    store: CatalogStore,
    made: Plan,
    held: list[str],
) -> list[str]:
    """Disable the stage of each contract problem not held before nor waived; returns the problems held."""
    waived = {
        str(problem)
        for entry in store.audit_entries(event=WAIVED_EVENT)
        for problem in entry["details"]["problems"]
    }
    newly = []
    for problem in made.refused(allow_breaking=False):
        if str(problem) in held or str(problem) in waived:
            continue
        stage = store.snapshot().stage_producing(problem.target_id) or snapshot.stage_producing(
            problem.target_id
        )
        if stage is None:
            continue
        set_flag(
            store,
            "stage",
            f"{stage.pipeline_id}.{stage.stage_name}",
            False,
            HELD + str(problem),
            "medallion_control",
        )
        context.log.warning(f"held {stage.pipeline_id}.{stage.stage_name}: {problem}")
        newly.append(str(problem))
    return newly


def judge_warehouses(
    context: SensorEvaluationContext,
    snapshot: CatalogSnapshot,
    store: CatalogStore,
    translator: MedallionTranslator,
) -> list[str]:
    """Between runs, the `warehouse_matches_lake` check of each warehouse dataset's asset: evaluated again
    whenever its verdict is not the one last recorded (a rollback moved the lake and its reload failed, or
    a reload or a run brought the warehouse back), so that the UI shows the check failed, naming both
    versions, exactly while they disagree. Returns the datasets whose check it evaluated."""
    verdicts = {}
    for stage in snapshot.stages():
        if snapshot.targets[stage.target_id].kind != "warehouse":
            continue
        verdict = warehouse_verdict(store, snapshot, stage.target_id)
        if verdict is not None:  # None: never loaded, nothing to disagree
            key = translator.get_asset_key(snapshot.targets[stage.target_id])
            verdicts[AssetCheckKey(key, WAREHOUSE_CHECK)] = (stage.target_id, *verdict)
    # The checks' last executions in one read of the event log, not one a dataset on every tick.
    last = context.instance.event_log_storage.get_latest_asset_check_execution_by_key(list(verdicts))
    judged = []
    for check_key, (dataset, agree, metadata) in verdicts.items():
        said = last[check_key].evaluation if check_key in last else None
        if not isinstance(said, AssetCheckEvaluation):  # none yet, or planned by a run
            run = context.instance.get_run_by_id(last[check_key].run_id) if check_key in last else None
            if run is not None and not run.is_finished:
                continue  # the run judges it when it has loaded
        elif said.passed == agree and said.metadata.get("message") == MetadataValue.text(metadata["message"]):
            continue
        context.instance.report_runless_asset_event(
            AssetCheckEvaluation(
                asset_key=check_key.asset_key, check_name=WAREHOUSE_CHECK, passed=agree, metadata=metadata
            )
        )
        context.log.info(f"{WAREHOUSE_CHECK} of {dataset}: {metadata['message']}")
        judged.append(dataset)
    return judged


def build_control_sensor(
    snapshot: CatalogSnapshot,
    store: CatalogStore,
    translator: MedallionTranslator,
    interval_seconds: int,
) -> SensorDefinition:
    """The kill-switch and pool sensor, running by default, reading control_flags and throttles fresh on every
    tick."""

    @sensor(
        name="medallion_control",
        minimum_interval_seconds=interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Cancels queued runs that touch work disabled by a kill switch (control_flags), "
        "sets concurrency pool limits from the throttles table, and plans catalog changes made by SQL "
        "(audit_log, asset observations), holding a stage whose change breaks a warehouse contract, "
        "and judges whether each warehouse table holds its lake's current version (warehouse_matches_lake).",
    )
    def medallion_control(context: SensorEvaluationContext) -> SensorResult:
        # The loaded definitions' stages claim the pools; their limits are the throttles rows as they are now.
        changed = sync_pool_limits(
            context.instance, snapshot.replaced({"throttles": store.read_table("throttles")})
        )
        for pool, limit in changed.items():
            context.log.info(f"pool {pool}: limit {limit}")
        observations, cursor = record_catalog_changes(
            context, snapshot, store, json.loads(context.cursor) if context.cursor else {}
        )
        cancelled = cancel_disabled_queued_runs(context, snapshot, store, translator)
        judged = judge_warehouses(context, snapshot, store, translator)
        summary = f"cancelled {len(cancelled)} queued run(s)" if cancelled else "nothing to cancel"
        if judged:
            summary += f"; warehouse_matches_lake judged again: {', '.join(judged)}"
        return SensorResult(
            skip_reason=summary + (f"; set {len(changed)} pool limit(s)" if changed else ""),
            cursor=json.dumps(cursor),
            asset_events=observations,
        )

    return medallion_control
