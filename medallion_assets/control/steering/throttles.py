"""Throttles: limits per source and target system, read from the catalog's `throttles` rows.

Concurrency limits become Dagster concurrency pools, one per system (`naming.pool_name`); `sync_pool_limits`
writes them to the instance, and every pool the catalog uses gets a limit, so none is unlimited by accident.

Rates (rows per minute, bytes per hour) are token buckets kept in the catalog database (`throttle_buckets`),
so every process touching a system draws from the same bucket. A bucket holds at most one window's worth
(the limit) and refills at limit per window: over any stretch of t seconds at most limit + limit·t/window
is granted, the limit on average. Tokens are taken by one conditional UPDATE, atomic on SQLite and
PostgreSQL alike, so two processes never take the same tokens. A batch bigger than the whole bucket
(which could never fit) waits for a full bucket, then takes it all and leaves the bucket in debt: later
batches wait until the debt is refilled, so the average still holds and nothing deadlocks.

Dagster-free: the engine takes tokens through this module; a Dagster instance is only ever passed in.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, case, literal, select, update

from medallion_assets.catalog.models import Row, Source, Stage, Target, Throttle
from medallion_assets.catalog.schema import conflict_insert, throttle_buckets
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.rows import rows_as
from medallion_assets.naming import pool_name

if TYPE_CHECKING:
    import pyarrow as pa
    from dagster import DagsterInstance

    from medallion_assets.storage.warehouse import Batch

# Must equal `concurrency.pools.default_limit` in dagster.yaml: a system with no concurrency row gets it.
DEFAULT_CONCURRENCY_LIMIT = 2
RATE_WINDOWS_SEC = {"rows_per_minute": 60.0, "bytes_per_hour": 3600.0}
# A waiting taker looks again at least this often, so a raised or removed limit frees it soon.
MAX_SLEEP_SEC = 5.0


def target_system(target: Target) -> str:
    """The system a warehouse target loads into: declared, or the one configured warehouse."""
    return target.system or "warehouse"


def stage_pool(stage: Stage, snapshot: CatalogSnapshot) -> str | None:
    """The concurrency pool a stage's step claims: bronze stages draw on their source system, warehouse
    loads on their target system; other stages touch only the lake and claim none."""
    target = snapshot.targets[stage.target_id]
    if target.layer == "bronze":
        return pool_name("source", snapshot.sources[stage.input_id].system_id())
    if target.kind == "warehouse":
        return pool_name("target", target_system(target))
    return None


def known_systems(snapshot: CatalogSnapshot) -> dict[str, list[str]]:
    """Systems a throttle may name: every source's system, and every warehouse target's."""
    return {
        "source": sorted({s.system_id() for s in snapshot.sources.values()}),
        "target": sorted({target_system(t) for t in snapshot.targets.values() if t.kind == "warehouse"}),
    }


def throttle_problem(snapshot: CatalogSnapshot, throttle: Throttle) -> tuple[str, str] | None:
    """(field, why) a throttle row cannot apply, or None. (A limit of zero or less is refused by the
    model.)"""
    known = known_systems(snapshot)[throttle.system_kind]
    if throttle.system_id not in known:
        return "system_id", (
            f"unknown {throttle.system_kind} system {throttle.system_id!r}; "
            f"known {throttle.system_kind} systems: {', '.join(known) or '(none)'}"
        )
    if throttle.metric == "concurrency" and throttle.limit_value != int(throttle.limit_value):
        return "limit_value", f"a concurrency limit is a whole number of steps, not {throttle.limit_value:g}"
    return None


def check_throttles(snapshot: CatalogSnapshot) -> list[tuple[str, Row, str, str]]:
    """(table, row, field, message) for every throttle row that cannot apply, for the catalog loader."""
    return [
        ("throttles", throttle, *problem)
        for throttle in rows_as(Throttle, snapshot.tables["throttles"].values())
        if (problem := throttle_problem(snapshot, throttle))
    ]


def concurrency_limits(snapshot: CatalogSnapshot) -> dict[str, int]:
    """Pool name → limit: every pool the catalog's stages use (default limit) and every concurrency row."""
    limits = {
        pool: DEFAULT_CONCURRENCY_LIMIT
        for pool in (stage_pool(stage, snapshot) for stage in snapshot.stages())
        if pool
    }
    for throttle in rows_as(Throttle, snapshot.tables["throttles"].values()):
        if throttle.metric == "concurrency":
            limits[pool_name(throttle.system_kind, throttle.system_id)] = int(throttle.limit_value)
    return limits


