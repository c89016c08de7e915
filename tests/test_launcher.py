"""The medallion_launcher sensor on a real Dagster instance configured by the shipped dagster.yaml: runs are
queued with profile-driven tags, dequeued by Dagster's queued run coordinator in profile order, re-ordered
by a profile switch (a plain row update), and held under focus until critical work is done."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest
import yaml
from dagster import DagsterEvent, DagsterEventType, DagsterRunStatus, build_sensor_context, instance_for_test
from sqlalchemy import text

from medallion_assets.catalog.models import Pipeline, Profile, Source, Stage, Target, Throttle
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.steering.scheduling import FOCUS_PRIORITY
from medallion_assets.dagster_compat import (
    RegisteredCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
    runs_to_dequeue,
)
from medallion_assets.definitions import build_definitions
from medallion_assets.storage.objects import list_objects
from tests.conftest import REPO

# (pipeline, criticality, expected cost, source system). Balanced: normal (2×1/1) before low (1×1/1) before
# the costly critical one (8×1/20); focus: critical first, the others held.
PIPELINES = [
    ("crit_etl", "critical", 20.0, "sys_a"),
    ("norm_etl", "normal", 1.0, "sys_b"),
    ("low_etl", "low", 1.0, "sys_c"),
    ("late_etl", "normal", 4.0, "sys_b"),
]


def pipeline_rows(tmp_path, pipelines, with_gold: bool = False) -> dict[str, list]:
    """One pipeline per (pipeline, criticality, expected cost, source system): a raw folder holding one file,
    its bronze stage, and with `with_gold` a gold stage over the bronze."""
    rows: dict[str, list] = {
        "pipelines": [],
        "sources": [],
        "targets": [],
        "stages": [],
        "profiles": [Profile(profile_id="balanced", is_default=True), Profile(profile_id="focus")],
        "throttles": [Throttle(system_kind="source", system_id="sys_b", metric="concurrency", limit_value=1)],
    }
    for pipeline_id, criticality, cost, system in pipelines:
        name = pipeline_id.removesuffix("_etl")
        folder = tmp_path / "raw" / name
        folder.mkdir(parents=True)
        (folder / "part-0.jsonl").write_text('{"id": "1"}\n')
        rows["pipelines"].append(
            Pipeline(pipeline_id=pipeline_id, criticality=criticality, expected_cost=cost)
        )
        rows["sources"].append(
            Source(
                source_id=f"{name}_raw",
                s3_path=str(folder),
                file_format="jsonl",
                columns={"id": "string"},
                system=system,
            )
        )
        # (layer, stage, input, SQL, keys): bronze over the raw folder, and gold over bronze if asked.
        stages = [("bronze", "ingest", f"{name}_raw", None, [])]
        if with_gold:
            stages.append(("gold", "publish", f"bronze_{name}", f"SELECT id FROM bronze_{name}", ["id"]))
        for order, (layer, stage_name, input_id, sql, keys) in enumerate(stages, start=1):
            rows["targets"].append(Target(target_id=f"{layer}_{name}", layer=layer, keys=keys))
            rows["stages"].append(
                Stage(
                    pipeline_id=pipeline_id,
                    stage_order=order,
                    stage_name=stage_name,
                    input_id=input_id,
                    target_id=f"{layer}_{name}",
                    transform_sql=sql,
                )
            )
    return rows


@contextlib.contextmanager
def catalog(tmp_path, pipelines, with_gold: bool = False) -> Iterator[CatalogStore]:
    """A SQLite catalog holding `pipeline_rows`."""
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(pipeline_rows(tmp_path, pipelines, with_gold))
    try:
        yield store
    finally:
        store.engine.dispose()


@pytest.fixture
def store(tmp_path) -> Iterator[CatalogStore]:
    """Four one-stage pipelines, each with fresh raw files in a local folder; sys_b takes one run at a
    time."""
    with catalog(tmp_path, PIPELINES) as store:
        yield store


class Deployment:
    """The sensor's tick as the sensor daemon runs it: evaluate, then queue every RunRequest as a run."""

    def __init__(self, store, tmp_path, instance):
        self.store, self.instance = store, instance
        self.defs = build_definitions(store.url, str(tmp_path / "lake"), f"duckdb:///{tmp_path}/wh.duckdb")
        self.sensor = self.defs.resolve_sensor_def("medallion_launcher")
        # The job the sensor daemon runs its requests in: the sensor's own target.
        self.job = self.defs.get_repository_def().get_job(self.sensor.job_name)
        self.origin = RemoteJobOrigin(
            RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("medallion"), "__repository__"), self.job.name
        )
        self.cursor = None

    def tick(self) -> list[dict]:
        data = self.sensor.evaluate_tick(
            build_sensor_context(instance=self.instance, cursor=self.cursor, definitions=self.defs)
        )
        self.cursor = data.cursor
        for request in data.run_requests:
            self.instance.create_run_for_job(
                job_def=self.job,
                asset_selection=frozenset(request.asset_selection),
                tags=request.tags,
                status=DagsterRunStatus.QUEUED,
                remote_job_origin=self.origin,
            )
        return [dict(request.tags) for request in data.run_requests]

    def dequeue_order(self) -> list[str]:
        """The runs Dagster's queued run coordinator would launch now, in its order."""
        return [run.tags["medallion/pipeline"] for run in runs_to_dequeue(self.instance)]

    def finish(self, pipeline_id: str, failed: bool = False) -> None:
        """The run of a pipeline succeeds, having ingested its files (as its bronze stage would), or fails."""
        [run] = [
            r
            for r in self.instance.get_runs()
            if r.tags["medallion/pipeline"] == pipeline_id and r.status == DagsterRunStatus.QUEUED
        ]
        end = DagsterEventType.RUN_FAILURE if failed else DagsterEventType.RUN_SUCCESS
        for event in (DagsterEventType.RUN_START, end):
            self.instance.report_dagster_event(
                DagsterEvent(event.value, job_name=run.job_name), run_id=run.run_id
            )
        if not failed:
            self.finish_ingest(pipeline_id)

    def finish_ingest(self, pipeline_id: str) -> None:
        """The pipeline's raw files are ingested: its bronze stage recorded their bookmarks."""
        source = self.store.snapshot().stages(pipeline_id)[0].input_id
        objects = list_objects(self.store.snapshot().sources[source].s3_path)
        self.store.record_bookmarks(source, [(o.url, o.etag, o.size) for o in objects], "test")


