"""Benchmark: what monitoring costs.

(a) A notification sensor tick over a generated catalog of 500 pipelines (3 stages each, every dataset with an
    SLA, 11 notification rows) and 30 days of audit history (one run a day: 45,000 stage entries). The tick
    reads the catalog, judges 1,500 SLAs, reads new audit entries and failed Dagster runs (a real instance),
    and delivers to a webhook on loopback. Measured: the first tick (25 missed SLAs and 10 halts to tell) and
    steady ticks (nothing new). Baseline, same run: one `store.snapshot()`, the catalog read every sensor
    makes. The volume check's own cost is measured too: judging all 1,500 stages against their last 14 runs.
(b) Delivery off the run's path: the seed's user_events_etl run with no notification rows, and with rows that
    point at a webhook that accepts connections and never answers, while a thread ticks the notification
    sensor every second (each delivery attempt then hangs for its 10 s timeout). Runs alternate; the ratio of
    median run times is the cost delivery adds to a run, and the CPU the sensor's thread used (what it can
    take from a run in the same process; a daemon runs it in another) is reported as a share of the run.

    .venv/bin/python bench/monitoring.py            # (a), and (b) with 3 runs per mode
    .venv/bin/python bench/monitoring.py --quick    # (b) with 1 run per mode
    .venv/bin/python bench/monitoring.py --catalog-url postgresql://postgres@127.0.0.1:5432/bench_monitoring
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from dagster import DagsterInstance, instance_for_test
from sqlalchemy import insert

from medallion_assets.catalog.models import Notification, Pipeline, Source, Stage, Target, VolumeBand
from medallion_assets.catalog.schema import audit_log
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.monitoring.anomalies import volume_verdicts
from medallion_assets.definitions import build_definitions
from medallion_assets.loading import validate_files
from medallion_assets.local_s3 import local_s3
from medallion_assets.runner import run_pipeline
from medallion_assets.sample_data import write_sample_data
from medallion_assets.sensors.notifications import notification_tick

SEED = Path(__file__).resolve().parents[1] / "metadata_seed"
HOOK_ENV = "MEDALLION_BENCH_WEBHOOK_URL"
PIPELINES, DAYS, TEAMS = 500, 30, 10
STAGES = (("bronze", "ingest"), ("silver", "clean"), ("gold", "publish"))


class Recorder(BaseHTTPRequestHandler):
    received = 0

    def do_POST(self):  # noqa: N802 — http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        Recorder.received += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def generated_catalog(store: CatalogStore) -> None:
    rows: dict[str, list] = {
        name: [] for name in ("pipelines", "sources", "targets", "stages", "notifications")
    }
    for p in range(PIPELINES):
        pid = f"p{p:03d}"
        sla = {"max_stale_minutes": 1560} if p % 2 else {"expected_by": "06:00", "window_minutes": 1440}
        rows["pipelines"].append(
            Pipeline(pipeline_id=pid, owner=f"team:t{p % TEAMS}", sla=sla, volume_band=VolumeBand())
        )
        rows["sources"].append(
            Source(
                source_id=f"{pid}_raw",
                s3_path=f"s3://bench/{pid}/",
                file_format="jsonl",
                columns={"id": "string"},
            )
        )
        upstream = f"{pid}_raw"
        for order, (layer, name) in enumerate(STAGES, start=1):
            target = f"{pid}_{layer}"
            rows["targets"].append(Target(target_id=target, layer=layer))
            rows["stages"].append(
                Stage(
                    pipeline_id=pid,
                    stage_order=order,
                    stage_name=name,
                    input_id=upstream,
                    target_id=target,
                    transform_sql=f"SELECT * FROM {upstream}" if layer == "gold" else None,
                )
            )
            upstream = target
    events = ["run_failed", "stage_halted", "sla_missed", "volume_anomaly"]
    rows["notifications"] = [
        Notification(notification_id="ops", events=events, channel="webhook", params={"url_env": HOOK_ENV})
    ] + [
        Notification(
            notification_id=f"team_t{t}",
            events=events,
            scope="owner",
            scope_id=f"team:t{t}",
            channel="webhook",
            params={"url_env": HOOK_ENV},
        )
        for t in range(TEAMS)
    ]
    store.upsert(rows)


def generated_history(store: CatalogStore, now: datetime) -> None:
    """A run a day per pipeline for 30 days, the last two hours ago; 25 pipelines stopped three days ago
    (their SLAs are missed); 10 stages halted half an hour ago (new events for the first tick)."""
    entries = []
    for p in range(PIPELINES):
        last_day = 3 if p < 25 else 0
        for day in range(last_day, DAYS):
            at = now - timedelta(days=day, hours=2)
            for layer, name in STAGES:
                rows = 10_000 + (day * 37 + p) % 200
                entries.append(
                    dict(
                        run_id=f"r{p}-{day}",
                        pipeline_id=f"p{p:03d}",
                        stage_name=name,
                        dataset=f"p{p:03d}_{layer}",
                        event="stage",
                        status="success",
                        rows_read=rows,
                        rows_written=rows,
                        rows_quarantined=0,
                        duration_sec=3.0,
                        created_at=at,
                        details={"dq_rate": 1.0},
                    )
                )
    halts = []
    for p in range(100, 110):
        halts.append(
            dict(
                run_id=f"halted-{p}",
                pipeline_id=f"p{p:03d}",
                stage_name="clean",
                dataset=f"p{p:03d}_silver",
                event="stage",
                status="halted",
                error="pipeline disabled",
                created_at=now - timedelta(minutes=30),
            )
        )
    with store.engine.begin() as connection:
        for start in range(0, len(entries), 5000):
            connection.execute(insert(audit_log), entries[start : start + 5000])
        connection.execute(insert(audit_log), halts)


def timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - started, result


def sensor_tick(catalog_url: str | None) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ[HOOK_ENV] = f"http://127.0.0.1:{server.server_port}/hook"
    with tempfile.TemporaryDirectory() as folder:
        store = CatalogStore(catalog_url or f"sqlite:///{folder}/catalog.db")
        store.migrate()
        now = datetime.now(UTC)
        generated_catalog(store)
        generated_history(store, now)
        snapshot_times = [timed(store.snapshot)[0] for _ in range(5)]
        with instance_for_test() as instance:
            first, (cursor, summary) = timed(notification_tick, instance, store, None)
            steady = []
            for _ in range(5):
                seconds, (cursor, steady_summary) = timed(notification_tick, instance, store, cursor)
                steady.append(seconds)
        band = VolumeBand()
        counts = {"rows_read": 1_000, "rows_written": 1_000}
        started = time.perf_counter()
        for p in range(PIPELINES):
            for _, name in STAGES:
                volume_verdicts(store, f"p{p:03d}", name, counts, band)
        all_stages = time.perf_counter() - started
    server.shutdown()
    baseline = statistics.median(snapshot_times)
    print(
        f"(a) {PIPELINES} pipelines, {PIPELINES * len(STAGES)} datasets with SLAs, {DAYS} days of audit "
        f"history ({store.engine.dialect.name} catalog)"
    )
    print(f"    baseline, one catalog snapshot: {baseline * 1000:.0f} ms")
    print(
        f"    first tick: {first * 1000:.0f} ms ({first / baseline:.1f}× the snapshot): {summary}; "
        f"webhook received {Recorder.received}"
    )
    print(
        f"    steady tick (median of 5): {statistics.median(steady) * 1000:.0f} ms "
        f"({statistics.median(steady) / baseline:.1f}× the snapshot): {steady_summary}"
    )
    print(
        f"    volume bands for all {PIPELINES * len(STAGES)} stages: {all_stages * 1000:.0f} ms "
        f"({all_stages / (PIPELINES * len(STAGES)) * 1000:.2f} ms per stage, what each stage's check adds)"
    )


def hanging_server() -> socket.socket:
    """Accepts connections (the kernel's backlog does) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    return listener


def tick_every_second(
    instance: DagsterInstance, store: CatalogStore, stop: threading.Event, sensor_cpu: list[float]
) -> None:
    """Tick the notification sensor every second until `stop` is set; then add the CPU seconds this thread
    used to `sensor_cpu`."""
    cursor, cpu_started = None, time.thread_time()
    while not stop.is_set():
        # A failed stage would do; a halt is quicker to make: each tick sends one more.
        store.record_audit(
            pipeline_id="user_events_etl",
            stage_name="silver_clean",
            event="stage",
            status="halted",
            error="bench",
        )
        cursor, _ = notification_tick(instance, store, cursor)
        stop.wait(1)
    sensor_cpu.append(time.thread_time() - cpu_started)


def delivery_off_the_run_path(rows: int, repetitions: int) -> None:
    listener = hanging_server()
    os.environ[HOOK_ENV] = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    os.environ["OPENLINEAGE_DISABLED"] = "true"  # lineage emission has its own benchmark
    times: dict[str, list[float]] = {"none": [], "hanging webhook": []}
    cpu_share: dict[str, list[float]] = {mode: [] for mode in times}
    with local_s3(buckets=("medallion-raw",)):
        write_sample_data("s3://medallion-raw", rows)
        for repetition in range(repetitions + 1):  # the first round warms Spark up, untimed
            for mode in times:
                with tempfile.TemporaryDirectory() as folder:
                    store = CatalogStore(f"sqlite:///{folder}/catalog.db")
                    store.migrate()
                    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
                    if mode == "none":
                        store.upsert({}, remove={"notifications": [("ops_webhook",)]})
                    else:
                        os.environ["MEDALLION_ALERT_WEBHOOK_URL"] = os.environ[HOOK_ENV]
                    defs = build_definitions(store.url, f"{folder}/lake", f"duckdb:///{folder}/wh.duckdb")
                    with instance_for_test() as instance:
                        stop, sensor_cpu = threading.Event(), []
                        ticker = threading.Thread(
                            target=tick_every_second, args=(instance, store, stop, sensor_cpu), daemon=True
                        )
                        ticker.start()
                        started = time.perf_counter()
                        report = run_pipeline(defs, store.snapshot(), store, "user_events_etl", instance)
                        seconds = time.perf_counter() - started
                        stop.set()
                        ticker.join()
                    assert report.status == "success", report
                    if repetition:
                        times[mode].append(seconds)
                        cpu_share[mode].append(sensor_cpu[0] / seconds)
    listener.close()
    baseline = statistics.median(times["none"])
    hanging = statistics.median(times["hanging webhook"])
    print(f"(b) user_events_etl, {rows} events, {repetitions} run(s) per mode, a sensor tick every second:")
    print(
        f"    median run: no notifications {baseline:.2f} s, webhook that never answers {hanging:.2f} s "
        f"(ratio {hanging / baseline:.3f})"
    )
    for mode, seconds in times.items():
        print(
            f"    {mode}: runs " + ", ".join(f"{s:.2f} s" for s in seconds) + "; the sensor thread's CPU, "
            f"share of the run (median): {statistics.median(cpu_share[mode]):.2%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--catalog-url", help="catalog for (a); default: a fresh SQLite file")
    parser.add_argument("--rows", type=int, default=20_000, help="events for (b)")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sensor_tick(args.catalog_url)
    delivery_off_the_run_path(args.rows, 1 if args.quick else args.repetitions)


if __name__ == "__main__":
    main()
