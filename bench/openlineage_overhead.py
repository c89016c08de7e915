"""Benchmark: what OpenLineage emission costs a pipeline run, and what a broken endpoint costs it.

The seed pipeline user_events_etl runs on `--rows` raw events (written once, untimed, to an S3 API server on
loopback) in four emission modes, alternating their order from one repetition to the next:

- off:        OPENLINEAGE_DISABLED=true, the baseline;
- file:       the file transport, one JSON file per event (what Medallion does with no configuration);
- http-hang:  the http transport to a server on loopback that never answers (the client's 5 s timeout runs
  out);
- http-500:   the http transport to a server on loopback that answers every event with 500.

Each run starts from a fresh SQLite catalog (loaded untimed), lake and DuckDB warehouse, so every run ingests
everything, and times `build_definitions` + `run_pipeline` on an ephemeral Dagster instance; the process's
emitter is rebuilt for the mode before the run. After the run, the emitter is closed (its flush, at most
MEDALLION_OPENLINEAGE_FLUSH_SEC, happens at process exit in real use and is reported apart). `off` disables
the transport only: a run still builds its events, whose cost is measured apart. Each run must succeed;
the broken endpoints must leave a warning in the log. Prints the median run time per mode, its ratio to `off`,
and the median of the ratios paired within a repetition (the runs next to each other, which a busy machine
disturbs alike): goals file ≤ 1.02, http-hang and http-500 ≤ 1.05.

    python bench/openlineage_overhead.py               # 50,000 events, 4 repetitions
    python bench/openlineage_overhead.py --quick       # 10,000 events, 2 repetitions
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from dagster import DagsterInstance

from medallion_assets.catalog.store import CatalogStore
from medallion_assets.definitions import build_definitions
from medallion_assets.engine.spark import spark_session
from medallion_assets.engine.stage import StageOutcome
from medallion_assets.loading import validate_files
from medallion_assets.local_s3 import local_s3
from medallion_assets.openlineage import emitter, events
from medallion_assets.runner import run_pipeline
from medallion_assets.sample_data import write_sample_data
from medallion_assets.storage.lake.layout import table_of
from medallion_assets.storage.lake.root import Lake

SEED = Path(__file__).resolve().parents[1] / "metadata_seed"
BUCKET, PIPELINE = "medallion-raw", "user_events_etl"
MODES = ("off", "file", "http-hang", "http-500")
GOALS = {"file": 1.02, "http-hang": 1.05, "http-500": 1.05}
WARM_UP_RUNS = 3


class _BrokenEndpoint(BaseHTTPRequestHandler):
    """Hangs for good (`hang`), or answers 500 at once."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.hang:
            self.server.stopping.wait()
            return
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _serve_broken(hang: bool, ports) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BrokenEndpoint)
    server.daemon_threads, server.hang, server.stopping = True, hang, threading.Event()
    ports.put(server.server_port)
    server.serve_forever()


@contextmanager
def broken_endpoint(hang: bool) -> Iterator[str]:
    """The endpoint in a process of its own, as a real one would be: its threads do not compete with the
    run's."""
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    process = context.Process(target=_serve_broken, args=(hang, ports), daemon=True)
    process.start()
    try:
        yield f"http://127.0.0.1:{ports.get(timeout=60)}"
    finally:
        process.kill()
        process.join()


