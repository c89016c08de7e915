"""Dagster as a team deploys it: the shipped instance config on PostgreSQL storage (dagster-postgres), a real
`dagster-daemon run` with the repository's workspace.yaml, and runs in their own run-worker processes.

The catalog and the warehouse live in one PostgreSQL database, Dagster's storage in another; raw data is on
the loopback S3 server. Every wait is on a state, with a deadline that only stops a hung test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import psycopg2
import pytest
import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
from sqlalchemy import bindparam, text

from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.config import DAEMON_SILENCE_ENV, SENSOR_INTERVAL_ENV, daemon_silence_seconds
from medallion_assets.control.steering.throttles import stage_pool
from medallion_assets.definitions import SNAPSHOT_KEY, unpack_snapshot
from medallion_assets.instance import (
    daemon_running,
    instance_config,
    write_instance_config,
)
from medallion_assets.loading import validate_files
from medallion_assets.runner import Route, route
from medallion_assets.sensors.launcher import PIPELINE_TAG
from medallion_assets.storage.warehouse import warehouse_from_url
from tests.conftest import RAW, REPO, SEED, fresh_database
from tests.reference import expected_daily_revenue, expected_daily_user_events

DEADLINE_SECONDS = 900  # a run worker starts its own Spark session; two cores are shared with other work


def wait_for(what: str, check, deadline: float = DEADLINE_SECONDS):
    """Poll `check` until it returns something truthy; fail naming `what` if the deadline passes."""
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        if result := check():
            return result
        time.sleep(1)
    pytest.fail(f"gave up waiting for {what}")


class Deployment:
    """DAGSTER_HOME with the shipped config on PostgreSQL, a PostgreSQL catalog and warehouse, and the daemons
    this test starts (each in its own process group, so stopping it stops its code server and run workers)."""

    def __init__(self, home: Path, catalog_url: str, run_monitoring: dict, monkeypatch: pytest.MonkeyPatch):
        config = instance_config(postgres=True)
        # Run monitoring polls every 120 s by default, and the run queue is read every 5 s; the test polls
        # both often, so it waits on states, not clocks.
        config["run_monitoring"].update(run_monitoring)
        config["run_coordinator"]["config"] = {"dequeue_interval_seconds": 1}
        write_instance_config(home, config, postgres=True)
        self.home = home
        self.instance = DagsterInstance.get()
        self.store = CatalogStore(catalog_url)
        self.store.migrate()
        self.store.upsert(validate_files(self.store.snapshot(), [SEED]).rows)
        self.daemons: list[subprocess.Popen] = []
        self.monkeypatch = monkeypatch

    def start_daemon(self) -> subprocess.Popen:
        # Its log goes next to DAGSTER_HOME, for whoever reads a failure.
        with open(self.home.parent / f"daemon-{len(self.daemons)}.log", "wb") as log:
            daemon = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "dagster-daemon"),
                    "run",
                    "-w",
                    str(REPO / "workspace.yaml"),
                ],
                cwd=REPO,
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.daemons.append(daemon)
        return daemon

    def start_launcher(self, *pipelines: str) -> None:
        """Turn the launcher sensor on for the seed's `pipelines`, as docs/operations.md tells an operator to
        (it ships stopped).

        The sensors then tick every 5 s, not 30: the daemon started next launches a run as soon as Dagster's
        sensor loop (every 5 s) looks. The tests without the launcher keep 30 s, and the CPU of five times
        fewer ticks. The seed's other pipelines are switched off in their pipelines rows, as an operator
        would: their runs, which the test does not look at, would each be a run worker and a Spark driver
        more on two shared cores."""
        self.monkeypatch.setenv(SENSOR_INTERVAL_ENV, "5")
        with self.store.engine.begin() as catalog:
            catalog.execute(
                text("UPDATE pipelines SET enabled = false WHERE pipeline_id NOT IN :kept").bindparams(
                    bindparam("kept", expanding=True)
                ),
                {"kept": list(pipelines)},
            )
        subprocess.run(
            [
                str(Path(sys.executable).parent / "dagster"),
                "sensor",
                "start",
                "medallion_launcher",
                "-w",
                str(REPO / "workspace.yaml"),
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
        )

    def hold_runs_of(self, pipeline_id: str) -> None:
        """A run-queue limit of 0 on the pipeline's tag: its runs stay queued, as in a busy queue."""
        path = self.home / "dagster.yaml"
        config = yaml.safe_load(path.read_text())
        config["concurrency"]["runs"]["tag_concurrency_limits"].append(
            {"key": PIPELINE_TAG, "value": pipeline_id, "limit": 0}
        )
        path.write_text(yaml.safe_dump(config))

    def stop(self) -> None:
        for daemon in self.daemons:
            try:
                os.killpg(daemon.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            daemon.wait()

    def runs(self, pipeline_id: str) -> list:
        return self.instance.get_runs(RunsFilter(tags={PIPELINE_TAG: pipeline_id}))

    def finished_run(self, run_id: str):
        run = self.instance.get_run_by_id(run_id)
        return run if run.is_finished else None

    def failures(self, run_id: str) -> str:
        """Why a run failed, as its step and run failure events say: the message a failed assertion shows."""
        records = self.instance.all_logs(
            run_id, of_type={DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE}
        )
        reasons = []
        for record in records:
            error = getattr(record.dagster_event.event_specific_data, "error", None)
            reasons.append(error.message.strip() if error is not None else record.message)
        return f"run {run_id}: " + " | ".join(reasons)

    def worker_pid(self, run_id: str) -> int | None:
        """The run worker's process id, from the engine event the worker reports when it starts."""
        for record in self.instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
            pid = record.dagster_event.engine_event_data.metadata.get("pid")
            if pid is not None:
                return int(pid.value)
        return None

    def claimed(self, pool: str, run_id: str) -> int:
        info = self.instance.event_log_storage.get_concurrency_info(pool)
        return sum(1 for slot in info.claimed_slots if slot.run_id == run_id)

    def gold(self, table: str) -> list[dict]:
        warehouse = warehouse_from_url(os.environ["MEDALLION_WAREHOUSE_URL"])
        try:
            return warehouse.query(f"SELECT * FROM {table} ORDER BY 1, 2")
        finally:
            warehouse.close()


@pytest.fixture
def deployment(tmp_path, monkeypatch, pg_url, pg_database, raw_data, medallion_home):
    """A deployment whose environment (the daemon inherits it) names every part, its launcher stopped as it
    ships; stopped at the end."""
    with fresh_database(pg_url) as dagster_database:
        dagster_db = urlparse(dagster_database)
        environment = {
            "DAGSTER_HOME": str(tmp_path / "dagster"),
            "DAGSTER_PG_HOST": dagster_db.hostname,
            "DAGSTER_PG_PORT": str(dagster_db.port),
            "DAGSTER_PG_DB": dagster_db.path.lstrip("/"),
            "DAGSTER_PG_USER": dagster_db.username,
            "DAGSTER_PG_PASSWORD": dagster_db.password or "",
            "MEDALLION_CATALOG_URL": pg_database,
            "MEDALLION_WAREHOUSE_URL": pg_database,
            "MEDALLION_LAKE_URL": str(tmp_path / "lake"),
        }
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        deployment = Deployment(
            tmp_path / "dagster",
            pg_database,
            {"poll_interval_seconds": 1, "free_slots_after_run_end_seconds": 1},
            monkeypatch,
        )
        try:
            yield deployment
        finally:
            deployment.stop()
            deployment.instance.dispose()
            deployment.store.engine.dispose()


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def add_user_events(name: str) -> None:
    """A new raw file for user_events_etl: the launcher sees new data and launches the pipeline."""
    import boto3

    line = (
        f'{{"event_id": "{name}", "user_id": "u000001", "event_type": "click", '
        '"event_ts": "2024-01-01T00:00:00Z", "value": 1.5}\n'
    )
    boto3.client("s3").put_object(Bucket="medallion-raw", Key=f"user_events/{name}.jsonl", Body=line.encode())


def test_the_daemon_launches_sensor_runs_in_run_workers_and_a_killed_worker_frees_its_slots(deployment):
    deployment.start_launcher("user_events_etl", "orders_etl")
    daemon = deployment.start_daemon()
    # The launcher sensor sees the seed pipelines' new raw data; the queued run coordinator dequeues the
    # runs, each in a run worker of its own.
    first = {
        pipeline: wait_for(f"a run of {pipeline}", lambda p=pipeline: deployment.runs(p))[0].run_id
        for pipeline in ("user_events_etl", "orders_etl")
    }
    for pipeline, run_id in first.items():
        run = wait_for(f"{pipeline} to finish", lambda r=run_id: deployment.finished_run(r))
        assert run.status == DagsterRunStatus.SUCCESS, f"{pipeline}, {deployment.failures(run_id)}"
    workers = {deployment.worker_pid(run_id) for run_id in first.values()}
    assert None not in workers and len(workers) == 2 and daemon.pid not in workers
    # Each run worker was given the code server's catalog snapshot, stored with the run, to rebuild from.
    for run_id in first.values():
        plan = deployment.instance.get_execution_plan_snapshot(
            deployment.instance.get_run_by_id(run_id).execution_plan_snapshot_id
        )
        metadata = plan.repository_load_data.reconstruction_metadata
        [packed] = [value for key, value in metadata.items() if key.startswith(f"{SNAPSHOT_KEY}/")]
        kept = unpack_snapshot(packed)
        assert kept.tables == deployment.store.snapshot().tables
    assert deployment.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)
    assert deployment.gold("analytics.daily_revenue_by_country") == expected_daily_revenue(RAW)

    # A new raw file relaunches user_events_etl; a lock on its gold table holds the warehouse load, and with
    # it the load's slot of the warehouse's pool, until the worker is killed.
    snapshot = deployment.store.snapshot()
    gold_stage = next(
        s for s in snapshot.stages("user_events_etl") if snapshot.targets[s.target_id].layer == "gold"
    )
    pool = stage_pool(gold_stage, snapshot)
    lock = psycopg2.connect(os.environ["MEDALLION_WAREHOUSE_URL"])
    lock.cursor().execute("LOCK TABLE analytics.daily_user_events IN ACCESS EXCLUSIVE MODE")
    try:
        add_user_events("late")
        run_id = wait_for(
            "a second user_events_etl run",
            lambda: next(
                (
                    r.run_id
                    for r in deployment.runs("user_events_etl")
                    if r.run_id != first["user_events_etl"]
                ),
                None,
            ),
        )
        wait_for(f"the run's load to claim a slot of {pool}", lambda: deployment.claimed(pool, run_id))
        os.kill(deployment.worker_pid(run_id), signal.SIGKILL)
        run = wait_for("the killed run to end", lambda: deployment.finished_run(run_id))
        assert run.status == DagsterRunStatus.FAILURE
        wait_for(
            f"the killed run's slot of {pool} to be freed", lambda: deployment.claimed(pool, run_id) == 0
        )
    finally:
        lock.close()
    assert deployment.instance.event_log_storage.get_concurrency_info(pool).claimed_slots == []


