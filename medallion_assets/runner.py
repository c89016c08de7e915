"""Materializing a pipeline through Dagster from the command line, and summarising what happened.

Two paths, chosen by `route`: an instance whose runs go through the run queue (the queued run coordinator)
and whose dagster-daemon has sent a heartbeat lately gets the run submitted to that queue, tagged as the
launcher sensor tags its runs, so priority, the held-run limit and pools apply alike; the run executes in a
run worker of the daemon and this process follows it to the end, as long as the daemon keeps sending
heartbeats. Every other instance (a throwaway one without DAGSTER_HOME, one with no daemon running, Dagster's
defaults in an empty DAGSTER_HOME) runs it here, in process, as `dagster asset materialize` does.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from dagster import (
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    AssetSpec,
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    Definitions,
    MetadataValue,
    SourceAsset,
    materialize,
)

from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.config import daemon_silence_seconds
from medallion_assets.control.steering.flags import disabled_reason, read_control_state
from medallion_assets.control.steering.throttles import sync_pool_limits
from medallion_assets.dagster_compat import (
    IMPLICIT_ASSET_JOB_NAME,
    JobSubsetSelector,
    WorkspaceFileTarget,
    WorkspaceProcessContext,
)
from medallion_assets.instance import (
    DaemonGone,
    DeploymentError,
    QueuedRunCanceled,
    config_file,
    daemon_running,
    has_daemon,
    open_instance,
)
from medallion_assets.naming import PIPELINE_TAG
from medallion_assets.openlineage.emitter import emitter
from medallion_assets.openlineage.events import pipeline_run_event
from medallion_assets.sensors.launcher import Launcher, run_tags

# How often a followed run's status is read while it is queued or running.
FOLLOW_POLL_SECONDS = 1.0


@dataclass
class AssetReport:
    key: str
    status: str  # success | failed | halted (kill switch) | skipped (upstream did not materialize)
    rows: int | None = None  # rows written
    checks: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None  # why it failed, halted or was skipped
    rows_read: int | None = None
    rows_quarantined: int | None = None
    quarantine_reasons: dict[str, int] = field(default_factory=dict)  # the commonest, with their counts
    mode: str | None = None  # a silver or gold stage's: full, incremental or restatement
    why: str | None = None  # why that mode
    snapshot_id: int | None = None  # the lake table's version the stage published, its data version
    # The version the stage left as it was, nothing new having come; its checks are that version's verdicts.
    unchanged_since: int | None = None
    # Its wall time, and of it (see engine/timing.py) the time in Spark's jobs (unknown through Spark
    # Connect), in metadata commits (publishing the table, the ledger) and the rest.
    duration_sec: float | None = None
    spark_jobs_sec: float | None = None
    metadata_commits_sec: float | None = None
    other_sec: float | None = None


# The asset metadata of a stage's time, in AssetReport's order.
TIME_PARTS = ("duration_sec", "spark_jobs_sec", "metadata_commits_sec", "other_sec")


@dataclass
class PipelineReport:
    pipeline: str
    status: str  # success | success_with_warnings (a check failed, none blocked) | failed | halted
    assets: list[AssetReport]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def instance() -> DagsterInstance:
    """The instance under DAGSTER_HOME, so runs show in the UI; a throwaway one when it is unset."""
    return open_instance()


@dataclass(frozen=True)
class Route:
    """Where a run goes, and why, in the words the user is told."""

    queued: bool  # to the daemon's run queue; else in this process
    why: str


def route(dagster_instance: DagsterInstance) -> Route:
    """The daemon's queue when the instance queues runs and its daemon is alive; this process otherwise."""
    where = config_file()
    if where is None:
        return Route(
            False, "running in this process, on a throwaway Dagster instance (DAGSTER_HOME is unset)"
        )
    if not has_daemon(dagster_instance):
        return Route(
            False, f"running in this process: the Dagster instance configured in {where} has no run queue"
        )
    if not daemon_running(dagster_instance):
        return Route(
            False,
            f"running in this process: no dagster-daemon has sent a heartbeat for the Dagster instance "
            f"configured in {where} in the last {daemon_silence_seconds()} s",
        )
    return Route(True, f"queued for the dagster-daemon of the Dagster instance configured in {where}")


