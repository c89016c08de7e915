"""Materializing a pipeline through Dagster from the command line, and summarising what happened."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from dataclasses import asdict, dataclass, field

from dagster import AssetSelection, DagsterInstance, Definitions, materialize

from medallion_assets.assets.factory import target_key
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.flags import disabled_reason, read_control_state
from medallion_assets.control.throttles import sync_pool_limits
from medallion_assets.lineage.openlineage import emitter, pipeline_run_event


@dataclass
class AssetReport:
    key: str
    status: str  # success | failed | halted (kill switch) | skipped (upstream did not materialize)
    rows: int | None = None  # rows written
    checks: list[dict] = field(default_factory=list)
    reason: str | None = None  # why it failed, halted or was skipped
    rows_read: int | None = None
    rows_quarantined: int | None = None


@dataclass
class PipelineReport:
    pipeline: str
    status: str  # success | failed | halted
    assets: list[AssetReport]

    def as_dict(self) -> dict:
        return asdict(self)


def instance() -> DagsterInstance:
    """The instance under DAGSTER_HOME, so runs show in the UI; a throwaway one when it is unset."""
    return DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral()


def run_pipeline(defs: Definitions, snapshot: CatalogSnapshot, store: CatalogStore, pipeline_id: str,
                 dagster_instance: DagsterInstance) -> PipelineReport:
    """Materialize every stage of a pipeline that no kill switch disables, in one in-process run."""
    state = read_control_state(store)
    stages = snapshot.stages(pipeline_id)
    reasons = {target_key(snapshot.targets[s.target_id]): disabled_reason(snapshot, state, s) for s in stages}
    datasets = {target_key(snapshot.targets[s.target_id]): s.target_id for s in stages}
    runnable = {key: datasets[key] for key, reason in reasons.items() if reason is None}
    reports = {key: AssetReport(key.to_user_string(), "halted", reason=reason)
               for key, reason in reasons.items() if reason}
    if runnable:
        # The pools follow the catalog's throttles here too, not only on the control sensor's ticks: a throwaway
        # instance has no sensor, and a throttle must hold for every run.
        sync_pool_limits(dagster_instance, snapshot)
        reports.update(_materialize(defs, store, pipeline_id, runnable, dagster_instance))
    ordered = [reports[key] for key in reasons]
    statuses = {report.status for report in ordered}
    status = "failed" if "failed" in statuses else "halted" if "halted" in statuses else "success"
    return PipelineReport(pipeline_id, status, ordered)


def _materialize(defs: Definitions, store: CatalogStore, pipeline_id: str, datasets: dict,
                 dagster_instance: DagsterInstance) -> dict:
    """Run the assets `datasets` maps (asset key → target id) and report each one."""
    started = datetime.now(timezone.utc)
    result = materialize(
        assets=list(defs.assets), resources=defs.resources, instance=dagster_instance,
        selection=AssetSelection.assets(*datasets), raise_on_error=False, tags={"medallion/pipeline": pipeline_id},
        # The report below says what happened; Dagster's per-event debug log stays in the instance.
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
    )
    # The Dagster run is the root of every asset run's OpenLineage events; its id is known only now.
    emitter().emit(pipeline_run_event(pipeline_id, result.run_id, "START", when=started),
                   pipeline_run_event(pipeline_id, result.run_id, "COMPLETE" if result.success else "FAIL",
                                      error=None if result.success else "a stage failed"))
    materialized = {e.asset_key: e.materialization.metadata for e in result.get_asset_materialization_events()}
    checks: dict = {}
    for evaluation in result.get_asset_check_evaluations():
        checks.setdefault(evaluation.asset_key, []).append(
            {"name": evaluation.check_name, "passed": evaluation.passed, "severity": evaluation.severity.value.lower()})
    failures = {event.step_key: _failure_reason(event) for event in result.get_step_failure_events()}
    halted = {entry["dataset"]: entry["error"] for entry in store.audit_entries(run_id=result.run_id, status="halted")}
    reports = {}
    for key, dataset in datasets.items():
        metadata = materialized.get(key, {})
        # The op of an asset keyed [layer, dataset] is named layer__dataset; its step key is that name.
        step = key.to_python_identifier()
        if dataset in halted:  # a halted step fails too, so the UI does not show it as a success
            status, reason = "halted", halted[dataset]
        elif step in failures:
            status, reason = "failed", failures[step]
        elif key in materialized:
            status, reason = "success", None
        else:
            status, reason = "skipped", "an upstream asset did not materialize in this run"
        reports[key] = AssetReport(key.to_user_string(), status, _count(metadata, "rows_written"),
                                   checks.get(key, []), reason, _count(metadata, "rows_read"),
                                   _count(metadata, "rows_quarantined"))
    return reports


def _count(metadata: dict, name: str) -> int | None:
    return metadata[name].value if name in metadata else None


def _failure_reason(event) -> str:
    """What made a step fail, as the user can act on it: the exception under Dagster's own wrappers."""
    data = event.step_failure_data
    if data.user_failure_data is not None and data.user_failure_data.description:
        return data.user_failure_data.description
    error = data.error
    while error.cls_name and error.cls_name.startswith("Dagster") and (error.cause or error.context):
        error = error.cause or error.context
    qualified, separator, message = error.message.strip().partition(": ")
    return f"{error.cls_name}: {message}" if separator and qualified.endswith(error.cls_name or "") else qualified
