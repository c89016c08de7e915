"""Reading lake tables as an engine other than Spark would: pyiceberg, through the lake's catalog."""

from __future__ import annotations

from pathlib import Path

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