def run_pipeline(
    defs: Definitions,
    snapshot: CatalogSnapshot,
    store: CatalogStore,
    pipeline_id: str,
    dagster_instance: DagsterInstance,
    workspace: Path | None = None,
    tags: Mapping[str, str] | None = None,
    translator: MedallionTranslator | None = None,
) -> PipelineReport:
    """Materialize every stage of a pipeline that no kill switch disables, in one run: through the run queue
    when `workspace` is given (its code location loaded from it, as the daemon loads it; `route` says when),
    else in process. `tags` go on the run beside the launch's own (a full refresh's, engine/refresh.py).
    `translator` is the one `defs` were built with, which names their assets (the default's when None)."""
    translator = translator or MedallionTranslator()
    state = read_control_state(store)
    stages = snapshot.stages(pipeline_id)
    keys = {stage.target_id: translator.get_asset_key(snapshot.targets[stage.target_id]) for stage in stages}
    reasons = {keys[s.target_id]: disabled_reason(snapshot, state, s) for s in stages}
    datasets = {keys[s.target_id]: s.target_id for s in stages}
    runnable = {key: datasets[key] for key, reason in reasons.items() if reason is None}
    reports = {
        key: AssetReport(key.to_user_string(), "halted", reason=reason)
        for key, reason in reasons.items()
        if reason
    }
    for stage in stages:  # a stage halted before the run never starts a step, which would audit it
        if reason := reasons[keys[stage.target_id]]:
            store.record_audit(
                pipeline_id=pipeline_id,
                stage_name=stage.stage_name,
                dataset=stage.target_id,
                event="stage",
                status="halted",
                error=f"halted by a kill switch before start: {reason}",
            )
    if runnable:
        # The pools follow the catalog's throttles here too, not only on the control sensor's ticks: a
        # throwaway instance has no sensor, and a throttle must hold for every run.
        sync_pool_limits(dagster_instance, snapshot)
        started = datetime.now(UTC)
        if workspace is not None:
            run_id, success, events = _through_queue(
                workspace, snapshot, store, pipeline_id, runnable, dagster_instance, tags or {}, translator
            )
        else:
            run_id, success, events = _in_process(defs, pipeline_id, runnable, dagster_instance, tags or {})
        # The Dagster run is the root of every asset run's OpenLineage events; its id is known only now.
        emitter().emit(
            pipeline_run_event(pipeline_id, run_id, "START", when=started),
            pipeline_run_event(
                pipeline_id,
                run_id,
                "COMPLETE" if success else "FAIL",
                error=None if success else "a stage failed",
            ),
        )
        reports.update(_reports(store, run_id, runnable, events))
    ordered = [reports[key] for key in reasons]
    statuses = {report.status for report in ordered}
    status = "failed" if "failed" in statuses else "halted" if "halted" in statuses else "success"
    # A check that failed without blocking (warn severity, or an error check that does not block) leaves the
    # run a success that was not clean.
    warned = any(not c["passed"] for report in ordered for c in report.checks)
    return PipelineReport(
        pipeline_id, "success_with_warnings" if status == "success" and warned else status, ordered
    )


def _in_process(
    defs: Definitions,
    pipeline_id: str,
    datasets: dict[AssetKey, str],
    dagster_instance: DagsterInstance,
    tags: Mapping[str, str],
) -> tuple[str, bool, Sequence[DagsterEvent]]:
    """Run the assets `datasets` maps (asset key → target id) here; (run id, success, the run's events)."""
    result = materialize(
        # definitions.py gives Definitions assets only, never None or cacheable assets (which Definitions
        # admits and materialize does not).
        assets=list(cast(Iterable[AssetsDefinition | AssetSpec | SourceAsset], defs.assets)),
        resources=defs.resources,
        instance=dagster_instance,
        selection=AssetSelection.assets(*datasets),
        raise_on_error=False,
        tags={**tags, PIPELINE_TAG: pipeline_id},
        # The report below says what happened, a failure's reason included; Dagster's log of every event,
        # failures with their stack traces, stays in the instance.
        run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
    )
    return result.run_id, result.success, result.all_events