def test_a_daemon_restarted_mid_run_leaves_no_run_started(deployment):
    deployment.start_launcher("user_events_etl")
    daemon = deployment.start_daemon()
    [first] = wait_for(
        "user_events_etl to finish", lambda: [r for r in deployment.runs("user_events_etl") if r.is_finished]
    )
    assert first.status == DagsterRunStatus.SUCCESS, deployment.failures(first.run_id)

    lock = psycopg2.connect(os.environ["MEDALLION_WAREHOUSE_URL"])
    lock.cursor().execute("LOCK TABLE analytics.daily_user_events IN ACCESS EXCLUSIVE MODE")
    try:
        add_user_events("late")
        run_id = wait_for(
            "a second user_events_etl run",
            lambda: next(
                (r.run_id for r in deployment.runs("user_events_etl") if r.run_id != first.run_id),
                None,
            ),
        )
        wait_for(
            "the run to start",
            lambda: deployment.instance.get_run_by_id(run_id).status == DagsterRunStatus.STARTED,
        )
        daemon.kill()  # the daemon alone, as a crash or a redeploy would; its run worker lives on
        daemon.wait()
        deployment.start_daemon()
    finally:
        lock.close()
    run = wait_for("the run to end", lambda: deployment.finished_run(run_id))
    assert run.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE)
    assert deployment.instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED])) == []


