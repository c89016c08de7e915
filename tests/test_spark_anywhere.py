"""The same catalog and assets on a Spark standalone cluster and on Spark Connect, chosen by configuration
alone.

Each run is `medallion run` in a process of its own, as a user would start it, with SPARK_MASTER or
SPARK_REMOTE set; the servers are real, started from the pyspark wheel on loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import boto3
import psutil
import pytest

from medallion_assets.catalog.models import Incremental
from medallion_assets.sample_data import SampleSummary, write_sample_data
from tests.conftest import RAW, Medallion
from tests.fixtures.drills import drill_a_warehouse_connection_lost_mid_load
from tests.reference import expected_daily_revenue, expected_daily_user_events
from tests.spark_servers import connect_server, free_port, standalone_cluster

MEDALLION = str(Path(sys.executable).parent / "medallion")


# The tests that share a server run on one xdist worker (`--dist loadgroup`); spread over workers, each worker
# would start a cluster or a Connect server of its own.
ON_THE_CLUSTER = pytest.mark.xdist_group("spark-cluster")
ON_CONNECT = pytest.mark.xdist_group("spark-connect")


@pytest.fixture(scope="module")
def cluster(s3_endpoint, tmp_path_factory):
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster"), {}) as (url, worker):
        yield url, worker


@pytest.fixture(scope="module")
def connect(s3_endpoint, tmp_path_factory):
    with connect_server(tmp_path_factory.mktemp("spark-connect"), {}) as url:
        yield url


@pytest.fixture(
    params=[pytest.param("cluster", marks=ON_THE_CLUSTER), pytest.param("connect", marks=ON_CONNECT)]
)
def spark_server(request) -> dict[str, str]:
    """The setting that sends a `medallion run` to the standalone cluster, or to the Spark Connect server."""
    if request.param == "cluster":
        master, _ = request.getfixturevalue("cluster")
        return {"SPARK_MASTER": master}
    return {"SPARK_REMOTE": request.getfixturevalue("connect")}


def run_env(installation: Medallion, **spark: str) -> dict[str, str]:
    """The environment of a `medallion run` on `installation`. The cluster is on this machine, so its
    executors' Python workers run this interpreter, as PYSPARK_PYTHON says (a cluster's own setting,
    elsewhere)."""
    env = {
        **os.environ,
        "MEDALLION_CATALOG_URL": installation.store.url,
        "MEDALLION_LAKE_URL": str(installation.lake),
        "MEDALLION_WAREHOUSE_URL": installation.warehouse_url,
        "PYSPARK_PYTHON": sys.executable,
        **spark,
    }
    env.pop("DAGSTER_HOME", None)
    return env


def medallion_run(installation: Medallion, pipeline_id: str, **spark: str) -> tuple[int, dict | None, str]:
    """`medallion run PIPELINE --json` in a new process; returns its exit code, its report and its stderr."""
    env = run_env(installation, **spark)
    done = subprocess.run(
        [MEDALLION, "run", pipeline_id, "--json"], env=env, capture_output=True, text=True, timeout=900
    )
    report = json.loads(done.stdout) if done.stdout.strip() else None
    return done.returncode, report, done.stderr


def assert_run_succeeds(installation: Medallion, pipeline_id: str, **spark: str) -> None:
    code, report, stderr = medallion_run(installation, pipeline_id, **spark)
    reasons = [asset["reason"] for asset in (report or {}).get("assets", []) if asset["reason"]]
    assert (code, report and report["status"]) == (0, "success"), (reasons, stderr[-3000:])


def assert_seed_pipelines_succeed(installation: Medallion, raw: SampleSummary, **spark: str) -> None:
    """user_events_etl and orders_etl run to success on `raw`: gold is the reference's, and bronze read every
    raw line and quarantined the malformed ones."""
    for pipeline_id in ("user_events_etl", "orders_etl"):
        assert_run_succeeds(installation, pipeline_id, **spark)
    assert installation.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)
    assert installation.gold("analytics.daily_revenue_by_country") == expected_daily_revenue(RAW)
    bronze = installation.stage_audit("bronze_ingest")[-1]
    assert (bronze["rows_read"], bronze["rows_quarantined"]) == (raw.event_lines, raw.malformed_events)


@ON_THE_CLUSTER
def test_seed_pipelines_on_a_standalone_cluster(medallion, raw_data, cluster):
    master, _ = cluster
    assert_seed_pipelines_succeed(medallion, raw_data, SPARK_MASTER=master)


@ON_THE_CLUSTER
def test_an_executor_lost_mid_ingest_is_retried_and_loads_nothing_twice(medallion, cluster):
    """The worker's executor is killed while it reads raw objects; Spark reruns the lost tasks on a new
    one."""
    master, worker = cluster
    boto3.resource("s3").Bucket("medallion-raw").objects.all().delete()
    summary = write_sample_data(RAW, rows=300_000, lines_per_file=20_000, gzipped=True)
    run = subprocess.Popen(
        [MEDALLION, "run", "user_events_etl", "--json"],
        env=run_env(medallion, SPARK_MASTER=master),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed = kill_executor_once_it_reads(worker.pid, run)
    stdout, stderr = run.communicate(timeout=900)
    assert killed, "no executor read raw objects"
    assert run.returncode == 0, stderr[-3000:]
    bronze = [entry for entry in medallion.stage_audit("bronze_ingest") if entry["status"] == "success"]
    assert [(entry["rows_read"], entry["rows_quarantined"]) for entry in bronze] == [
        (summary.event_lines, summary.malformed_events)
    ]
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)


def kill_executor_once_it_reads(worker_pid: int, run: subprocess.Popen) -> bool:
    """SIGKILL the executor JVM as soon as it has Python workers (they exist only while raw objects are
    read)."""
    deadline = time.monotonic() + 600
    while run.poll() is None and time.monotonic() < deadline:
        for executor in psutil.Process(worker_pid).children(recursive=True):
            try:
                if "CoarseGrainedExecutorBackend" in " ".join(executor.cmdline()) and executor.children(
                    recursive=True
                ):
                    executor.kill()
                    return True
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)
    return False


@ON_CONNECT
def test_seed_pipelines_on_spark_connect_with_gzipped_raw_files(medallion, connect):
    """The seed pipelines run through Spark Connect; then new events arrive, and silver merges only them and
    gold recomputes only the groups they touch, through Connect too; then gold is declared by day, and the
    next events recompute only their day."""
    boto3.resource("s3").Bucket("medallion-raw").objects.all().delete()
    summary = write_sample_data(RAW, rows=3000, lines_per_file=1000, gzipped=True)
    assert_seed_pipelines_succeed(medallion, summary, SPARK_REMOTE=connect)

    # Two new days beside gold's seven: under a third of its groups, recomputed by groups at any size.
    put_late_events("user_events/zz-late.jsonl", "late", 40, days=2)
    assert_run_succeeds(
        medallion, "user_events_etl", SPARK_REMOTE=connect, MEDALLION_GOLD_GROUPS_FROM_ROWS="0"
    )
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)
    modes = {
        stage: medallion.stage_audit(stage)[-1]["details"]["mode"]
        for stage in ("silver_clean", "gold_daily_aggregate")
    }
    assert modes == {"silver_clean": "incremental", "gold_daily_aggregate": "incremental"}

    # Gold declared by day: the next late events recompute the days they fall on, through Connect too.
    gold = medallion.store.snapshot().targets["gold_daily_user_events"]
    by_day = gold.model_copy(update={"incremental": Incremental(by="event_date")})
    medallion.store.upsert({"targets": [by_day]})
    put_late_events("user_events/zz-later.jsonl", "later", 12, days=1)
    assert_run_succeeds(medallion, "user_events_etl", SPARK_REMOTE=connect)
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)
    details = medallion.stage_audit("gold_daily_aggregate")[-1]["details"]
    assert (details["mode"], details["days_recomputed"]) == ("incremental", 1), details


# Run inside another query (a view), an observed plan's metrics never reach a Connect client: the same empty
# Observation as when the server's 100 ms wait for them runs out under load (SPARK-54279).
METRICS_THAT_NEVER_ARRIVE = """
import json
from pyspark.sql import Observation, SparkSession, functions as F
from medallion_assets.engine.observed import Observed
spark = SparkSession.builder.getOrCreate()
frame = spark.range(10).withColumn("bad", F.col("id") % 3 == 0)
metrics = (F.count(F.lit(1)).alias("rows"), F.count(F.when(F.col("bad"), 1)).alias("bad"))
plain, observed = Observation(), Observed(frame, *metrics)
frame.observe(plain, *metrics).createOrReplaceTempView("plain")
observed.frame.createOrReplaceTempView("observed")
spark.sql("SELECT count(*) FROM plain UNION ALL SELECT count(*) FROM observed").collect()
print(json.dumps({"plain": plain.get, "observed": observed.result}))
"""


@ON_CONNECT
def test_counts_whose_observed_metrics_never_arrive_through_connect_are_computed_again(connect):
    """A bronze ingest read its counts from an Observation that Connect left empty, after its rows were
    committed and before its rejects were quarantined. The engine's counts come back whole."""
    run = subprocess.run(
        [sys.executable, "-c", METRICS_THAT_NEVER_ARRIVE],
        env={**os.environ, "SPARK_REMOTE": connect},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout) == {"plain": {}, "observed": {"rows": 10, "bad": 4}}


