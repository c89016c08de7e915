"""The launcher: every tick, decide which due pipelines to launch, at which priority, under their profile.

A pipeline is due
  - by its `schedule` (cron, UTC): a tick has passed since its last launch;
  - by new data: its sources hold objects the ingestion bookmarks do not know;
  - by gold staleness: its gold is older than the profile's `max_gold_age_minutes` (or was never made),
    it was not launched since, and its raw sources hold objects (a run over an empty source would only
    fail its bronze; the SLA monitor reports the stale gold).
A pipeline with a run queued or in progress is not due again until that run ends, nor for a while after its
last run failed (`control.healing.failures.backing_off`). What to launch, and each run's `dagster/priority`,
comes from `control.steering.scheduling.plan_tick` (its docstring is the policy);
the catalog's profiles, settings, throttles and pipelines rows are read fresh on every tick, so a row
update (or `medallion profile set`) changes the next tick. Queued runs whose profile or held state changed
are cancelled and requeued with new tags: Dagster reads `dagster/priority` at dequeue time, and the
`medallion/held=true` tag has a run limit of 0 in dagster.yaml, so held runs stay queued.

Every launch and requeue is recorded in audit_log with its reason, score, priority and throttle state.
The cursor remembers since when each waiting pipeline is due, so its staleness keeps growing while it waits.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRecord,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.models import Source
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.healing.failures import backing_off
from medallion_assets.control.steering.flags import disabled_reason, read_control_state
from medallion_assets.control.steering.scheduling import (
    Decision,
    QueuedRun,
    SchedulingPolicy,
    Work,
    pipeline_pools,
    plan_tick,
)
from medallion_assets.dagster_compat import IMPLICIT_ASSET_JOB_NAME, get_latest_completed_cron_tick
from medallion_assets.errors import SourceNotFound
from medallion_assets.naming import PIPELINE_TAG
from medallion_assets.storage.objects import ObjectInfo, list_objects

PRIORITY_TAG = "dagster/priority"
PROFILE_TAG = "medallion/profile"
HELD_TAG = "medallion/held"
DUE_TAG = "medallion/due_since"
# The runtime controls a launch decision reads, fresh every tick (see catalog/store.py for the rule).
LAUNCH_CONTROLS = ("pipelines", "profiles", "pipeline_profiles", "profile_settings", "throttles")
IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]


def run_tags(decision: Decision) -> dict[str, str]:
    return {
        PRIORITY_TAG: str(decision.priority),
        PIPELINE_TAG: decision.work.pipeline_id,
        PROFILE_TAG: decision.profile,
        HELD_TAG: str(decision.held).lower(),
        DUE_TAG: datetime.fromtimestamp(decision.work.due_since, UTC).isoformat(timespec="seconds"),
    }


def _due_since(tag: str | None, default: float) -> float:
    """The tag is an ISO 8601 UTC time, so the UI shows it readably."""
    return datetime.fromisoformat(tag).timestamp() if tag else default


class Launcher:
    """One tick's view: the loaded definitions' structure (`snapshot`), under the runtime controls it launches
    by read now (`fresh`)."""

    def __init__(
        self,
        instance: DagsterInstance,
        log: logging.Logger,
        snapshot: CatalogSnapshot,
        store: CatalogStore,
        translator: MedallionTranslator,
    ):
        self.instance, self.log, self.snapshot, self.store = instance, log, snapshot, store
        self.translator = translator
        self.now = time.time()
        self.fresh = snapshot.replaced({table: store.read_table(table) for table in LAUNCH_CONTROLS})
        self.policy = SchedulingPolicy.from_snapshot(self.fresh)
        self.control = read_control_state(store)
        self._listings: dict[str, list[ObjectInfo]] = {}

    def work(self, pipeline_id: str, due_since: float, due_reason: str = "") -> Work | None:
        pipeline = self.fresh.pipelines.get(pipeline_id)
        if pipeline is None or pipeline_id not in self.snapshot.pipelines:
            return None
        return Work(
            pipeline_id,
            pipeline.criticality,
            pipeline.expected_cost,
            pipeline_pools(self.snapshot, pipeline_id),
            due_since,
            due_reason,
        )

    def runnable_assets(self, pipeline_id: str) -> list[AssetKey]:
        """Asset keys of the pipeline's stages that no kill switch disables."""
        return [
            self.translator.get_asset_key(self.snapshot.targets[stage.target_id])
            for stage in self.snapshot.stages(pipeline_id)
            if disabled_reason(self.snapshot, self.control, stage) is None
        ]

    def last_run(self, pipeline_id: str) -> RunRecord | None:
        records = self.instance.get_run_records(RunsFilter(tags={PIPELINE_TAG: pipeline_id}), limit=1)
        return records[0] if records else None

    def due(self, pipeline_id: str) -> tuple[float, str] | None:
        """(due since, why) by schedule, gold staleness or new data; None when the pipeline is not due."""
        pipeline = self.fresh.pipelines[pipeline_id]
        last_run = self.last_run(pipeline_id)
        failed_at = (
            (last_run.end_time or self.now)
            if last_run is not None and last_run.dagster_run.status == DagsterRunStatus.FAILURE
            else None
        )
        if backing_off(failed_at, self.now):
            return None
        last = last_run.create_timestamp.timestamp() if last_run else None
        if pipeline.schedule:
            tick = get_latest_completed_cron_tick(
                pipeline.schedule, datetime.fromtimestamp(self.now, UTC), "UTC"
            ).timestamp()
            if last is None or tick > last:
                return tick, f"schedule {pipeline.schedule}"
        max_age = self.policy.settings[self.policy.profile_of(pipeline_id)]["max_gold_age_minutes"] * 60
        sources = [
            source
            for stage in self.snapshot.stages(pipeline_id)
            if (source := self.snapshot.sources.get(stage.input_id)) is not None
        ]
        for stage in self.snapshot.stages(pipeline_id):
            target = self.snapshot.targets[stage.target_id]
            if target.layer != "gold":
                continue
            made = self.instance.get_latest_materialization_event(self.translator.get_asset_key(target))
            stale_since = made.timestamp + max_age if made else 0.0
            stale = stale_since <= self.now and (last is None or last < stale_since)
            if stale and all(self._listing(source) for source in sources):
                return stale_since or self.now, f"gold {target.target_id} stale"
        for source in sources:
            if self._new_objects(source):
                return self.now, f"new data in {source.source_id}"
        return None

    def _listing(self, source: Source) -> list[ObjectInfo]:
        """The source's objects, listed once a tick; none where it is missing or empty."""
        if source.source_id not in self._listings:
            try:
                self._listings[source.source_id] = list_objects(source.s3_path, source.source_id)
            except SourceNotFound:
                self._listings[source.source_id] = []
        return self._listings[source.source_id]

    def _new_objects(self, source: Source) -> int:
        processed = self.store.processed_objects(source.source_id)
        return sum(1 for o in self._listing(source) if processed.get(o.url) != o.etag)

    def in_flight(self) -> list[RunRecord]:
        return [
            record
            for record in self.instance.get_run_records(RunsFilter(statuses=IN_FLIGHT))
            if PIPELINE_TAG in record.dagster_run.tags
        ]

    def queued_and_running(self, records: list[RunRecord]) -> tuple[list[QueuedRun], list[Work]]:
        queued, running = [], []
        for record in records:
            run = record.dagster_run
            work = self.work(run.tags[PIPELINE_TAG], _due_since(run.tags.get(DUE_TAG), self.now))
            if work is None:
                continue
            if run.status == DagsterRunStatus.QUEUED:
                queued.append(
                    QueuedRun(
                        run.run_id, work, run.tags.get(PROFILE_TAG, ""), run.tags.get(HELD_TAG) == "true"
                    )
                )
            else:
                running.append(work)
        return queued, running

    def request(self, pipeline_id: str, run_id: str) -> Decision:
        """The decision for run `run_id` of a pipeline an operator asks for now (`medallion run` through the
        queue): the profile, priority and held state the policy gives it among the runs in flight, audited as
        a launch. It is queued whatever the throttles say: Dagster's pools hold its steps to them."""
        queued, running = self.queued_and_running(self.in_flight())
        work = self.work(pipeline_id, self.now, "requested by medallion run")
        # The runner asks only for a pipeline of the catalog it has just read.
        assert work is not None
        plan = plan_tick(self.policy, self.now, [work], queued, running)
        decision = (plan.launches + plan.waits)[0]
        self._audit(decision, "launch", "requested", run_id=run_id)
        return decision

    def tick(self, pending: dict[str, list[Any]]) -> SensorResult:
        records = self.in_flight()
        busy = {record.dagster_run.tags[PIPELINE_TAG] for record in records}
        queued, running = self.queued_and_running(records)

        waiting: list[Work] = []
        selections: dict[str, list[AssetKey]] = {}
        for pipeline_id in sorted(self.snapshot.pipelines):
            pipeline = self.fresh.pipelines.get(pipeline_id)
            assets = self.runnable_assets(pipeline_id) if pipeline and pipeline.enabled else []
            due = self.due(pipeline_id) if assets and pipeline_id not in busy else None
            if due is None:
                pending.pop(pipeline_id, None)
                continue
            since, reason = min(tuple(pending.get(pipeline_id, due)), due)
            pending[pipeline_id] = [since, reason]
            work = self.work(pipeline_id, since, reason)
            assert work is not None  # the pipeline is in both catalogs: it has runnable assets
            waiting.append(work)
            selections[pipeline_id] = assets

        plan = plan_tick(self.policy, self.now, waiting, queued, running)
        requests: list[RunRequest] = []
        for decision in plan.retags:
            # A retag is of a queued run, which has its id; cancelling it is this sensor's alone.
            assert decision.run_id is not None
            run = self.instance.get_run_by_id(decision.run_id)
            assert run is not None
            self.instance.run_coordinator.cancel_run(decision.run_id)
            requests.append(
                RunRequest(asset_selection=list(run.asset_selection or ()), tags=run_tags(decision))
            )
            self._audit(decision, "requeue", "requeued", run_id=decision.run_id)
        for decision in plan.launches:
            pending.pop(decision.work.pipeline_id)
            requests.append(
                RunRequest(asset_selection=selections[decision.work.pipeline_id], tags=run_tags(decision))
            )
            self._audit(decision, "launch", "requested")
        for decision in plan.waits:
            self.log.info(f"{decision.work.pipeline_id} waits: {decision.reason}")
        cursor = json.dumps(pending, sort_keys=True)
        if requests:
            return SensorResult(run_requests=requests, cursor=cursor)
        return SensorResult(
            skip_reason=f"{len(plan.waits)} due pipeline(s) waiting, none launched", cursor=cursor
        )

    def _audit(self, decision: Decision, event: str, status: str, run_id: str | None = None) -> None:
        self.store.record_audit(
            run_id=run_id,
            pipeline_id=decision.work.pipeline_id,
            event=event,
            status=status,
            details=decision.details(),
        )
        self.log.info(
            f"{event} {decision.work.pipeline_id} at priority {decision.priority}: {decision.reason}"
        )


def build_launcher_sensor(
    snapshot: CatalogSnapshot,
    store: CatalogStore,
    translator: MedallionTranslator,
    interval_seconds: int,
) -> SensorDefinition:
    """The profile-aware launcher; targets every asset the catalog defines. Stopped until turned on (the UI's
    Automation page, or `dagster sensor start medallion_launcher`), so opening the UI launches nothing
    unasked."""

    @sensor(
        name="medallion_launcher",
        minimum_interval_seconds=interval_seconds,
        default_status=DefaultSensorStatus.STOPPED,
        job_name=IMPLICIT_ASSET_JOB_NAME,
        description="Launches due pipelines in scheduling-profile order, within every system's throttle, "
        "and re-prioritizes queued runs when a profile changes.",
    )
    def medallion_launcher(context: SensorEvaluationContext) -> SensorResult:
        return Launcher(context.instance, context.log, snapshot, store, translator).tick(
            json.loads(context.cursor or "{}")
        )

    return medallion_launcher