class Warnings(logging.Handler):
    """Collects the emitter's warnings."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def mode_environment(mode: str, scratch: Path, endpoints: dict[str, str]) -> dict[str, str]:
    if mode == "off":
        return {"OPENLINEAGE_DISABLED": "true"}
    if mode == "file":
        (scratch / "openlineage").mkdir(exist_ok=True)
        return {
            "OPENLINEAGE__TRANSPORT__TYPE": "file",
            "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(scratch / "openlineage" / "event"),
        }
    return {"OPENLINEAGE_URL": endpoints[mode]}


def run_once(mode: str, scratch: Path, endpoints: dict[str, str], warnings: Warnings) -> dict:
    """One timed run in `mode` from an empty catalog, lake and warehouse."""
    for name in [n for n in os.environ if n.startswith("OPENLINEAGE")]:
        del os.environ[name]
    os.environ.update(mode_environment(mode, scratch, endpoints))
    sent = emitter.reconfigure_emitter()
    workdir = Path(tempfile.mkdtemp(dir=scratch))
    store = CatalogStore(f"sqlite:///{workdir / 'catalog.db'}")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    warned = len(warnings.messages)

    start = time.perf_counter()
    defs = build_definitions(store.url, str(workdir / "lake"), f"duckdb:///{workdir / 'warehouse.duckdb'}")
    report = run_pipeline(defs, store.snapshot(), store, PIPELINE, DagsterInstance.ephemeral())
    total = time.perf_counter() - start
    assert report.status == "success", report

    start = time.perf_counter()
    sent.close()
    flush = time.perf_counter() - start
    building = event_building_seconds(store.snapshot(), Lake.resolve(workdir / "lake"))
    store.engine.dispose()
    return {
        "total": total,
        "flush": flush,
        "sent": sent.sent,
        "failed": sent.failed,
        "dropped": sent.dropped,
        "warnings": warnings.messages[warned:],
        "building": building,
        "emitter_cpu": sent.busy_sec,
    }


def event_building_seconds(snapshot, lake: Lake) -> float:
    """What building the run's events costs (the stages' START and closing events): a run pays it in every
    mode, `off` included, since only the transport is disabled."""
    start = time.perf_counter()
    for stage in snapshot.stages(PIPELINE):
        run = events.stage_asset_run(snapshot, stage, str(uuid.uuid4()), lake, "duckdb:///b.duckdb")
        outcome = StageOutcome(table=str(table_of(snapshot.targets[stage.target_id])))
        run.start()
        run.finish(events.asset_result(outcome, None))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000, help="raw events (default 50,000)")
    parser.add_argument("--repeats", type=int, default=4, help="timed runs per mode (default 4)")
    parser.add_argument("--quick", action="store_true", help="10,000 events, 2 repetitions")
    args = parser.parse_args()
    rows, repeats = (10_000, 2) if args.quick else (args.rows, args.repeats)

    spark_session(app_name="medallion-bench")
    warnings = Warnings()
    logging.getLogger(emitter.__name__).addHandler(warnings)
    logging.getLogger(emitter.__name__).propagate = False  # the figures, not a screen of warnings
    with (
        local_s3(buckets=(BUCKET,)),
        tempfile.TemporaryDirectory(prefix="medallion-bench-") as folder,
        broken_endpoint(hang=True) as hanging,
        broken_endpoint(hang=False) as failing,
    ):
        scratch, endpoints = Path(folder), {"http-hang": hanging, "http-500": failing}
        # The first Spark jobs and Dagster runs in a process are slower (class loading, JIT): untimed runs.
        write_sample_data(f"s3://{BUCKET}", rows)
        for _ in range(WARM_UP_RUNS):
            run_once("off", scratch, endpoints, warnings)

        results: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for repeat in range(repeats):
            for mode in MODES if repeat % 2 == 0 else MODES[::-1]:
                result = run_once(mode, scratch, endpoints, warnings)
                results[mode].append(result)
                print(
                    f"repeat {repeat + 1} {mode:<9} run {result['total']:6.2f} s  flush "
                    f"{result['flush']:5.2f} s  sent {result['sent']:>2} failed {result['failed']:>2} "
                    f"dropped {result['dropped']:>2}  warnings {len(result['warnings'])}"
                )
    report(rows, results)


def report(rows: int, results: dict[str, list[dict]]) -> None:
    baseline = statistics.median(r["total"] for r in results["off"])
    print(f"\n{rows:,} events, {PIPELINE}; median run time, ratio to emission off (goal):")
    print(f"  off        {baseline:6.2f} s")
    for mode in MODES[1:]:
        median = statistics.median(r["total"] for r in results[mode])
        paired = statistics.median(r["total"] / off["total"] for r, off in zip(results[mode], results["off"]))
        cpu = statistics.median(r["emitter_cpu"] / r["total"] for r in results[mode])
        verdict = "met" if paired <= GOALS[mode] else "MISSED"
        print(
            f"  {mode:<10} {median:6.2f} s  {median / baseline:.3f}, paired {paired:.3f}  (≤ "
            f"{GOALS[mode]:.2f}: {verdict})  emitter thread CPU {cpu:.2%} of the run  "
            f"flush at exit, median {statistics.median(r['flush'] for r in results[mode]):.2f} s"
        )
    building = statistics.median(r["building"] for runs in results.values() for r in runs)
    print(
        f"  building the run's events (in every mode): {building * 1000:.0f} ms, {building / baseline:.2%} "
        "of a run"
    )
    for mode in ("http-hang", "http-500"):
        warned = [r["warnings"][0] for r in results[mode] if r["warnings"]]
        assert len(warned) == len(results[mode]), f"{mode}: a run without a warning"
        print(f"  {mode} warns, e.g.: {warned[0]}")


if __name__ == "__main__":
    main()
