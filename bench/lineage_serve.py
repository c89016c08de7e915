"""Benchmark: `medallion lineage serve` on loopback, the cost of one event as the catalog grows.

For each size N (datasets), a SQLite catalog of N/2 raw sources, each ingested into its own bronze target, is
generated with bulk inserts (untimed). A real `LineageServer` on 127.0.0.1 serves it from a process of its
own, so its peak RSS is the server's alone. Clients in this process send `--events` events under a bounded
load (at most `--clients` requests in flight), each an export job that writes a file into one of the raw
sources' prefixes (Airflow filling the landing bucket): a new external dataset and an edge into the catalog,
whose raw source and bronze target get paths again. Every event must be answered 201.

The first event reads the whole catalog (the server keeps what it read from then on) and is reported apart;
the others are measured: events per second, median and p99 latency, and the per-event cost, as wall time /
events and as the server process's CPU time / events (which the load of other processes on the machine hardly
moves). Ratios are against the smallest size, measured in the same run: a flat cost keeps them near 1.

    python bench/lineage_serve.py                                     # 1k, 10k, 100k datasets, 1,000 events
    python bench/lineage_serve.py --sizes 1000 10000 --events 200
"""

import argparse
import http.client
import json
import multiprocessing
import resource
import statistics
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import insert

from medallion_assets.catalog.schema import LOADABLE_TABLES
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.openlineage.server import ENDPOINT, LineageServer
from medallion_assets.storage.lake.root import Lake


def catalog(folder: Path, datasets: int) -> CatalogStore:
    """N/2 sources each ingested into a bronze target, written in one transaction of bulk inserts."""
    store = CatalogStore(f"sqlite:///{folder}/catalog-{datasets}.db")
    store.migrate()
    pairs = range(datasets // 2)
    with store.engine.begin() as connection:
        for table, rows in (
            ("pipelines", [{"pipeline_id": "bench"}]),
            (
                "sources",
                [
                    {
                        "source_id": f"raw_{i}",
                        "s3_path": f"s3://bench/raw_{i}/",
                        "file_format": "jsonl",
                        "columns": {"id": "string"},
                    }
                    for i in pairs
                ],
            ),
            ("targets", [{"target_id": f"bronze_{i}", "layer": "bronze", "kind": "lake"} for i in pairs]),
            (
                "stages",
                [
                    {
                        "pipeline_id": "bench",
                        "stage_order": i + 1,
                        "stage_name": f"ingest_{i}",
                        "input_id": f"raw_{i}",
                        "target_id": f"bronze_{i}",
                    }
                    for i in pairs
                ],
            ),
        ):
            connection.execute(insert(LOADABLE_TABLES[table]), rows)
    return store


def event(number: int, sources: int) -> bytes:
    """An export job writing a file into a raw source's prefix; sources are spread over the catalog."""
    source = number * 7919 % sources
    return json.dumps(
        {
            "eventType": "COMPLETE",
            "eventTime": "2026-11-02T03:00:00Z",
            "producer": "https://example.com/bench",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "run": {"runId": str(uuid.uuid4())},
            "job": {"namespace": "bench", "name": f"export_{number}"},
            "inputs": [{"namespace": "postgres://shop:5432", "name": f"shop.public.table_{number}"}],
            "outputs": [{"namespace": "s3://bench", "name": f"raw_{source}/part-{number}.jsonl"}],
        }
    ).encode()


def serve(folder: str, datasets: int, port, measuring, stop, results) -> None:
    """The server's process: generate the catalog, serve it until told to stop, report peak RSS, reloads and
    the CPU time (all its threads) spent while measured."""
    started = time.perf_counter()
    store = catalog(Path(folder), datasets)
    generated = time.perf_counter() - started
    server = LineageServer(
        ("127.0.0.1", 0), store, Lake.resolve(f"{folder}/lake"), f"duckdb:///{folder}/warehouse.duckdb"
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port.put(server.server_port)
    measuring.wait()
    cpu = time.process_time()
    stop.wait()
    cpu = time.process_time() - cpu
    server.shutdown()
    server.server_close()
    results.put(
        {
            "generate_sec": generated,
            "reloads": server.lineage.reloads,
            "cpu_sec": cpu,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    )


def send(port: int, body: bytes) -> float:
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request("POST", ENDPOINT, body, {"Content-Type": "application/json"})
    reply = connection.getresponse()
    status, answer = reply.status, reply.read()
    connection.close()
    assert status == 201, (status, answer)
    return time.perf_counter() - started


def measure(folder: Path, datasets: int, events: int, clients: int) -> dict:
    context = multiprocessing.get_context("spawn")
    port, measuring, stop, results = context.Queue(), context.Event(), context.Event(), context.Queue()
    server = context.Process(target=serve, args=(str(folder), datasets, port, measuring, stop, results))
    server.start()
    try:
        server_port = port.get(timeout=1800)
        first = send(server_port, event(0, datasets // 2))
        measuring.set()
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=clients) as pool:
            latencies = sorted(
                pool.map(lambda n: send(server_port, event(n, datasets // 2)), range(1, events))
            )
        wall = time.perf_counter() - started
    finally:
        stop.set()
    report = results.get(timeout=600)
    server.join()
    report["cpu_ms"] = 1000 * report.pop("cpu_sec") / len(latencies)
    return {
        "datasets": datasets,
        "first_sec": first,
        "events_per_sec": len(latencies) / wall,
        "cost_ms": 1000 * wall / len(latencies),
        "median_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[round(0.99 * (len(latencies) - 1))],
        **report,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--events", type=int, default=1_000)
    parser.add_argument("--clients", type=int, default=4, help="requests in flight at most")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = [
            measure(Path(folder), size, arguments.events, arguments.clients)
            for size in sorted(arguments.sizes)
        ]
    base = results[0]
    print(f"{arguments.events:,} events per size, at most {arguments.clients} in flight\n")
    print(
        "| datasets | catalog generated s | first event s | events/s | wall ms / event | server CPU ms / "
        "event | median ms | p99 ms | peak RSS MB | catalog reads | wall vs smallest | CPU vs smallest | p99 "
        "vs smallest |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['datasets']:,} | {r['generate_sec']:.1f} | {r['first_sec']:.2f} | "
            f"{r['events_per_sec']:.0f} | {r['cost_ms']:.1f} | {r['cpu_ms']:.1f} | {r['median_ms']:.1f} | "
            f"{r['p99_ms']:.1f} | {r['peak_rss_mb']:.0f} | {r['reloads']} | "
            f"{r['cost_ms'] / base['cost_ms']:.2f}× | {r['cpu_ms'] / base['cpu_ms']:.2f}× | "
            f"{r['p99_ms'] / base['p99_ms']:.2f}× |"
        )


if __name__ == "__main__":
    main()