def _through_queue(
    workspace: Path,
    snapshot: CatalogSnapshot,
    store: CatalogStore,
    pipeline_id: str,
    datasets: dict[AssetKey, str],
    dagster_instance: DagsterInstance,
    tags: Mapping[str, str],
    translator: MedallionTranslator,
) -> tuple[str, bool, Sequence[DagsterEvent]]:
    """Submit a run of the assets `datasets` maps to the run queue, tagged as the launcher tags its runs, and
    follow it to its end, or until the daemon stops sending heartbeats (DaemonGone); (run id, success, the
    run's events). A run worker of the daemon emits its OpenLineage events, as for any queued run."""
    # The code server shares this process's stdout, which holds the report (and may be parsed as JSON).
    with WorkspaceProcessContext(
        dagster_instance, WorkspaceFileTarget(paths=[str(workspace)]), code_server_log_level="WARNING"
    ) as context:
        request = context.create_request_context()
        location, repository = _location_of(request, pipeline_id, datasets)
        run_id = str(uuid.uuid4())  # what Dagster's own run ids are
        decision = Launcher(
            dagster_instance, logging.getLogger(__name__), snapshot, store, translator
        ).request(pipeline_id, run_id)
        job = location.get_job(
            JobSubsetSelector(
                location_name=location.name,
                repository_name=repository.name,
                job_name=IMPLICIT_ASSET_JOB_NAME,
                op_selection=None,
                asset_selection=list(datasets),
            )
        )
        plan = location.get_execution_plan(
            job, {}, step_keys_to_execute=None, known_state=None, instance=dagster_instance
        )
        run = dagster_instance.create_run(
            job_name=IMPLICIT_ASSET_JOB_NAME,
            run_id=run_id,
            run_config={},
            resolved_op_selection=None,
            step_keys_to_execute=plan.execution_plan_snapshot.step_keys_to_execute,
            op_selection=None,
            status=None,
            root_run_id=None,
            parent_run_id=None,
            tags={**job.tags, **tags, **run_tags(decision)},
            job_snapshot=job.job_snapshot,
            execution_plan_snapshot=plan.execution_plan_snapshot,
            parent_job_snapshot=job.parent_job_snapshot,
            remote_job_origin=job.get_remote_origin(),
            job_code_origin=job.get_python_origin(),
            asset_selection=frozenset(datasets),
            asset_check_selection=None,
            asset_graph=repository.asset_graph,
        )
        dagster_instance.submit_run(run.run_id, request)
    while not (followed := _run_by_id(dagster_instance, run_id)).is_finished:
        if not daemon_running(dagster_instance):
            _abandon(dagster_instance, followed)
        time.sleep(FOLLOW_POLL_SECONDS)
    events = [
        record.dagster_event
        for record in dagster_instance.all_logs(run_id)
        if record.dagster_event is not None  # what record.is_dagster_event says
    ]
    return run_id, followed.status == DagsterRunStatus.SUCCESS, events


def _abandon(dagster_instance: DagsterInstance, run: DagsterRun) -> None:
    """Raise DaemonGone for a followed run whose daemon went silent. A run still queued would never start:
    it is canceled (QueuedRunCanceled). A started one is left to its run worker, which may still finish it;
    without the daemon's run monitoring nothing would mark it failed if the worker died, so this command stops
    following."""
    silent = (
        f"the dagster-daemon of the Dagster instance configured in {config_file()} has sent no heartbeat "
        f"in the last {daemon_silence_seconds()} s"
    )
    if run.status in (DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED):
        dagster_instance.report_run_canceled(run, message=f"{silent}, so nothing would start this run")
        raise QueuedRunCanceled(f"{silent}; canceled run {run.run_id}, which it had not started")
    raise DaemonGone(
        f"{silent}; left run {run.run_id} ({run.status.value.lower()}) to its run worker, which may still "
        "finish it: see it in the Dagster UI"
    )


def _run_by_id(dagster_instance: DagsterInstance, run_id: str) -> DagsterRun:
    run = dagster_instance.get_run_by_id(run_id)
    assert run is not None, f"run {run_id} was created, and runs are never deleted while followed"
    return run