def sync_pool_limits(instance: DagsterInstance, snapshot: CatalogSnapshot) -> dict[str, int]:
    """Set the instance's pool limits to the catalog's; returns the pools whose limit changed (pool → limit).

    `instance` is a DagsterInstance. Pools the catalog no longer names keep their limit: a run in flight
    may still claim them, and dropping a limit would make the pool unlimited.
    """
    storage = instance.event_log_storage
    current = {pool.name: (pool.limit, pool.from_default) for pool in storage.get_pool_limits()}
    changed: dict[str, int] = {}
    for pool, limit in concurrency_limits(snapshot).items():
        # A pool sitting at the instance default is set explicitly too, so it follows the catalog, not
        # dagster.yaml.
        if current.get(pool) != (limit, False):
            storage.set_concurrency_slots(pool, limit)
            changed[pool] = limit
    return changed


@dataclass(frozen=True)
class Grant:
    """Tokens taken from one bucket: how many, when (by the bucket's clock), what was left, how long it
    waited."""

    metric: str
    amount: float
    limit: float | None  # None: the throttle row was removed while the taker waited
    granted_at: float
    tokens_left: float | None
    waited_sec: float


def rate_limits(store: CatalogStore, system_kind: str, system_id: str) -> dict[str, float]:
    """Metric → limit of a system's rate throttles, read now, so a row update applies to the next batch."""
    return {
        t.metric: t.limit_value
        for t in rows_as(Throttle, store.read_table("throttles"))
        if (t.system_kind, t.system_id) == (system_kind, system_id) and t.metric in RATE_WINDOWS_SEC
    }


def throttle(
    store: CatalogStore, system_kind: str, system_id: str, amounts: dict[str, float], **audit: Any
) -> list[Grant]:
    """Take `amounts` (metric → rows or bytes) from the system's rate buckets, waiting while they are empty.

    Metrics without a throttle row pass freely. Every wait is recorded in audit_log (event "throttle"),
    with `audit` (pipeline_id, stage_name, dataset) naming who waited.
    """
    limited = rate_limits(store, system_kind, system_id)
    grants = [
        take(store, system_kind, system_id, metric, amount)
        for metric, amount in amounts.items()
        if amount > 0 and metric in limited
    ]
    for grant in grants:
        if grant.waited_sec > 0:
            store.record_audit(
                **audit,
                event="throttle",
                status="waited",
                duration_sec=grant.waited_sec,
                details={
                    "system_kind": system_kind,
                    "system_id": system_id,
                    "metric": grant.metric,
                    "amount": grant.amount,
                    "limit": grant.limit,
                    "tokens_left": grant.tokens_left,
                },
            )
    return grants


def throttled(data: Batch, store: CatalogStore, system_kind: str, system_id: str, **audit: Any) -> Batch:
    """A load's data, its rows and bytes (in-memory Arrow, or staged parquet) taken from the target system's
    buckets first: a whole table or staged batch before the load, or each batch of a streamed load before
    the loader receives it."""
    # Imported here: checking throttle rows at catalog load (and plan) imports this module and must load no
    # driver, nor Arrow.
    import pyarrow as pa

    from medallion_assets.storage.warehouse import StagedParquet

    def take_for(batch: pa.Table | pa.RecordBatch | StagedParquet) -> None:
        throttle(
            store,
            system_kind,
            system_id,
            {"rows_per_minute": batch.num_rows, "bytes_per_hour": batch.nbytes},
            **audit,
        )

    if isinstance(data, pa.Table | StagedParquet):
        take_for(data)
        return data

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in data:
            take_for(batch)
            yield batch

    if isinstance(data, pa.RecordBatchReader):  # a reader keeps its schema, which an empty stream still needs
        return pa.RecordBatchReader.from_batches(data.schema, batches())
    return batches()