@contextlib.contextmanager
def deployed(store, tmp_path) -> Iterator[Deployment]:
    """The launcher over `store`, on a Dagster instance configured by the shipped dagster.yaml."""
    shipped = yaml.safe_load((REPO / "dagster.yaml").read_text())
    with instance_for_test(overrides=shipped) as instance:
        yield Deployment(store, tmp_path, instance)


@pytest.fixture
def deployment(store, tmp_path) -> Iterator[Deployment]:
    with deployed(store, tmp_path) as deployment:
        yield deployment


def test_balanced_launches_by_score_within_throttles_and_dagster_dequeues_in_that_order(deployment, store):
    tags = deployment.tick()
    launched = {t["medallion/pipeline"]: t for t in tags}
    # late_etl shares sys_b (limit 1) with norm_etl, which scored first: it waits for the throttle.
    assert sorted(launched) == ["crit_etl", "low_etl", "norm_etl"]
    assert {
        p: (t["dagster/priority"], t["medallion/profile"], t["medallion/held"]) for p, t in launched.items()
    } == {
        "norm_etl": ("2", "balanced", "false"),
        "low_etl": ("1", "balanced", "false"),
        "crit_etl": ("0", "balanced", "false"),
    }
    assert deployment.dequeue_order() == ["norm_etl", "low_etl", "crit_etl"]
    assert json.loads(deployment.cursor).keys() == {"late_etl"}
    audit = {e["pipeline_id"]: e["details"] for e in store.audit_entries(event="launch")}
    assert audit["norm_etl"] == {
        "profile": "balanced",
        "score": 2.0,
        "priority": 2,
        "held": False,
        "reason": "balanced: by score; systems within throttle",
        "due": "new data in norm_raw",
        "throttle": {"source_sys_b": "0/1"},
    }
    assert audit["crit_etl"]["score"] == 0.4 and audit["crit_etl"]["throttle"] == {"source_sys_a": "0/2"}
    # Nothing new is launched while sys_b is full; when norm_etl is done, late_etl goes.
    assert deployment.tick() == []
    deployment.finish("norm_etl")
    assert [t["medallion/pipeline"] for t in deployment.tick()] == ["late_etl"]


