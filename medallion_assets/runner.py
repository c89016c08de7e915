"""Materializing a pipeline through Dagster from the command line, and summarising what happened."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from dagster import AssetSelection, DagsterInstance, Definitions, materialize

from medallion_assets.assets.factory import target_key
from medallion_assets.catalog.snapshot import CatalogSnapshot


@dataclass
class AssetReport:
    key: str
    status: str
    rows: int | None = None
    checks: list[dict] = field(default_factory=list)


@dataclass
class PipelineReport:
    pipeline: str
    status: str
    assets: list[AssetReport]

    def as_dict(self) -> dict:
        return asdict(self)


def instance() -> DagsterInstance:
    """The instance under DAGSTER_HOME, so runs show in the UI; a throwaway one when it is unset."""
    return DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral()


def run_pipeline(defs: Definitions, snapshot: CatalogSnapshot, pipeline_id: str,
                 dagster_instance: DagsterInstance) -> PipelineReport:
    """Materialize every enabled stage of a pipeline in one in-process run."""
    stages = [s for s in snapshot.stages(pipeline_id) if s.enabled]
    keys = [target_key(snapshot.targets[s.target_id]) for s in stages]
    result = materialize(
        assets=list(defs.assets), resources=defs.resources, instance=dagster_instance,
        selection=AssetSelection.assets(*keys), raise_on_error=False, tags={"medallion/pipeline": pipeline_id},
        # The report below says what happened; Dagster's per-event debug log stays in the instance.
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
    )
    materialized = {e.asset_key: e.materialization.metadata for e in result.get_asset_materialization_events()}
    checks: dict = {}
    for evaluation in result.get_asset_check_evaluations():
        checks.setdefault(evaluation.asset_key, []).append(
            {"name": evaluation.check_name, "passed": evaluation.passed, "severity": evaluation.severity.value.lower()})
    failed_steps = {event.step_key for event in result.get_step_failure_events()}
    reports = []
    for key in keys:
        row_count = materialized.get(key, {}).get("dagster/row_count")
        # The op of an asset keyed [layer, dataset] is named layer__dataset; its step key is that name.
        if key.to_python_identifier() in failed_steps:
            status = "failed"
        else:
            status = "success" if key in materialized else "skipped"
        reports.append(AssetReport(key.to_user_string(), status, row_count.value if row_count else None,
                                   checks.get(key, [])))
    return PipelineReport(pipeline_id, "success" if result.success else "failed", reports)
