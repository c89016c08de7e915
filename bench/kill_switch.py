"""Benchmark: how fast a kill switch takes effect.

(a) Queued runs: runs queued on a real Dagster instance (QueuedRunCoordinator) for user_events_etl; a thread
    ticks the control sensor every --interval seconds, as the daemon does; the flag is flipped by a plain SQL
    UPDATE at a random moment of the interval. Measured: flip → run CANCELED. Baseline: the interval itself
    (the expected wait is about half of it, plus one sensor evaluation).
(b) A running run: user_events_etl materializes sample data from a loopback S3 API; the pipeline is disabled
    by SQL as soon as the bronze stage has committed. Measured: flip → the next stage recorded as halted, and
    how many stages still ran after the flip (the goal is none: the next stage boundary stops it).

    python bench/kill_switch.py            # 5 flips at the default 5 s interval
    python bench/kill_switch.py --quick    # 2 flips
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from dagster import DagsterRunStatus, build_sensor_context, instance_for_test
from sqlalchemy import text

from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.config import DEFAULT_SENSOR_INTERVAL_SECONDS
from medallion_assets.dagster_compat import (
    RegisteredCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from medallion_assets.definitions import build_definitions
from medallion_assets.loading import validate_files
from medallion_assets.local_s3 import local_s3
from medallion_assets.runner import run_pipeline
from medallion_assets.sample_data import write_sample_data
from medallion_assets.sensors.control import cancel_disabled_queued_runs

SEED = Path(__file__).resolve().parents[1] / "metadata_seed"
QUEUED_COORDINATOR = {"run_coordinator": {"module": "dagster", "class": "QueuedRunCoordinator"}}


def set_pipeline_enabled(store: CatalogStore, enabled: bool) -> None:
    with store.engine.begin() as connection:
        connection.execute(
            text("UPDATE pipelines SET enabled = :on WHERE pipeline_id = 'user_events_etl'"), {"on": enabled}
        )


def new_store(folder: str) -> CatalogStore:
    store = CatalogStore(f"sqlite:///{folder}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    return store


def queued_cancel_latency(store: CatalogStore, folder: str, interval: float) -> float:
    defs = build_definitions(store.url, f"{folder}/lake", f"duckdb:///{folder}/wh.duckdb")
    job = defs.resolve_implicit_global_asset_job_def()
    snapshot = store.snapshot()
    key = MedallionTranslator().get_asset_key(snapshot.targets["gold_daily_user_events"])
    origin = RemoteJobOrigin(
        RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("medallion"), "__repository__"), job.name
    )
    set_pipeline_enabled(store, True)
    with instance_for_test(overrides=QUEUED_COORDINATOR) as instance:
        run_id = instance.create_run_for_job(
            job_def=job,
            asset_selection=frozenset({key}),
            status=DagsterRunStatus.QUEUED,
            remote_job_origin=origin,
        ).run_id
        stop = threading.Event()

        def daemon() -> None:
            context = build_sensor_context(instance=instance)
            while not stop.is_set():
                cancel_disabled_queued_runs(context, snapshot, store, MedallionTranslator())
                stop.wait(interval)

        ticker = threading.Thread(target=daemon, daemon=True)
        ticker.start()
        time.sleep(random.uniform(0, interval))
        flipped = time.perf_counter()
        set_pipeline_enabled(store, False)
        while instance.get_run_by_id(run_id).status not in (
            DagsterRunStatus.CANCELED,
            DagsterRunStatus.CANCELING,
        ):
            time.sleep(0.01)
        latency = time.perf_counter() - flipped
        stop.set()
        ticker.join()
    return latency


def running_halt(folder: str, rows: int) -> tuple[float, int]:
    """Disable the pipeline the moment bronze commits; returns (flip → halt seconds, stages run after)."""
    store = new_store(folder)
    with local_s3(buckets=("medallion-raw",)):
        write_sample_data("s3://medallion-raw", rows)
        defs = build_definitions(store.url, f"{folder}/lake", f"duckdb:///{folder}/wh.duckdb")
        latency: list[float] = []

        def flip_after_bronze() -> None:
            while not store.audit_entries(stage_name="bronze_ingest", status="success"):
                time.sleep(0.005)
            set_pipeline_enabled(store, False)
            flipped = time.perf_counter()
            while not store.audit_entries(status="halted"):
                time.sleep(0.005)
            latency.append(time.perf_counter() - flipped)

        watcher = threading.Thread(target=flip_after_bronze, daemon=True)
        watcher.start()
        with instance_for_test() as instance:
            report = run_pipeline(defs, store.snapshot(), store, "user_events_etl", instance)
        watcher.join()
    assert report.status == "halted", report
    ran_after_flip = [
        e["stage_name"]
        for e in store.audit_entries(event="stage", status="success")
        if e["stage_name"] != "bronze_ingest"
    ]
    return latency[0], len(ran_after_flip)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--flips", type=int, default=5)
    parser.add_argument("--interval", type=float, default=DEFAULT_SENSOR_INTERVAL_SECONDS)
    parser.add_argument("--rows", type=int, default=20_000, help="events for the running-run measurement")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    flips = 2 if args.quick else args.flips
    with tempfile.TemporaryDirectory() as folder:
        store = new_store(folder)
        latencies = [queued_cancel_latency(store, folder, args.interval) for _ in range(flips)]
    print(
        f"(a) queued run cancelled after a flag update, sensor interval {args.interval:.0f} s, {flips} flips:"
    )
    print(
        f"    median {statistics.median(latencies):.2f} s, max {max(latencies):.2f} s, "
        f"median/interval {statistics.median(latencies) / args.interval:.2f}"
    )
    with tempfile.TemporaryDirectory() as folder:
        flip_to_halt, ran_after = running_halt(folder, args.rows)
    print(
        f"(b) running run: halted {flip_to_halt:.2f} s after the flip; stages run after the flip: {ran_after}"
    )


if __name__ == "__main__":
    main()
