"""Reading lake tables as an engine other than Spark would: pyiceberg, through the lake's catalog; and new raw
events for the seed's user_events_etl."""

from __future__ import annotations

import json
from pathlib import Path

import boto3

from medallion_assets.storage.lake.catalogs import configured_catalogs


def lake_rows(lake: Path | str, table: str) -> list[dict]:
    """Every row of `namespace.table` (e.g. `silver.user_events`) in the lake's default catalog, read with
    pyiceberg."""
    catalog = configured_catalogs(str(lake))["lake"].metadata()
    namespace, name = table.split(".")
    return catalog.load_table((namespace, name)).scan().to_arrow().to_pylist()


def lake_snapshots(lake: Path | str, table: str) -> list[int]:
    """The snapshots `main` of `namespace.table` went through, oldest first."""
    catalog = configured_catalogs(str(lake))["lake"].metadata()
    namespace, name = table.split(".")
    return [entry.snapshot_id for entry in catalog.load_table((namespace, name)).metadata.snapshot_log]


def add_new_events(count: int = 5) -> None:
    """A new raw object with `count` events never seen before (new event ids), so the next run of
    user_events_etl changes every layer."""
    s3 = boto3.client("s3")
    first = s3.list_objects_v2(Bucket="medallion-raw", Prefix="user_events/")["Contents"][0]["Key"]
    lines = s3.get_object(Bucket="medallion-raw", Key=first)["Body"].read().decode().splitlines()[:count]
    events = [{**json.loads(line), "event_id": f"late-{i}"} for i, line in enumerate(lines)]
    body = "".join(json.dumps(event) + "\n" for event in events)
    s3.put_object(Bucket="medallion-raw", Key="user_events/late.jsonl", Body=body.encode())
