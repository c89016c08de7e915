"""Benchmark helper: the peak memory of this process while the engine ingests one folder of raw JSON lines.

Uses only what every version of Medallion has (`ingest`, `list_objects`, `Source`), so the same command
measures another checkout: run it with that checkout's interpreter, from that checkout's folder. Spark is
SPARK_REMOTE if set, else local[2] (whose JVM is a child process, not counted). Prints one JSON line.

    python bench/ingest_rss.py RAW_FOLDER          # e.g. a folder written by `medallion sample-data`
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time

from pyspark.sql import SparkSession

from medallion_assets.catalog.models import Source
from medallion_assets.engine.ingest import ingest
from medallion_assets.storage.objects import list_objects

EVENTS = {
    "event_id": "string",
    "user_id": "string",
    "event_type": "string",
    "event_ts": "string",
    "value": "double",
}


def main() -> None:
    folder = sys.argv[1]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("medallion-bench")
    if not os.environ.get("SPARK_REMOTE"):
        builder = builder.master("local[2]").config("spark.driver.memory", "2g")
    spark = builder.getOrCreate()
    source = Source(source_id="events", s3_path=folder, file_format="jsonl", columns=EVENTS)
    objects = list_objects(folder)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch:
        result = ingest(spark, source, objects, f"{scratch}/bronze", f"{scratch}/quarantine", "b1")
    print(
        json.dumps(
            {
                "objects": len(objects),
                "bytes": sum(info.size for info in objects),
                "rows_read": result.rows_read,
                "seconds": round(time.perf_counter() - started, 1),
                "peak_rss_mib_before": before // 1024,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            }
        )
    )


if __name__ == "__main__":
    main()