def medallion_cli(*args: str) -> subprocess.CompletedProcess:
    """The `medallion` command as a user runs it, in this test's environment."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "medallion"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=DEADLINE_SECONDS,
    )


def test_medallion_run_goes_through_the_daemons_queue_and_reports_the_run(deployment):
    deployment.start_launcher("orders_etl")
    deployment.start_daemon()
    [first_run] = wait_for(  # the launcher's own first run
        "orders_etl's first run to finish",
        lambda: [r for r in deployment.runs("orders_etl") if r.is_finished],
    )

    done = medallion_cli("run", "orders_etl", "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    snapshot = deployment.store.snapshot()
    assert report["status"] == "success"
    assert {a["key"]: a["status"] for a in report["assets"]} == {
        MedallionTranslator().get_asset_key(snapshot.targets[s.target_id]).to_user_string(): "success"
        for s in snapshot.stages("orders_etl")
    }
    # The launcher's run ingested the raw files already: bronze finds nothing new, and says how many rows it
    # has.
    assert all(a["rows"] is not None and a["checks"] for a in report["assets"]), report
    assert all(c["passed"] for a in report["assets"] for c in a["checks"] if c["severity"] == "error"), report
    [run] = [r for r in deployment.runs("orders_etl") if r.run_id != first_run.run_id]
    # Queued with the launcher's tags, and run by a run worker of the daemon, not by the command.
    assert run.status == DagsterRunStatus.SUCCESS
    assert {"dagster/priority", "medallion/profile", "medallion/held"} <= set(run.tags)
    assert any(
        r.dagster_event.event_type == DagsterEventType.PIPELINE_ENQUEUED
        for r in deployment.instance.all_logs(run.run_id)
    )
    launch = deployment.store.audit_entries(run_id=run.run_id, event="launch")
    assert [(e["status"], e["details"]["reason"]) for e in launch] == [
        ("requested", "balanced: by score; systems within throttle")
    ]
    assert deployment.gold("analytics.daily_revenue_by_country") == expected_daily_revenue(RAW)


def stop_daemon(daemon: subprocess.Popen) -> None:
    """As Ctrl-C on `medallion ui` or a crash leaves it: the daemon gone, its last heartbeat stored."""
    os.killpg(daemon.pid, signal.SIGKILL)
    daemon.wait()


# Tests that wait for a stopped daemon's silence to be noticed: 10 s after its last heartbeat was due.
SHORT_SILENCE = "40"


def test_medallion_run_after_the_daemon_stopped_runs_in_process_and_says_so(deployment, monkeypatch):
    monkeypatch.setenv(DAEMON_SILENCE_ENV, SHORT_SILENCE)
    daemon = deployment.start_daemon()
    wait_for("the daemon's first heartbeat", lambda: daemon_running(deployment.instance))
    stop_daemon(daemon)
    wait_for("the daemon's heartbeat to go stale", lambda: not daemon_running(deployment.instance))

    done = medallion_cli("run", "orders_etl")

    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        "orders_etl: running in this process: no dagster-daemon has sent a heartbeat for the Dagster "
        f"instance configured in {deployment.home / 'dagster.yaml'} in the last {daemon_silence_seconds()} s"
    )
    [run] = deployment.runs("orders_etl")
    assert run.status == DagsterRunStatus.SUCCESS
    assert deployment.gold("analytics.daily_revenue_by_country") == expected_daily_revenue(RAW)


def test_medallion_run_cancels_its_queued_run_when_the_daemon_stops_and_runs_it_in_process(
    deployment, monkeypatch
):
    monkeypatch.setenv(DAEMON_SILENCE_ENV, SHORT_SILENCE)
    deployment.hold_runs_of("orders_etl")
    daemon = deployment.start_daemon()
    wait_for("the daemon's first heartbeat", lambda: daemon_running(deployment.instance))
    command = subprocess.Popen(
        [str(Path(sys.executable).parent / "medallion"), "run", "orders_etl"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    [queued] = wait_for("the command's run to be queued", lambda: deployment.runs("orders_etl"))
    stop_daemon(daemon)

    _, stderr = command.communicate(timeout=DEADLINE_SECONDS)

    assert command.returncode == 0, stderr
    where = deployment.home / "dagster.yaml"
    assert stderr.splitlines()[:2] == [
        f"orders_etl: queued for the dagster-daemon of the Dagster instance configured in {where}",
        f"the dagster-daemon of the Dagster instance configured in {where} has sent no heartbeat in the last "
        f"{daemon_silence_seconds()} s; canceled run {queued.run_id}, which it had not started; running it "
        "in this process instead",
    ]
    assert deployment.instance.get_run_by_id(queued.run_id).status == DagsterRunStatus.CANCELED
    [in_process] = [r for r in deployment.runs("orders_etl") if r.run_id != queued.run_id]
    assert in_process.status == DagsterRunStatus.SUCCESS
    assert deployment.gold("analytics.daily_revenue_by_country") == expected_daily_revenue(RAW)


def test_after_medallion_ui_stops_its_queued_run_and_the_next_run_go_in_process_at_once(
    deployment, unused_port
):
    deployment.hold_runs_of("orders_etl")
    with open(deployment.home.parent / "ui.log", "wb") as log:
        ui = subprocess.Popen(
            [str(Path(sys.executable).parent / "medallion"), "ui", "--port", str(unused_port)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    wait_for("the UI's daemon's first heartbeat", lambda: daemon_running(deployment.instance))
    command = subprocess.Popen(
        [str(Path(sys.executable).parent / "medallion"), "run", "orders_etl"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    [queued] = wait_for("the command's run to be queued", lambda: deployment.runs("orders_etl"))

    ui.send_signal(signal.SIGTERM)
    assert ui.wait(timeout=60) == 128 + signal.SIGTERM
    stopped_at = time.time()

    # The next run goes in process at once: the stopped UI's daemon left no heartbeat behind.
    where = deployment.home / "dagster.yaml"
    assert route(deployment.instance) == Route(
        False,
        "running in this process: no dagster-daemon has sent a heartbeat for the Dagster instance configured "
        f"in {where} in the last {daemon_silence_seconds()} s",
    )
    # The run queued for it is canceled, well before a heartbeat would look stale, and run in process.
    _, stderr = command.communicate(timeout=DEADLINE_SECONDS)
    assert command.returncode == 0, stderr
    assert stderr.splitlines()[:2] == [
        f"orders_etl: queued for the dagster-daemon of the Dagster instance configured in {where}",
        f"the dagster-daemon of the Dagster instance configured in {where} has sent no heartbeat in the last "
        f"{daemon_silence_seconds()} s; canceled run {queued.run_id}, which it had not started; running it "
        "in this process instead",
    ]
    canceled = deployment.instance.get_run_record_by_id(queued.run_id)
    assert canceled.dagster_run.status == DagsterRunStatus.CANCELED
    # At once, not after the 90 s a daemon's silence takes to be noticed.
    assert canceled.end_time - stopped_at < 15
    [in_process] = [r for r in deployment.runs("orders_etl") if r.run_id != queued.run_id]
    assert in_process.status == DagsterRunStatus.SUCCESS
    assert deployment.gold("analytics.daily_revenue_by_country") == expected_daily_revenue(RAW)


def test_postgresql_storage_down_at_start_names_the_instance_config(deployment, monkeypatch, unused_port):
    monkeypatch.setenv("DAGSTER_PG_PORT", str(unused_port))

    done = medallion_cli("instance", "check")

    assert done.returncode == 4
    message = done.stderr.strip().splitlines()[-1]
    assert message == (
        f"the Dagster instance configured in {deployment.home / 'dagster.yaml'} cannot reach its "
        f'storage: connection to server at "127.0.0.1", port {unused_port} failed: Connection refused'
    )
    assert "Traceback" not in done.stderr
