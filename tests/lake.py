"""Reading lake tables as an engine other than Spark would: pyiceberg, through the lake's catalog; what
Spark's scans of a table read, from its SQL metrics; and new raw events for the seed's user_events_etl."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import boto3
from pyspark.sql import SparkSession

from medallion_assets.storage.lake.root import Lake

T = TypeVar("T")


def lake_rows(lake: Path | str, table: str) -> list[dict]:
    """Every row of `namespace.table` (e.g. `silver.user_events`) in the lake's default catalog, read with
    pyiceberg."""
    catalog = Lake.resolve(lake).catalog("lake").metadata()
    namespace, name = table.split(".")
    return catalog.load_table((namespace, name)).scan().to_arrow().to_pylist()


def lake_snapshots(lake: Path | str, table: str) -> list[int]:
    """The snapshots `main` of `namespace.table` went through, oldest first."""
    catalog = Lake.resolve(lake).catalog("lake").metadata()
    namespace, name = table.split(".")
    return [entry.snapshot_id for entry in catalog.load_table((namespace, name)).metadata.snapshot_log]


def data_files_scanned(
    spark: SparkSession, table: str, action: Callable[[], T]
) -> tuple[T, list[tuple[int, int]]]:
    """Run `action`; return what it returned and, for each scan of lake table `table` (e.g.
    `lake.silver.events`) in the queries it ran, the data files Iceberg's scan planning kept and skipped: the
    scan's SQL metrics `resultDataFiles` and `skippedDataFiles`, read from Spark's SQL status store (what its
    UI shows)."""
    store = spark._jsparkSession.sharedState().statusStore()
    # By id, not position: the store keeps only the newest executions (spark.sql.ui.retainedExecutions), so
    # in a long-lived session the count stays put while old ones go.
    before = _newest_execution(store)
    result = action()
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()  # the store is filled by a listener
    executions = [e for e in _scala(store.executionsList()) if e.executionId() > before]
    scans = []
    for execution in executions:
        values = store.executionMetrics(execution.executionId())
        for node in _scala(store.planGraph(execution.executionId()).allNodes()):
            if node.name() != f"BatchScan {table}":
                continue
            metrics = {m.name(): values.get(m.accumulatorId()) for m in _scala(node.metrics())}
            scans.append(
                tuple(
                    int(metrics[name].get()) if metrics[name].isDefined() else 0
                    for name in ("number of result data files", "number of skipped data files")
                )
            )
    return result, scans


def _newest_execution(store) -> int:
    count = store.executionsCount()
    return int(store.executionsList(count - 1, 1).apply(0).executionId()) if count else -1


def _scala(sequence) -> list:  # a Scala Seq through py4j
    return [sequence.apply(i) for i in range(sequence.size())]


def add_new_events(count: int = 5) -> None:
    """A new raw object with `count` events never seen before (new event ids), so the next run of
    user_events_etl changes every layer."""
    s3 = boto3.client("s3")
    first = s3.list_objects_v2(Bucket="medallion-raw", Prefix="user_events/")["Contents"][0]["Key"]
    lines = s3.get_object(Bucket="medallion-raw", Key=first)["Body"].read().decode().splitlines()[:count]
    events = [{**json.loads(line), "event_id": f"late-{i}"} for i, line in enumerate(lines)]
    body = "".join(json.dumps(event) + "\n" for event in events)
    s3.put_object(Bucket="medallion-raw", Key="user_events/late.jsonl", Body=body.encode())