def put_late_events(key: str, prefix: str, count: int, days: int) -> None:
    """One raw object of `count` click events, numbered after `prefix`, over the first `days` days of 2026."""
    late = [
        {
            "event_id": f"{prefix}-{i}",
            "user_id": f"u{i % 7}",
            "event_type": "click",
            "event_ts": f"2026-01-0{1 + i % days}T09:00:00Z",
        }
        for i in range(count)
    ]
    body = "".join(json.dumps(event) + "\n" for event in late).encode()
    boto3.client("s3").put_object(Bucket="medallion-raw", Key=key, Body=body)


@ON_CONNECT
def test_gold_by_day_over_a_dimension_with_windows_equals_a_full_recompute_through_spark_connect(
    connect, tmp_path
):
    """tests/test_gold_microbatch.py's batches, through a Connect server: in a process of its own, since a
    Connect session serves one lake; the session has Medallion's settings, as a run's has."""
    script = (
        "import sys; from pathlib import Path; from medallion_assets.engine.spark import spark_session; "
        "from tests.test_gold_microbatch import build_day_by_day; "
        "build_day_by_day(spark_session(), Path(sys.argv[1]), seed=0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        env={**os.environ, "SPARK_REMOTE": connect},
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]


@ON_CONNECT
def test_drill_on_spark_connect_a_corrupt_object_and_a_new_field_are_healed(medallion, raw_data, connect):
    s3 = boto3.client("s3")
    s3.put_object(
        Bucket="medallion-raw",
        Key="user_events/zz-a-corrupt.jsonl",
        Body=b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4,
    )
    drift = "".join(
        json.dumps(
            {
                "event_id": f"drift-{i}",
                "user_id": f"u{i}",
                "event_type": "click",
                "event_ts": "2026-01-02T10:00:00Z",
                "device": "android",
            }
        )
        + "\n"
        for i in range(60)
    )
    s3.put_object(Bucket="medallion-raw", Key="user_events/zz-b-drift.jsonl", Body=drift.encode())
    assert_run_succeeds(medallion, "user_events_etl", SPARK_REMOTE=connect)
    healed = [
        (entry["details"]["rule"], entry["status"])
        for entry in medallion.store.audit_entries(event="healing")
    ]
    assert healed == [("corrupt_source_object", "retry"), ("source_schema_drift", "retry")]
    assert "device" in medallion.store.snapshot().sources["user_events_raw"].columns
    bronze = medallion.stage_audit("bronze_ingest")[-1]
    assert bronze["rows_read"] == raw_data.event_lines + 60
    assert medallion.gold("analytics.daily_user_events") == expected_daily_user_events(RAW)