def take(store: CatalogStore, system_kind: str, system_id: str, metric: str, amount: float) -> Grant:
    """Take `amount` tokens from one shared bucket, sleeping until they have refilled; returns the grant.

    The limit is re-read before every attempt; when its row is removed meanwhile, the amount passes.
    """
    bucket = throttle_buckets.c
    key = and_(bucket.system_kind == system_kind, bucket.system_id == system_id, bucket.metric == metric)
    waited = 0.0
    while True:
        limit = rate_limits(store, system_kind, system_id).get(metric)
        now = time.time()
        if limit is None:
            return Grant(metric, amount, None, now, None, waited)
        rate = limit / RATE_WINDOWS_SEC[metric]
        with store.engine.begin() as connection:
            _create_full_bucket(connection, system_kind, system_id, metric, limit, now)
            # Refill since the last take (never backwards: another process's clock may read a little
            # later), capped at the limit; then take, only if enough is there. One statement: atomic.
            elapsed = case((literal(now) > bucket.refilled_at, literal(now) - bucket.refilled_at), else_=0.0)
            refilled = bucket.tokens + elapsed * literal(rate)
            available = case((refilled > literal(limit), literal(limit)), else_=refilled)
            granted = connection.execute(
                update(throttle_buckets)
                .where(key, available >= literal(min(amount, limit)))
                .values(tokens=available - literal(amount), refilled_at=bucket.refilled_at + elapsed)
                .returning(bucket.tokens, bucket.refilled_at)
            ).first()
            if granted is None:
                tokens, refilled_at = connection.execute(
                    select(bucket.tokens, bucket.refilled_at).where(key)
                ).one()
        if granted is not None:
            return Grant(metric, amount, limit, granted.refilled_at, granted.tokens, waited)
        have = _level(tokens, refilled_at, limit, metric, now)
        pause = min(MAX_SLEEP_SEC, max((min(amount, limit) - have) / rate, 0.001))
        time.sleep(pause)
        waited += pause


def _level(tokens: float, refilled_at: float, limit: float, metric: str, now: float) -> float:
    """A bucket's tokens at `now`: what the take's UPDATE computes in SQL, for waiting and showing."""
    return min(limit, tokens + max(0.0, now - refilled_at) * limit / RATE_WINDOWS_SEC[metric])


def _create_full_bucket(
    connection: Connection, system_kind: str, system_id: str, metric: str, limit: float, now: float
) -> None:
    connection.execute(
        conflict_insert(connection, throttle_buckets)
        .values(
            system_kind=system_kind,
            system_id=system_id,
            metric=metric,
            tokens=limit,
            refilled_at=now,
        )
        .on_conflict_do_nothing()
    )


def bucket_levels(store: CatalogStore) -> dict[tuple[str, str, str], float]:
    """(kind, system, metric) → tokens in the bucket now (refilled to this moment; below zero while in
    debt)."""
    limits = {
        t.key(): t.limit_value
        for t in rows_as(Throttle, store.read_table("throttles"))
        if t.metric in RATE_WINDOWS_SEC
    }
    now = time.time()
    with store.engine.connect() as connection:
        buckets = connection.execute(select(throttle_buckets)).all()
    return {
        (b.system_kind, b.system_id, b.metric): _level(b.tokens, b.refilled_at, limit, b.metric, now)
        for b in buckets
        if (limit := limits.get((b.system_kind, b.system_id, b.metric))) is not None
    }


@dataclass(frozen=True)
class CatalogThrottles:
    """The engine's throttling (`engine.services.Throttle`): the catalog's throttle rows and rate buckets."""

    store: CatalogStore

    def take_from_source(self, source: Source, amounts: dict[str, float], **audit: Any) -> None:
        throttle(self.store, "source", source.system_id(), amounts, **audit)

    def stream_to_target(self, data: Batch, target: Target, **audit: Any) -> Batch:
        return throttled(data, self.store, "target", target_system(target), **audit)
