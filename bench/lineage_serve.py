"""Benchmark: `medallion lineage serve` on loopback, the cost of one event as the catalog grows.

For each size N (datasets), a SQLite catalog of N/2 raw sources, each ingested into its own bronze target, is
generated and upserted (untimed). A real `LineageServer` then listens on 127.0.0.1, and one client sends
`--events` events in turn (a bounded load: one request in flight), each a new external job with one input and
one output. Every event is answered 201. Per size it reports events per second, the median and p99 latency,
and the peak RSS of the process. The ratio is the median latency against the smallest size's, measured in the
same run: a flat cost would keep it near 1.

    python bench/lineage_serve.py                         # 1,000 and 10,000 datasets, 50 events each
    python bench/lineage_serve.py --sizes 1000 100000 --events 1000
"""

import argparse
import http.client
import json
import resource
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from medallion_assets.catalog.models import Pipeline, Source, Stage, Target
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.lineage.server import ENDPOINT, LineageServer


def catalog(folder: Path, datasets: int) -> CatalogStore:
    store = CatalogStore(f"sqlite:///{folder}/catalog-{datasets}.db")
    store.migrate()
    pairs = range(datasets // 2)
    store.upsert({
        "pipelines": [Pipeline(pipeline_id="bench")],
        "sources": [Source(source_id=f"raw_{i}", s3_path=f"s3://bench/raw_{i}/", file_format="jsonl",
                           columns={"id": "string"}) for i in pairs],
        "targets": [Target(target_id=f"bronze_{i}", layer="bronze") for i in pairs],
        "stages": [Stage(pipeline_id="bench", stage_order=i + 1, stage_name=f"ingest_{i}", input_id=f"raw_{i}",
                         target_id=f"bronze_{i}") for i in pairs],
    })
    return store


def event(number: int) -> bytes:
    return json.dumps({
        "eventType": "COMPLETE", "eventTime": "2026-11-02T03:00:00Z", "producer": "https://example.com/bench",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": str(uuid.uuid4())}, "job": {"namespace": "bench", "name": f"job_{number}"},
        "inputs": [{"namespace": "postgres://shop:5432", "name": f"shop.public.in_{number}"}],
        "outputs": [{"namespace": "postgres://shop:5432", "name": f"shop.public.out_{number}"}],
    }).encode()


def measure(folder: Path, datasets: int, events: int) -> dict:
    store = catalog(folder, datasets)
    server = LineageServer(("127.0.0.1", 0), store, str(folder / "lake"), f"duckdb:///{folder}/warehouse.duckdb")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    latencies = []
    try:
        for number in range(events):
            body = event(number)
            started = time.perf_counter()
            connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=600)
            connection.request("POST", ENDPOINT, body, {"Content-Type": "application/json"})
            status = connection.getresponse().status
            connection.close()
            latencies.append(time.perf_counter() - started)
            assert status == 201, status
    finally:
        server.shutdown()
        server.server_close()
    latencies.sort()
    return {"datasets": datasets, "events_per_sec": events / sum(latencies),
            "median_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--events", type=int, default=50)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = [measure(Path(folder), size, arguments.events) for size in sorted(arguments.sizes)]
    baseline = results[0]["median_ms"]
    print("| datasets | events/s | median ms | p99 ms | peak RSS MB | median vs smallest |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['datasets']:,} | {r['events_per_sec']:.2f} | {r['median_ms']:.0f} | {r['p99_ms']:.0f} | "
              f"{r['peak_rss_mb']:.0f} | {r['median_ms'] / baseline:.1f}× |")


if __name__ == "__main__":
    main()