def test_drill_a_warehouse_connection_lost_mid_load_reconnects_with_no_duplicates(
    medallion, raw_data, pg_database, spark_server
):
    # The healed load is retried at once, not after the seed's 30 s backoff, which would only add waiting.
    medallion.set_retries(3, backoff_sec=0)
    drill_a_warehouse_connection_lost_mid_load(
        medallion, pg_database, lambda: assert_run_succeeds(medallion, "user_events_etl", **spark_server)
    )


def test_a_connect_server_that_is_down_is_named_at_once(medallion):
    port = free_port()  # nothing listens there
    started = time.monotonic()
    code, report, stderr = medallion_run(
        medallion, "user_events_etl", SPARK_REMOTE=f"sc://127.0.0.1:{port}/;token=s3cret"
    )
    assert code == 1
    [bronze] = [asset for asset in report["assets"] if asset["key"] == "bronze/user_events"]
    assert bronze["reason"].startswith(
        f"SparkUnreachable: SPARK_REMOTE=sc://127.0.0.1:{port}: no Spark Connect server answers"
    )
    assert "s3cret" not in stderr + json.dumps(report)
    assert time.monotonic() - started < 300, "the client retried instead of failing"
    assert not medallion.stage_audit("bronze_ingest") or all(
        entry["status"] != "success" for entry in medallion.stage_audit("bronze_ingest")
    )


