"""The built-in healing actions, each the answer to one known fault. `healing_actions` rows name them.

Each returns a Remedy: "retry" after it fixed what it could (the retry policy then decides when), or
"give_up" with the reason, which fails the step at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.control.healing.remedies import HealingContext, NoParams, Remedy, healing_action
from medallion_assets.control.steering.flags import set_flag
from medallion_assets.control.steering.rollback import current_version, previous_version, rollback
from medallion_assets.errors import CorruptSourceObject, SourceNotFound, SourceSchemaDrift, causes
from medallion_assets.paths import UnsafePath, path_under

if TYPE_CHECKING:
    from medallion_assets.storage.warehouse import Warehouse

E = TypeVar("E", bound=BaseException)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WaitParams(Params):
    deadline_sec: float = Field(default=600, gt=0, le=86_400, description="give up after waiting this long")
    first_wait_sec: float = Field(default=5, gt=0, le=3_600)
    max_wait_sec: float = Field(
        default=60, gt=0, le=3_600, description="longest single wait (backoff doubles)"
    )


def _wait_until(params: WaitParams, ready: Callable[[], str | None], what: str) -> Remedy:
    """Poll `ready()` with doubling waits until it holds or the deadline passes."""
    started, wait = time.monotonic(), params.first_wait_sec
    while True:
        problem = ready()
        waited = time.monotonic() - started
        if problem is None:
            return Remedy("retry", f"{what} after {waited:.1f} s")
        if waited + wait > params.deadline_sec:
            return Remedy(
                "give_up",
                f"still waiting for {what} after {waited:.1f} s "
                f"(deadline {params.deadline_sec:g} s): {problem}",
            )
        time.sleep(wait)
        wait = min(wait * 2, params.max_wait_sec)


def _find(error: BaseException | None, kind: type[E]) -> E | None:
    return next((cause for cause in causes(error) if isinstance(cause, kind)), None)


@healing_action("wait_for_upstream", WaitParams)
def wait_for_upstream(context: HealingContext[WaitParams]) -> Remedy:
    """Upstream data not there yet: wait, with doubling intervals up to a deadline, for the source's
    objects."""
    stage = context.fault.stage
    source = context.store.snapshot().sources.get(stage.input_id)
    if source is None:
        return Remedy("give_up", f"{stage.input_id} is not a raw source; nothing to wait for")

    from medallion_assets.storage.objects import any_object  # boto3 only when an action runs, as _warehouse

    def objects_missing() -> str | None:
        try:
            any_object(source.s3_path, source.source_id)
        except SourceNotFound as error:
            return str(error)
        return None

    return _wait_until(context.params, objects_missing, f"objects under {source.s3_path}")


@healing_action("quarantine_object")
def quarantine_object(context: HealingContext[NoParams]) -> Remedy:
    """A corrupt or unreadable source object: copied to quarantine and bookmarked, so ingestion skips it.

    The producer's file is left where it is: Medallion never deletes a source's data.
    """
    from medallion_assets.storage.objects import list_objects, read_bytes, write_bytes

    corrupt = _find(context.fault.error, CorruptSourceObject)
    if corrupt is None:
        return Remedy("give_up", "the error names no unreadable object")
    (info,) = list_objects(corrupt.url, corrupt.source_id)
    parts = urlsplit(corrupt.url)
    try:
        kept = path_under(
            context.lake.quarantine_path(context.fault.stage.target_id),
            "objects",
            parts.netloc,
            parts.path.removeprefix("/"),
        )
    except UnsafePath as error:
        return Remedy("give_up", f"{corrupt.url} cannot be kept in quarantine: {error}")
    write_bytes(kept, read_bytes(corrupt.url))
    context.store.record_bookmarks(corrupt.source_id, [(info.url, info.etag, info.size)], "quarantined")
    return Remedy("retry", f"moved {corrupt.url} to {kept} ({corrupt.reason})")


class ReconnectParams(WaitParams):
    deadline_sec: float = Field(default=120, gt=0, le=86_400)
    first_wait_sec: float = Field(default=1, gt=0, le=3_600)


def _warehouse(url: str) -> Warehouse:
    """A warehouse connection. Its drivers are imported only when an action connects: checking healing rules
    at catalog load imports this module, and `medallion catalog validate` loads no warehouse driver."""
    from medallion_assets.storage.warehouse import warehouse_from_url

    return warehouse_from_url(url)


@healing_action("reconnect_warehouse", ReconnectParams)
def reconnect_warehouse(context: HealingContext[ReconnectParams]) -> Remedy:
    """A lost warehouse connection: wait until the warehouse answers again; the load is then redone whole.

    A load is one transaction, so the lost one left nothing behind and the retry cannot duplicate rows.
    """
    from medallion_assets.storage.warehouse import WarehouseError  # imported when used, as in _warehouse

    def unreachable() -> str | None:
        try:
            with _warehouse(context.warehouse_url) as warehouse:
                warehouse.query("SELECT 1")
        except WarehouseError as error:
            return str(error)
        return None

    return _wait_until(context.params, unreachable, "the warehouse to answer")


@healing_action("recreate_staging")
def recreate_staging(context: HealingContext[NoParams]) -> Remedy:
    """A staging table left behind by a crashed load: dropped, so the retried load creates it afresh."""
    targets = context.store.snapshot().targets
    target = targets[context.fault.stage.target_id]
    if target.kind != "warehouse":
        return Remedy("give_up", f"{target.target_id} is not loaded into a warehouse")
    assert target.location is not None, "the Target model requires a warehouse target's table"
    with _warehouse(context.warehouse_url) as warehouse:
        dropped = warehouse.drop_staging(
            target.location, [t.location for t in targets.values() if t.location]
        )
    return Remedy("retry", f"dropped leftover staging table {dropped}")


def _pass_through_targets(snapshot: CatalogSnapshot, dataset: str) -> list[str]:
    """Targets downstream of `dataset` that copy its columns (no SQL), so a new source column flows into
    them."""
    found: list[str] = []
    frontier = [dataset]
    while frontier:
        current = frontier.pop()
        for stage in snapshot.stages():
            if stage.input_id == current and not stage.transform_sql and not stage.inputs:
                found.append(stage.target_id)
                frontier.append(stage.target_id)
    return found


@healing_action("evolve_schema")
def evolve_schema(context: HealingContext[NoParams]) -> Remedy:
    """Schema drift: new source fields are declared in the catalog and flow, nullable, to silver and the
    warehouse.

    They are added to the source, to every target that copies its columns (a stage with no SQL), and to a
    warehouse table at its next load. Breaking changes (a declared field gone) are never healed.
    """
    drift = _find(context.fault.error, SourceSchemaDrift)
    if drift is None:
        # The warehouse table lacks columns the batch has: the retried load adds them.
        return Remedy(
            "retry",
            "the next load adds the new columns to the warehouse table",
            {"evolve_warehouse_schema": True},
        )
    snapshot = context.store.snapshot()
    source = snapshot.sources[drift.source_id]
    sources = [source.model_copy(update={"columns": {**source.columns, **drift.new_columns}})]
    targets = []
    bronze = [stage.target_id for stage in snapshot.stages() if stage.input_id == source.source_id]
    for target_id in {t for b in bronze for t in _pass_through_targets(snapshot, b)}:
        target = snapshot.targets[target_id]
        if target.columns is not None:
            added = {
                name: type_name for name, type_name in drift.new_columns.items() if name not in target.columns
            }
            targets.append(target.model_copy(update={"columns": {**target.columns, **added}}))
    context.store.upsert({"sources": sources, "targets": targets})
    evolved = ", ".join([source.source_id, *sorted(t.target_id for t in targets)])
    return Remedy("retry", f"declared {', '.join(drift.new_columns)} in {evolved}")


class BatchParams(Params):
    partitions: int = Field(
        default=16, ge=2, le=10_000, description="partitions of the first retry; doubles after"
    )


@healing_action("load_in_batches", BatchParams)
def load_in_batches(context: HealingContext[BatchParams]) -> Remedy:
    """Out of memory, or a result too large for the driver: the load is retried partition by partition."""
    partitions = context.params.partitions * 2 ** (context.fault.attempt - 1)
    return Remedy("retry", f"the next load streams {partitions} partitions", {"load_partitions": partitions})


class BreakerParams(Params):
    failures: int = Field(
        default=3, ge=1, le=1_000, description="failed attempts within the window that trip it"
    )
    window_minutes: float = Field(default=60, gt=0, le=10_080)


@healing_action("trip_circuit_breaker", BreakerParams)
def trip_circuit_breaker(context: HealingContext[BreakerParams]) -> Remedy:
    """Circuit breaker: after too many failures, the pipeline's kill switch is set so it stops hammering its
    source."""
    stage, params = context.fault.stage, context.params
    since = datetime.now(UTC) - timedelta(minutes=params.window_minutes)
    failures = [
        e
        for e in context.store.audit_entries(pipeline_id=stage.pipeline_id, event="stage", status="failed")
        if _aware(e["created_at"]) >= since
    ]
    if len(failures) < params.failures:
        return Remedy(
            "retry", f"{len(failures)} of {params.failures} failures in {params.window_minutes:g} min"
        )
    reason = (
        f"circuit breaker {context.rule.healing_id}: "
        f"{len(failures)} failures in {params.window_minutes:g} min, "
        f"last {context.fault.message}"
    )
    set_flag(context.store, "pipeline", stage.pipeline_id, False, reason, who="medallion-healing")
    return Remedy("give_up", f"pipeline {stage.pipeline_id} disabled: {reason}")


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class RerunParams(Params):
    max_reruns: int = Field(default=1, ge=1, le=10)


@healing_action("rerun_from_failure", RerunParams, run_level=True)
def rerun_from_failure(context: HealingContext[RerunParams]) -> Remedy:
    """A failed run is re-executed from its failed assets by the healing sensor, up to max_reruns times."""
    if context.fault.attempt > context.params.max_reruns:
        return Remedy("give_up", f"{context.params.max_reruns} rerun(s) spent")
    return Remedy("retry", f"rerun {context.fault.attempt} of {context.params.max_reruns}")


class RollbackParams(Params):
    cascade: bool = Field(
        default=False, description="roll back too the downstream datasets built on the version rolled away"
    )


@healing_action("rollback_dataset", RollbackParams)
def rollback_dataset(context: HealingContext[RollbackParams]) -> Remedy:
    """A layer whose checks fail: its lake table is put back to its previous published version (audited).

    Only a version the failing run committed is rolled away (bronze appends before its checks run); a version
    kept off `main` by write-audit-publish needs no rollback. The step still fails: the rolled-away version
    stays in the table's history for inspection, and a rerun builds afresh."""
    dataset, run_id = context.fault.stage.target_id, context.fault.run_id
    current = current_version(context.store, context.lake, dataset)
    if current is not None and run_id is not None and current.get("run_id") != run_id:
        return Remedy(
            "give_up",
            f"{dataset}: run {run_id} published no version (its current one, snapshot "
            f"{current['snapshot_id']}, is run {current.get('run_id')}'s); nothing to roll back",
        )
    previous = previous_version(context.store, context.lake, dataset)
    if previous is None:
        return Remedy("give_up", f"{dataset} has no earlier version to roll back to")
    moved = rollback(
        context.store,
        context.lake,
        dataset,
        str(previous),
        cascade=context.params.cascade,
        by=f"healing rule {context.rule.healing_id}",
        run_id=run_id,
        warehouse_url=context.warehouse_url,
    )
    done = ", ".join(f"{m.dataset} {m.from_snapshot} → {m.to_snapshot}" for m in moved)
    return Remedy("give_up", f"rolled back {done}")
