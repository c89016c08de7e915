"""`medallion throttle set | show | sync`: limits per source and target system, and their live state."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Literal, cast

import click

from medallion_assets.cli.common import catalog_store, refuse
from medallion_assets.redaction import echo

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from medallion_assets.catalog.models import Throttle

KINDS = ("source", "target")
METRICS = ("rows_per_minute", "bytes_per_hour", "concurrency")


def _instance() -> DagsterInstance:
    """The Dagster instance under DAGSTER_HOME, whose pools Medallion sets."""
    from dagster import DagsterInstance

    if not os.environ.get("DAGSTER_HOME"):
        refuse(
            "DAGSTER_HOME is not set: pool limits live in a Dagster instance; point DAGSTER_HOME at it "
            "(with Medallion's dagster.yaml) and run again"
        )
    return DagsterInstance.get()


@click.group()
def throttle() -> None:
    """Throttles per source or target system: concurrency (Dagster pools) and rates (shared token buckets)."""


@throttle.command("set")
@click.argument("system_kind", metavar="source|target", type=click.Choice(KINDS))
@click.argument("system_id", metavar="ID")
@click.option("--metric", required=True, type=click.Choice(METRICS))
@click.option(
    "--limit", "limit", required=True, type=int, help="steps at once, rows per minute or bytes per hour"
)
def set_throttle(
    system_kind: Literal["source", "target"],
    system_id: str,
    metric: Literal["rows_per_minute", "bytes_per_hour", "concurrency"],
    limit: int,
) -> None:
    """Limit a source or target system (ID as `medallion throttle show` lists it)."""
    from medallion_assets.catalog.models import Throttle
    from medallion_assets.control.steering.throttles import throttle_problem
    from medallion_assets.naming import pool_name

    if limit <= 0:
        refuse(
            f"--limit must be greater than 0, not {limit} (to stop a system, use "
            f"`medallion disable {system_kind} {system_id}`)"
        )
    store = catalog_store()
    row = Throttle(system_kind=system_kind, system_id=system_id, metric=metric, limit_value=limit)
    problem = throttle_problem(store.snapshot(), row)
    if problem:
        refuse(problem[1])
    store.upsert({"throttles": [row]})
    applies = (
        f"pool {pool_name(system_kind, system_id)}: the medallion_control sensor applies it on its next tick "
        "(or run `medallion throttle sync`)"
        if metric == "concurrency"
        else "applies from the next batch"
    )
    echo(f"{system_kind} {system_id}: {metric} limited to {limit}; {applies}")


@throttle.command("show")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def show(as_json: bool) -> None:
    """Every system's limits, with the pool's slots in use (when DAGSTER_HOME is set) and the buckets'
    tokens."""
    from medallion_assets.control.steering.throttles import (
        DEFAULT_CONCURRENCY_LIMIT,
        RATE_WINDOWS_SEC,
        bucket_levels,
        known_systems,
    )
    from medallion_assets.naming import pool_name

    store = catalog_store()
    snapshot = store.snapshot()
    # The snapshot types its rows as the base model; the throttles table holds Throttle rows.
    rows_of_throttles = cast("dict[tuple[Any, ...], Throttle]", snapshot.tables["throttles"])
    throttles = {t.key(): t.limit_value for t in rows_of_throttles.values()}
    levels = bucket_levels(store)
    # The storage holds its instance only weakly: keep the instance alive while the storage is read.
    instance = _instance() if os.environ.get("DAGSTER_HOME") else None
    storage = instance.event_log_storage if instance else None
    rows: list[dict[str, Any]] = []
    for kind, systems in known_systems(snapshot).items():
        for system in systems:
            pool = pool_name(kind, system)
            limit = throttles.get((kind, system, "concurrency"))
            row = {
                "kind": kind,
                "system": system,
                "metric": "concurrency",
                "limit": int(limit or DEFAULT_CONCURRENCY_LIMIT),
                "default": limit is None,
                "pool": pool,
            }
            if storage is not None:
                info = storage.get_concurrency_info(pool)
                row.update(
                    pool_limit=info.limit,
                    slots_in_use=len(info.claimed_slots),
                    steps_waiting=info.pending_step_count,
                )
            rows.append(row)
            for metric in RATE_WINDOWS_SEC:
                if (kind, system, metric) in throttles:
                    rows.append(
                        {
                            "kind": kind,
                            "system": system,
                            "metric": metric,
                            "limit": throttles[kind, system, metric],
                            "default": False,
                            "tokens": levels.get((kind, system, metric)),
                        }
                    )
    if as_json:
        echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        shown_limit = f"{row['limit']:g}" + (" (default)" if row["default"] else "")
        if row["metric"] != "concurrency":
            state = (
                "bucket full (untouched)" if row["tokens"] is None else f"bucket {row['tokens']:.0f} tokens"
            )
        elif storage is None:
            state = f"pool {row['pool']} (set DAGSTER_HOME to see its slots)"
        else:
            state = (
                f"pool {row['pool']}: limit {row['pool_limit']} on the instance, "
                f"{row['slots_in_use']} in use, {row['steps_waiting']} waiting"
            )
        echo(f"{row['kind']:<7} {row['system']:<20} {row['metric']:<16} {shown_limit:<14} {state}")


@throttle.command("sync")
def sync() -> None:
    """Set the concurrency pools of the instance under DAGSTER_HOME from the catalog's throttles now."""
    from medallion_assets.control.steering.throttles import concurrency_limits, sync_pool_limits

    instance = _instance()
    snapshot = catalog_store().snapshot()
    changed = sync_pool_limits(instance, snapshot)
    for pool, limit in sorted(concurrency_limits(snapshot).items()):
        echo(f"{pool}: {limit}" + (" (set)" if pool in changed else " (unchanged)"))