def test_a_connect_server_without_the_lake_runtime_fails_the_run_at_its_start(medallion, tmp_path):
    with connect_server(tmp_path, {}, lake_runtime=False) as url:
        code, report, stderr = medallion_run(medallion, "user_events_etl", SPARK_REMOTE=url)
    assert code == 1
    reasons = {asset["key"]: asset["reason"] for asset in report["assets"]}
    assert reasons["bronze/user_events"] == (
        f"SparkUnreachable: SPARK_REMOTE={url} lacks the lake's runtime (Iceberg's classes "
        "(org.apache.iceberg.spark.SparkCatalog), spark.sql.extensions="
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions): start it with "
        '--jars "$(ls jars/lib/*.jar | paste -sd,)" --conf spark.sql.extensions='
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions, as README.md's "
        "start-connect-server.sh command does (a cluster: jars/lib on its classpath)"
    )
    assert "Cannot find catalog plugin class" not in json.dumps(report) + stderr
    # No stage was attempted: nothing ingested, nothing audited as run, no table written.
    assert not medallion.store.processed_objects("user_events_raw")
    assert not medallion.stage_audit("bronze_ingest")
    assert not list(Path(medallion.lake).rglob("*.parquet"))


def test_a_lake_the_spark_server_cannot_see_is_refused_before_anything_is_written(
    medallion, tmp_path, s3_endpoint
):
    hidden = tmp_path / "not-shared"
    hidden.mkdir()
    medallion.lake = hidden / "lake"
    with connect_server(tmp_path, {}, hidden=hidden) as url:
        code, report, stderr = medallion_run(medallion, "user_events_etl", SPARK_REMOTE=url)
    assert code == 1
    expected = (
        f"MEDALLION_LAKE_URL={medallion.lake} is a folder on this machine that the Spark executors "
        f"(SPARK_REMOTE={url}) cannot see"
    )
    [bronze] = [asset for asset in report["assets"] if asset["key"] == "bronze/user_events"]
    assert expected in bronze["reason"]
    assert not list(medallion.lake.rglob("*.parquet"))
    assert not medallion.store.processed_objects("user_events_raw")
