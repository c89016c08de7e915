"""The control sensor: queued runs that touch work a kill switch disabled are cancelled on the next tick,
and the instance's concurrency pools follow the catalog's throttles.

Running runs need no help: every asset checks the switches when it starts and before it commits a load.
"""

from __future__ import annotations

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.flags import HALT_REASON_TAG, STATUS_TAG, disabled_reason, read_control_state
from medallion_assets.control.throttles import sync_pool_limits

# A queued run waits at most this long to be cancelled; slower ticks would delay that, faster ones flood the
# sensor's tick history (at 5 s, 17k ticks a day) for nothing, since running runs check the switches
# themselves.
DEFAULT_INTERVAL_SECONDS = 30


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


def build_control_sensor(
    snapshot: CatalogSnapshot,
    store: CatalogStore,
    translator: MedallionTranslator,
    interval_seconds: int = DEFAULT_INTERVAL_SECONDS,
) -> SensorDefinition:
    """The kill-switch and pool sensor, running by default, reading control_flags and throttles fresh on every
    tick."""

    @sensor(
        name="medallion_control",
        minimum_interval_seconds=interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Cancels queued runs that touch work disabled by a kill switch (control_flags), "
        "and sets concurrency pool limits from the throttles table.",
    )
    def medallion_control(context: SensorEvaluationContext) -> SkipReason:
        # The loaded definitions' stages claim the pools; their limits are the throttles rows as they are now.
        changed = sync_pool_limits(
            context.instance, snapshot.replaced({"throttles": store.read_table("throttles")})
        )
        for pool, limit in changed.items():
            context.log.info(f"pool {pool}: limit {limit}")
        cancelled = cancel_disabled_queued_runs(context, snapshot, store, translator)
        summary = f"cancelled {len(cancelled)} queued run(s)" if cancelled else "nothing to cancel"
        return SkipReason(summary + (f"; set {len(changed)} pool limit(s)" if changed else ""))

    return medallion_control
