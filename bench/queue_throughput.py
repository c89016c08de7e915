"""Benchmark: the run queue of a team deployment, fed by the launcher sensor.

A PostgreSQL-backed instance (the shipped dagster.yaml merged with deploy/postgres.yaml, as `medallion
instance init --postgres` writes it), a real `dagster-daemon run` with the queued run coordinator, and a
catalog of `--runs` tiny pipelines: one bronze stage each, ingesting one small JSONL object from the loopback
S3 server, so the measurement is about the queue, not the data. Their sources live in `--pools` buckets, so
each pipeline's step draws on one of `--pools` concurrency pools (source_<bucket>); criticality and expected
cost vary, so the launcher gives the runs a spread of `dagster/priority` values. The launcher sensor is turned
on as docs/operations.md tells an operator to, and enqueues every pipeline (new data in its source) in the
order its plan gives, within each pool's limit; the daemon dequeues and launches each run in a run worker of
its own.

Reported from Dagster's own run records and events, once every run has ended:
- runs dequeued per minute: runs over the time from the first RUN_STARTING event (the daemon's dequeue) to
  the last (and, as its baseline in the same run, runs finished per minute over the same window: the queue
  cannot dequeue faster than runs end once it is full);
- per pool, Spearman's rank correlation between the scheduling policy's order and dequeue order: 1.0 when
  every run of the pool left the queue in that order (goal >= 0.95; ties take their mean rank). The policy's
  order is its score when the pipelines became due, all at once here (criticality weight / expected cost).
  The `dagster/priority` tag of each run is that score aged by the minutes it waited
  (control/steering/scheduling.py, rule 1), so tags of runs launched minutes apart are not comparable; their
  correlation is printed too.

Also reported: a run worker's start, from Dagster's events of each run: RUN_STARTING (the daemon launched the
run) to RUN_START (the worker process is up, has loaded its code location and begun the run) and to the first
STEP_START. The pipelines live in one domain, one code location (the layout `medallion workspace` writes),
padded with `--domain-datasets` worth of idle pipelines shaped like user_events_etl (disabled, so never
launched), so that each run worker rebuilds a domain of that size. With `--remote`, the steps run on a Spark
Connect server on loopback (started from the pyspark wheel), so a run worker holds no JVM of its own.

    python bench/queue_throughput.py                       # 200 runs, 4 pools, 4 concurrent runs
    python bench/queue_throughput.py --runs 24 --pools 2   # a check that everything works

Needs the PostgreSQL server at 127.0.0.1:5432 (user postgres, trust; MEDALLION_BENCH_PG_URL to override) and
Java for Spark. Two databases are created for the run and dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from pathlib import Path
from urllib.parse import urlparse

import boto3
import psycopg2
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, EventLogEntry, RunsFilter
from scipy.stats import spearmanr

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.definitions import DATASETS_PER_PIPELINE  # noqa: E402
from bench.definitions import catalog_rows as idle_rows  # noqa: E402
from medallion_assets.catalog.models import Pipeline, Source, Stage, Target  # noqa: E402
from medallion_assets.catalog.store import CatalogStore  # noqa: E402
from medallion_assets.control.steering.scheduling import SchedulingPolicy, Work  # noqa: E402
from medallion_assets.instance import instance_config, write_instance_config  # noqa: E402
from medallion_assets.local_s3 import local_s3  # noqa: E402
from medallion_assets.locations import write_workspace  # noqa: E402
from medallion_assets.sensors.launcher import PIPELINE_TAG, PRIORITY_TAG  # noqa: E402
from tests.spark_servers import connect_server  # noqa: E402

BIN = Path(sys.executable).parent
CRITICALITIES = ("high", "normal", "low")
DOMAIN = "queue"
# The idle pipelines' sources (bench/definitions.py's) name this bucket; it stays empty.
IDLE_BUCKET = "bench-raw"
ENDED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
FAILURES = {DagsterEventType.RUN_FAILURE, DagsterEventType.STEP_FAILURE, DagsterEventType.ENGINE_EVENT}
EVENT = (
    '{"event_id": "e1", "user_id": "u1", "event_type": "click", "event_ts": "2024-01-01T00:00:00Z", '
    '"value": 1.5}\n'
)


def catalog_rows(runs: int, pools: int, domain_datasets: int) -> dict[str, list]:
    """`runs` one-stage pipelines, each reading its own prefix of one of `pools` buckets; criticality and
    expected cost cycle at different periods, so the launcher's scores (weight / cost) spread. Idle
    pipelines fill their domain up to `domain_datasets` datasets."""
    idle = max(0, domain_datasets - 2 * runs) // DATASETS_PER_PIPELINE
    rows = idle_rows(idle)
    # Disabled: the launcher would start them to make their gold, never made; the location builds them all.
    rows["pipelines"] = [p.model_copy(update={"domain": DOMAIN, "enabled": False}) for p in rows["pipelines"]]
    for n in range(runs):
        p = f"q{n:04d}"
        rows["pipelines"].append(
            Pipeline(
                pipeline_id=p,
                domain=DOMAIN,
                owner="team:bench",
                criticality=CRITICALITIES[n % 3],
                expected_cost=round(0.1 * (1 + (n * 7) % 40), 1),
            )
        )
        rows["sources"].append(
            Source(
                source_id=f"{p}_raw",
                s3_path=f"s3://{bucket(n % pools)}/{p}/",
                file_format="jsonl",
                columns={
                    "event_id": "string",
                    "user_id": "string",
                    "event_type": "string",
                    "event_ts": "string",
                    "value": "double",
                },
            )
        )
        rows["targets"].append(Target(target_id=f"bronze_{p}", layer="bronze"))
        rows["stages"].append(
            Stage(
                pipeline_id=p,
                stage_order=1,
                stage_name="bronze_ingest",
                input_id=f"{p}_raw",
                target_id=f"bronze_{p}",
            )
        )
    return rows


def bucket(pool: int) -> str:
    return f"bench-queue-{pool}"


@contextmanager
def database(admin_url: str):
    """A new PostgreSQL database, dropped on exit; yields its URL."""
    name = f"medallion_bench_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name}")
    try:
        yield urlparse(admin_url)._replace(path=f"/{name}").geturl()
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def wait_for(what: str, check, deadline: float):
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        if result := check():
            return result
        time.sleep(2)
    raise SystemExit(f"gave up waiting for {what}")


def first_times(events: dict[str, list[EventLogEntry]], kind: DagsterEventType) -> dict[str, float]:
    """Per run that has one, when its first event of `kind` was written."""
    return {
        run_id: min(times)
        for run_id, entries in events.items()
        if (times := [entry.timestamp for entry in entries if entry.dagster_event_type == kind])
    }


def measure(
    runs: int, pools: int, max_concurrent: int, deadline: float, domain_datasets: int, remote: bool
) -> dict:
    admin_url = os.environ.get("MEDALLION_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    with (
        tempfile.TemporaryDirectory(prefix="medallion-bench-queue-") as folder,
        database(admin_url) as catalog_url,
        database(admin_url) as dagster_url,
        local_s3((*(bucket(pool) for pool in range(pools)), IDLE_BUCKET)),
        # Started once the S3 endpoint is in the environment: its executors fetch the raw objects.
        connect_server(Path(folder), {}) if remote else nullcontext(None) as spark_remote,
    ):
        if spark_remote:
            os.environ["SPARK_REMOTE"] = spark_remote
        workspace = write_workspace(Path(folder) / "workspace.yaml", [DOMAIN])
        storage = urlparse(dagster_url)
        os.environ.update(
            {
                "DAGSTER_HOME": f"{folder}/dagster",
                "DAGSTER_PG_HOST": storage.hostname,
                "DAGSTER_PG_PORT": str(storage.port),
                "DAGSTER_PG_DB": storage.path.lstrip("/"),
                "DAGSTER_PG_USER": storage.username,
                "DAGSTER_PG_PASSWORD": storage.password or "",
                "MEDALLION_CATALOG_URL": catalog_url,
                "MEDALLION_WAREHOUSE_URL": catalog_url,
                "MEDALLION_LAKE_URL": f"{folder}/lake",
            }
        )
        config = instance_config(postgres=True)
        config["concurrency"]["runs"]["max_concurrent_runs"] = max_concurrent
        write_instance_config(Path(folder) / "dagster", config, postgres=True)
        store = CatalogStore(catalog_url)
        store.migrate()
        rows = catalog_rows(runs, pools, domain_datasets)
        store.upsert(rows)
        s3 = boto3.client("s3")
        queued = [
            source for source in rows["sources"] if not source.s3_path.startswith(f"s3://{IDLE_BUCKET}/")
        ]
        for n, source in enumerate(queued):
            s3.put_object(
                Bucket=bucket(n % pools),
                Key=f"{source.source_id.removesuffix('_raw')}/events.jsonl",
                Body=EVENT.encode(),
            )
        pool_of = {
            p.pipeline_id: f"source_{bucket(n % pools).replace('-', '_')}"
            for n, p in enumerate(p for p in rows["pipelines"] if p.pipeline_id.startswith("q"))
        }

        instance = DagsterInstance.get()
        with open(f"{folder}/daemon.log", "wb") as log:
            daemon = subprocess.Popen(
                [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
                cwd=REPO,
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            started = subprocess.run(
                [str(BIN / "dagster"), "sensor", "start", "medallion_launcher", "-w", str(workspace)],
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            if started.returncode:
                raise SystemExit(f"the launcher sensor did not start:\n{started.stderr[-3000:]}")
            wait_for(
                f"{runs} runs to end",
                lambda: instance.get_runs_count(RunsFilter(statuses=ENDED)) >= runs,
                deadline,
            )
        finally:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        # The policy's order of the pipelines when they all became due together (no aging yet): the order
        # the launcher and the queue should start them in. The priority tags also carry each run's aging.
        policy = SchedulingPolicy.from_snapshot(store.snapshot())
        due_order = {
            p.pipeline_id: policy.score(Work(p.pipeline_id, p.criticality, p.expected_cost, (), 0.0), 0.0)
            for p in rows["pipelines"]
        }
        records = instance.get_run_records()
        events = {r.dagster_run.run_id: instance.all_logs(r.dagster_run.run_id) for r in records}
        # When the coordinator took each run off the queue: Dagster 1.13 declares RUN_DEQUEUED but never
        # emits it; the daemon's RUN_STARTING event marks the dequeue and launch.
        dequeued = first_times(events, DagsterEventType.RUN_STARTING)
        # A run worker's start: from the daemon's launch to the worker's first RUN_START, and STEP_START.
        worker_start = {
            until: [seconds - dequeued[run_id] for run_id, seconds in first_times(events, until).items()]
            for until in (DagsterEventType.RUN_START, DagsterEventType.STEP_START)
        }
        first_run = min(dequeued, key=dequeued.__getitem__)
        timeline = [
            (
                event.timestamp - dequeued[first_run],
                event.dagster_event_type or "log",
                str(event.message)[:120],
            )
            for event in events[first_run]
        ]
        problems = {
            record.dagster_run.run_id: f"{record.dagster_run.status.value}: "
            + "; ".join(
                str(event.message)[:300]
                for event in events[record.dagster_run.run_id]
                if event.is_dagster_event and event.dagster_event_type in FAILURES
            )
            for record in records
            if record.dagster_run.status != DagsterRunStatus.SUCCESS
        }
        instance.dispose()
        store.engine.dispose()
    return {
        **summarize(records, dequeued, pool_of, due_order),
        "worker_start": worker_start,
        "problems": problems,
        "timeline": timeline,
    }


def summarize(
    records, dequeued: dict[str, float], pool_of: dict[str, str], due_order: dict[str, float]
) -> dict:
    """Dequeue rate against the finish rate over the same window, and per pool the rank correlation between
    the policy's order and dequeue order, and between the runs' priority tags and dequeue order."""
    first, last = min(dequeued.values()), max(dequeued.values())
    minutes = (last - first) / 60
    finished = sum(1 for r in records if r.end_time and first <= r.end_time <= last)
    by_pool: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for record in records:
        run = record.dagster_run
        if run.run_id not in dequeued:  # never launched (cancelled in the queue): reported with the problems
            continue
        pipeline = run.tags[PIPELINE_TAG]
        by_pool[pool_of[pipeline]].append(
            (dequeued[run.run_id], due_order[pipeline], int(run.tags[PRIORITY_TAG]))
        )
    correlations, tagged = {}, {}
    for pool, runs in sorted(by_pool.items()):
        order = sorted(runs)
        # Highest first against dequeue order: +1 when the runs left the queue exactly in that order.
        correlations[pool] = spearmanr([-score for _, score, _ in order], range(len(order))).statistic
        tagged[pool] = spearmanr([-priority for _, _, priority in order], range(len(order))).statistic
    return {
        "spearman_tagged": tagged,
        "runs": len(records),
        "succeeded": sum(r.dagster_run.status == DagsterRunStatus.SUCCESS for r in records),
        "dequeued_per_minute": len(dequeued) / minutes if minutes else float("inf"),
        "finished_per_minute": finished / minutes if minutes else float("inf"),
        "minutes": minutes,
        "spearman": correlations,
        "priorities": {pool: sorted({p for _, _, p in runs}) for pool, runs in by_pool.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="pipelines, one run each (default 200)")
    parser.add_argument("--pools", type=int, default=4, help="source systems, one pool each (default 4)")
    parser.add_argument(
        "--max-concurrent",
        type=int,
        default=4,
        help="the queue's max_concurrent_runs (default 4: each run worker starts a JVM)",
    )
    parser.add_argument("--deadline", type=float, default=7200, help="seconds to wait for every run to end")
    parser.add_argument(
        "--domain-datasets",
        type=int,
        default=1000,
        help="datasets in the one domain (code location) that each run worker rebuilds (default 1000)",
    )
    parser.add_argument("--remote", action="store_true", help="run the steps on a Spark Connect server")
    args = parser.parse_args()
    result = measure(
        args.runs, args.pools, args.max_concurrent, args.deadline, args.domain_datasets, args.remote
    )
    print(
        f"{result['runs']} runs ({result['succeeded']} succeeded) through the queue ({args.pools} pools, "
        f"max_concurrent_runs {args.max_concurrent}), dequeued over {result['minutes']:.1f} min:"
    )
    print(
        f"  dequeued per minute {result['dequeued_per_minute']:.2f};  finished per minute (baseline, same "
        f"window) {result['finished_per_minute']:.2f};  ratio "
        f"{result['dequeued_per_minute'] / result['finished_per_minute']:.2f}"
    )
    for pool, rho in result["spearman"].items():
        print(
            f"  {pool}: Spearman(policy order when due, dequeue order) {rho:.3f};  Spearman(priority tag, "
            f"dequeue order) {result['spearman_tagged'][pool]:.3f}  (tags {result['priorities'][pool]})"
        )
    print(
        f"  lowest: {min(result['spearman'].values()):.3f} (goal >= 0.95); median "
        f"{statistics.median(result['spearman'].values()):.3f}"
    )
    print("  the first run's events, seconds after its launch:")
    for seconds, kind, message in result["timeline"]:
        print(f"    {seconds:7.2f}  {kind}: {message}")
    for run_id, problem in result["problems"].items():
        print(f"  run {run_id} {problem}")
    for until, seconds in result["worker_start"].items():
        ordered = sorted(seconds)
        print(
            f"  run worker start, RUN_STARTING to {until.value}: median {statistics.median(ordered):.2f} s, "
            f"min {ordered[0]:.2f} s, max {ordered[-1]:.2f} s "
            f"({len(ordered)} runs; a domain of {args.domain_datasets:,} datasets)"
        )


if __name__ == "__main__":
    main()