def test_switching_to_focus_by_a_row_update_reorders_queued_runs_and_holds_the_rest(deployment, store):
    deployment.tick()
    assert deployment.dequeue_order() == ["norm_etl", "low_etl", "crit_etl"]
    first_runs = {r.run_id for r in deployment.instance.get_runs()}
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE profiles SET is_default = (profile_id = 'focus')"))

    requeued = {t["medallion/pipeline"]: t for t in deployment.tick()}
    # A priority is the score rounded (rule 2), and a score grows with the minutes a run has waited: on a
    # busy machine a tick takes seconds, so each is checked against the score the requeue recorded.
    score = {e["pipeline_id"]: e["details"]["score"] for e in store.audit_entries(event="requeue")}
    assert {
        p: (t["dagster/priority"], t["medallion/profile"], t["medallion/held"]) for p, t in requeued.items()
    } == {
        "crit_etl": (str(FOCUS_PRIORITY + round(score["crit_etl"])), "focus", "false"),
        "norm_etl": (str(round(score["norm_etl"])), "focus", "true"),
        "low_etl": (str(round(score["low_etl"])), "focus", "true"),
    }
    assert score["crit_etl"] < score["low_etl"] < score["norm_etl"]  # yet crit_etl dequeues first
    assert {r.status for r in deployment.instance.get_runs() if r.run_id in first_runs} == {
        DagsterRunStatus.CANCELED
    }
    # Held runs stay queued: Dagster's run queue dequeues only the critical one.
    assert deployment.dequeue_order() == ["crit_etl"]
    assert [e["details"]["reason"] for e in store.audit_entries(event="requeue", pipeline_id="norm_etl")] == [
        "re-tagged from balanced to focus (held)"
    ]
    # late_etl became due meanwhile: under focus it is not launched while critical work is queued.
    assert "late_etl" in json.loads(deployment.cursor)

    deployment.finish("crit_etl")
    released = {t["medallion/pipeline"]: t["medallion/held"] for t in deployment.tick()}
    assert released == {"norm_etl": "false", "low_etl": "false"}
    assert deployment.dequeue_order() == ["norm_etl", "low_etl"]


def test_a_pipeline_whose_run_failed_is_not_relaunched_on_every_tick(deployment):
    deployment.tick()
    deployment.finish("norm_etl", failed=True)  # its files stay new: without a backoff it would be due again
    assert [t["medallion/pipeline"] for t in deployment.tick()] == ["late_etl"]  # sys_b is free: not norm_etl
    deployment.finish("late_etl")
    assert deployment.tick() == []


def test_stale_gold_launches_its_pipeline_only_once_its_source_holds_files(tmp_path):
    """A gold never made is stale; a run over a source that holds nothing would only fail its bronze."""
    pipelines = [("full_etl", "normal", 1.0, "sys_a"), ("empty_etl", "normal", 1.0, "sys_c")]
    with catalog(tmp_path, pipelines, with_gold=True) as store, deployed(store, tmp_path) as deployment:
        (tmp_path / "raw" / "empty" / "part-0.jsonl").unlink()
        # full_etl's file is ingested already: its gold's staleness alone makes it due.
        deployment.finish_ingest("full_etl")

        assert [t["medallion/pipeline"] for t in deployment.tick()] == ["full_etl"]
        assert json.loads(deployment.cursor) == {}
        assert [e["details"]["due"] for e in store.audit_entries(event="launch")] == ["gold gold_full stale"]

        (tmp_path / "raw" / "empty" / "part-0.jsonl").write_text('{"id": "2"}\n')
        assert [t["medallion/pipeline"] for t in deployment.tick()] == ["empty_etl"]
        assert [
            e["details"]["due"] for e in store.audit_entries(event="launch", pipeline_id="empty_etl")
        ] == ["gold gold_empty stale"]
