"""One catalog stage on a Spark cluster that Dagster reaches through Dagster Pipes, e.g.

    spark-submit medallion_assets/pipes_stage.py      (extras: {"pipeline": ..., "stage": ...})

The same file is the entry point everywhere: EMR Serverless runs it through dagster-aws's
`PipesEMRServerlessClient`, a local `spark-submit` through Dagster's `PipesSubprocessClient`, and with
`SPARK_REMOTE=sc://…` in its environment it drives Databricks or EMR through Spark Connect. Spark comes from
whatever launched it (`SparkSession.builder.getOrCreate()`); the catalog, lake and warehouse from the
`MEDALLION_*` variables, as everywhere. Kill switches hold here too: a disabled stage exits with the reason.
The run's result goes back to Dagster as the asset's materialization; a failed blocking rule fails it.
"""

from __future__ import annotations

from dagster_pipes import PipesContext, open_dagster_pipes
from pyspark.sql import SparkSession

from medallion_assets import config
from medallion_assets.catalog.models import Stage
from medallion_assets.catalog.store import open_catalog
from medallion_assets.control.steering.flags import disabled_reason, read_control_state
from medallion_assets.control.steering.throttles import CatalogThrottles
from medallion_assets.engine.spark import SESSION_CONF
from medallion_assets.engine.stage import StageRunner
from medallion_assets.errors import StageHalted
from medallion_assets.recovery.routes import CatalogRoutes
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.warehouse import warehouse_from_url


def run(pipes: PipesContext) -> None:
    pipeline_id, stage_name = pipes.get_extra("pipeline"), pipes.get_extra("stage")
    store = open_catalog()
    snapshot = store.snapshot()
    stage = next((s for s in snapshot.stages(pipeline_id) if s.stage_name == stage_name), None)
    if stage is None:
        raise LookupError(f"no stage {stage_name!r} in pipeline {pipeline_id!r} of the catalog")

    def halt_reason(current: Stage) -> str | None:
        return disabled_reason(snapshot, read_control_state(store), current)

    if reason := halt_reason(stage):
        raise StageHalted(reason)
    builder = SparkSession.builder.appName(f"medallion {pipeline_id}.{stage_name}")
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    target = snapshot.targets[stage.target_id]
    warehouse = warehouse_from_url(config.warehouse_url()) if target.kind == "warehouse" else None
    try:
        runner = StageRunner(
            builder.getOrCreate(),
            snapshot,
            store,
            Lake.resolve(),
            warehouse,
            halt_reason,
            throttle=CatalogThrottles(store),
            recovery=CatalogRoutes(store, snapshot),
        )
        outcome = runner.run_stage(stage)
    finally:
        if warehouse is not None:
            warehouse.close()
    if error := outcome.blocking_error():
        raise RuntimeError(error)
    pipes.report_asset_materialization(
        metadata={
            "dagster/row_count": outcome.rows_written,
            "rows_read": outcome.rows_read,
            "rows_quarantined": outcome.rows_quarantined,
            "table": outcome.table,
            "snapshot_id": str(outcome.snapshot_id),
        }
    )


if __name__ == "__main__":
    with open_dagster_pipes() as context:
        run(context)