class NoCodeLocation(DeploymentError):
    """No code location of the workspace defines a pipeline's assets."""


# `request` is Dagster's WorkspaceRequestContext, the result its CodeLocation and RemoteRepository: private
# Dagster names, which only dagster_compat may import, and it does not name them yet.
def _location_of(request: Any, pipeline_id: str, datasets: dict[AssetKey, str]) -> tuple[Any, Any]:
    """The code location, and its repository, that defines every asset of `datasets`."""
    for location in request.code_locations:
        for repository in location.get_repositories().values():
            if all(repository.asset_graph.has(key) for key in datasets):
                return location, repository
    errors = "; ".join(
        f"{name}: {error.message.strip()}"
        for name in request.code_location_names
        if (error := request.get_code_location_error(name))
    )
    raise NoCodeLocation(
        f"no code location of the workspace defines pipeline {pipeline_id}"
        + (f" (failed to load: {errors})" if errors else "")
    )


def _reports(
    store: CatalogStore, run_id: str, datasets: dict[AssetKey, str], events: Sequence[DagsterEvent]
) -> dict[AssetKey, AssetReport]:
    """What happened to each asset `datasets` maps (asset key → target id), from its run's events."""
    materialized = {
        e.asset_key: e.step_materialization_data.materialization.metadata
        for e in events
        if e.event_type == DagsterEventType.ASSET_MATERIALIZATION
    }
    checks: dict[AssetKey, list[dict[str, Any]]] = {}
    for event in events:
        if event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluation = event.asset_check_evaluation_data
            checks.setdefault(evaluation.asset_key, []).append(
                {
                    "name": evaluation.check_name,
                    "passed": evaluation.passed,
                    "severity": evaluation.severity.value.lower(),
                }
            )
    failures = {
        event.step_key: _failure_reason(event)
        for event in events
        if event.event_type == DagsterEventType.STEP_FAILURE
    }
    halted = {
        entry["dataset"]: entry["error"] for entry in store.audit_entries(run_id=run_id, status="halted")
    }
    reports: dict[AssetKey, AssetReport] = {}
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
        reports[key] = AssetReport(
            key.to_user_string(),
            status,
            _count(metadata, "rows_written"),
            checks.get(key, []),
            reason,
            _count(metadata, "rows_read"),
            _count(metadata, "rows_quarantined"),
            # The asset factory records them as a JSON object (JsonMetadataValue).
            cast(dict[str, int], metadata["quarantine_reasons"].value)
            if "quarantine_reasons" in metadata
            else {},
            _text(metadata, "mode"),
            _text(metadata, "why"),
            int(published) if (published := _text(metadata, "snapshot_id")) else None,
            int(kept) if (kept := _text(metadata, "unchanged_since")) else None,
            *(_seconds(metadata, part) for part in TIME_PARTS),
        )
    return reports


def _count(metadata: Mapping[str, MetadataValue], name: str) -> int | None:
    # The asset factory records these counts as integers (IntMetadataValue).
    return cast(int, metadata[name].value) if name in metadata else None


def _seconds(metadata: Mapping[str, MetadataValue], name: str) -> float | None:
    # The asset factory records times as floats (FloatMetadataValue).
    return cast(float, metadata[name].value) if name in metadata else None


def _text(metadata: Mapping[str, MetadataValue], name: str) -> str | None:
    # A stage's details that are strings are recorded as text (TextMetadataValue).
    return cast(str, metadata[name].value) if name in metadata else None


def _failure_reason(event: DagsterEvent) -> str:
    """What made a step fail, as the user can act on it: the exception under Dagster's own wrappers."""
    data = event.step_failure_data
    if data.user_failure_data is not None and data.user_failure_data.description:
        return data.user_failure_data.description
    error = data.error
    assert error is not None, "a step failure without a user failure description carries its error"
    while (
        error.cls_name and error.cls_name.startswith("Dagster") and (deeper := error.cause or error.context)
    ):
        error = deeper
    qualified, separator, message = error.message.strip().partition(": ")
    return (
        f"{error.cls_name}: {message}"
        if separator and qualified.endswith(error.cls_name or "")
        else qualified
    )
