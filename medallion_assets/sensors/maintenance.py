"""Lake table maintenance on schedules built from the catalog: one Dagster schedule per distinct cron among
the enabled `table_maintenance` rows, running a job with one op per dataset that row covers. Each op claims
its target system's pool (control/steering/maintenance.py, `maintenance_pool`), runs off the pipelines' path
(a job of its own, not an asset materialization) and audits what it did.
"""

# No `from __future__ import annotations`: Dagster reads the op's parameter annotations as types.
import hashlib
import re
from collections import defaultdict

from dagster import (
    DefaultScheduleStatus,
    Failure,
    JobDefinition,
    OpDefinition,
    OpExecutionContext,
    ScheduleDefinition,
    job,
    op,
)

from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.control.steering.maintenance import maintained, maintenance_pool, run_maintenance
from medallion_assets.resources import CatalogResource, LakeResource, SparkResource


def maintenance_job_name(cron: str) -> str:
    """`lake_maintenance_<cron's fields>_<digest>`: readable, and distinct for distinct crons."""
    readable = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9]", "_", cron.replace("*", "x"))).strip("_")
    return f"lake_maintenance_{readable}_{hashlib.sha256(cron.encode()).hexdigest()[:6]}"


def _maintain_op(dataset: str, pool: str) -> OpDefinition:
    @op(name=f"maintain_{dataset}", pool=pool, description=f"Compact, expire and clean {dataset}'s table")
    def maintain(
        context: OpExecutionContext, spark: SparkResource, lake: LakeResource, catalog: CatalogResource
    ) -> None:
        resolved = lake.get_lake()
        (report,) = run_maintenance(
            spark.get_session(resolved), catalog.get_store(), resolved, [dataset], run_id=context.run_id
        )
        context.log.info(f"{dataset}: {report.status} {report.reported}")
        if report.status == "failed":
            raise Failure(f"maintenance of {dataset} failed: {report.error}")

    return maintain


def _maintenance_job(cron: str, ops: list[OpDefinition]) -> JobDefinition:
    @job(name=maintenance_job_name(cron), description=f"Lake table maintenance ({cron}, UTC)")
    def maintenance() -> None:
        for maintain in ops:
            maintain()

    return maintenance


def build_maintenance_schedules(snapshot: CatalogSnapshot) -> list[ScheduleDefinition]:
    """A schedule per distinct cron of the enabled maintenance rows, over the lake datasets they cover."""
    by_cron: dict[str, list[str]] = defaultdict(list)
    for dataset, policy in maintained(snapshot).items():
        by_cron[policy.schedule].append(dataset)
    schedules = []
    for cron, datasets in sorted(by_cron.items()):
        ops = [_maintain_op(dataset, maintenance_pool(snapshot, dataset)) for dataset in datasets]
        schedules.append(
            ScheduleDefinition(
                name=f"{maintenance_job_name(cron)}_schedule",
                cron_schedule=cron,
                job=_maintenance_job(cron, ops),
                execution_timezone="UTC",
                default_status=DefaultScheduleStatus.RUNNING,
                description=f"Maintains {', '.join(datasets)} as their table_maintenance rows say",
            )
        )
    return schedules
