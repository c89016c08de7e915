"""Throttles: concurrency pools on a real Dagster instance, rate buckets shared across processes, the CLI."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from click.testing import CliRunner
from dagster import DagsterInstance, build_sensor_context, instance_for_test
from dagster_postgres import PostgresEventLogStorage
from sqlalchemy import update

from medallion_assets import dagster_compat
from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.models import Source, Stage, Target, Throttle
from medallion_assets.catalog.schema import throttle_buckets
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.cli import main
from medallion_assets.config import DEFAULT_SENSOR_INTERVAL_SECONDS
from medallion_assets.control.steering.throttles import (
    DEFAULT_CONCURRENCY_LIMIT,
    CatalogThrottles,
    concurrency_limits,
    stage_pool,
    take,
    throttle,
)
from medallion_assets.engine.stage import StageRunner
from medallion_assets.instance import instance_config
from medallion_assets.loading import validate_files
from medallion_assets.pool_storage import PoolSafePostgresEventLogStorage, PoolSafeSqliteEventLogStorage
from medallion_assets.recovery.routes import CatalogRoutes
from medallion_assets.sensors.control import build_control_sensor
from medallion_assets.storage.lake.root import Lake
from tests.conftest import REPO, SEED
from tests.throttle_workers import run_pooled_step, take_in_a_process

RUNS = 4
SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter per run, as separate run workers are


@pytest.fixture
def store(tmp_path) -> CatalogStore:
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    yield store
    store.engine.dispose()


def limit_row(kind: str, system: str, metric: str, limit: float) -> Throttle:
    return Throttle(system_kind=kind, system_id=system, metric=metric, limit_value=limit)


def test_every_pool_the_catalog_uses_gets_a_limit_and_the_shipped_default_matches():
    shipped = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert shipped["concurrency"]["pools"]["default_limit"] == DEFAULT_CONCURRENCY_LIMIT
    snapshot = CatalogSnapshot()
    snapshot.add(
        "sources",
        Source(
            source_id="crm_orders",
            s3_path="s3://crm-exports/orders/",
            file_format="csv",
            columns={"id": "string"},
        ),
    )
    snapshot.add("targets", Target(target_id="bronze_orders", layer="bronze"))
    snapshot.add(
        "targets",
        Target(target_id="gold_orders", layer="gold", kind="warehouse", location="a.orders", system="dwh"),
    )
    snapshot.add(
        "stages",
        Stage(
            pipeline_id="p",
            stage_order=1,
            stage_name="ingest",
            input_id="crm_orders",
            target_id="bronze_orders",
        ),
    )
    snapshot.add(
        "stages",
        Stage(
            pipeline_id="p",
            stage_order=2,
            stage_name="load",
            input_id="bronze_orders",
            target_id="gold_orders",
            transform_sql="SELECT * FROM bronze_orders",
        ),
    )
    assert concurrency_limits(snapshot) == {"source_crm_exports": 2, "target_dwh": 2}
    snapshot.add("throttles", limit_row("target", "dwh", "concurrency", 5))
    snapshot.add("throttles", limit_row("target", "dwh", "rows_per_minute", 100))
    assert concurrency_limits(snapshot) == {"source_crm_exports": 2, "target_dwh": 5}


def test_the_control_sensor_syncs_pool_limits_on_every_tick(store, tmp_path):
    snapshot = store.snapshot()
    store.upsert({"throttles": [limit_row("source", "medallion_raw", "concurrency", 3)]})
    sensor = build_control_sensor(snapshot, store, MedallionTranslator(), DEFAULT_SENSOR_INTERVAL_SECONDS)
    with instance_for_test() as instance:

        def pools():
            return {p.name: (p.limit, p.from_default) for p in instance.event_log_storage.get_pool_limits()}

        first = sensor(build_sensor_context(instance=instance))
        assert pools() == {"source_medallion_raw": (3, False), "target_warehouse": (2, False)}
        assert first.skip_reason.skip_message == "nothing to cancel; set 2 pool limit(s)"
        assert sensor(build_sensor_context(instance=instance)).skip_reason.skip_message == "nothing to cancel"
        store.upsert({"throttles": [limit_row("source", "medallion_raw", "concurrency", 1)]})
        sensor(build_sensor_context(instance=instance))
        assert pools() == {"source_medallion_raw": (1, False), "target_warehouse": (2, False)}


def pool_claims_at_once(storages: list, pool: str, rounds: int) -> list[int]:
    """How many steps got a slot of `pool` in each of `rounds` rounds in which every storage (one per run
    worker, each on its own connections) claims a slot for one step at the same moment; all are freed
    between rounds."""
    start = threading.Barrier(len(storages))
    claimed = [[False] * len(storages) for _ in range(rounds)]

    def worker(n: int) -> None:
        for round_ in range(rounds):
            run_id = f"round{round_}-run{n}"
            start.wait()
            claimed[round_][n] = storages[n].claim_concurrency_slot(pool, run_id, "extract").is_claimed
            start.wait()
            storages[n].free_concurrency_slots_for_run(run_id)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(len(storages))]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return [sum(round_) for round_ in claimed]


@pytest.fixture
def deployed_instance(pg_database, monkeypatch) -> Iterator[DagsterInstance]:
    """The instance a team deploys (dagster.yaml with PostgreSQL storage, as `medallion instance init
    --postgres` writes it), in the DAGSTER_HOME every run process opens."""
    database = urlparse(pg_database)
    for name, value in (
        ("DAGSTER_PG_HOST", database.hostname or ""),
        ("DAGSTER_PG_PORT", str(database.port)),
        ("DAGSTER_PG_DB", database.path.lstrip("/")),
        ("DAGSTER_PG_USER", database.username or ""),
        ("DAGSTER_PG_PASSWORD", database.password or ""),
    ):
        monkeypatch.setenv(name, value)
    with instance_for_test(overrides=instance_config(postgres=True)) as instance:
        yield instance


def four_workers_claim_at_once(ours: Callable[[], Any], dagsters: Callable[[], Any]) -> None:
    """Four run workers' event logs, each on its own connections, claim a slot of a pool of 2 at the same
    moment, round after round: through ours the pool's limit holds in every round."""
    ours().set_concurrency_slots("source_medallion_raw", 2)
    assert pool_claims_at_once([ours() for _ in range(4)], "source_medallion_raw", rounds=20) == [2] * 20
    # The attack, on Dagster's own storage: three or four slots of two are taken in some round (in most
    # rounds on SQLite, about one in three on PostgreSQL). When this fails, Dagster's claim has become safe
    # and medallion_assets/pool_storage.py can go.
    assert max(pool_claims_at_once([dagsters() for _ in range(4)], "source_medallion_raw", rounds=40)) > 2


def test_steps_claiming_a_pool_slot_at_the_same_moment_never_take_more_than_its_limit_on_sqlite():
    with instance_for_test(overrides=instance_config()) as instance:
        # What a run worker rebuilds from the run's instance reference is the shipped class too.
        worker_instance = DagsterInstance.from_ref(instance.get_ref())
        assert type(worker_instance.event_log_storage) is PoolSafeSqliteEventLogStorage
        home = os.environ["DAGSTER_HOME"]
        four_workers_claim_at_once(
            lambda: PoolSafeSqliteEventLogStorage.from_config_value(None, {"dagster_home": home}),
            lambda: dagster_compat.SqliteEventLogStorage(os.path.join(home, "history", "runs", "")),
        )


@pytest.mark.integration  # PostgreSQL
def test_steps_claiming_a_pool_slot_at_the_same_moment_never_take_more_than_its_limit_on_postgresql(
    deployed_instance,
):
    worker_instance = DagsterInstance.from_ref(deployed_instance.get_ref())
    assert type(worker_instance.event_log_storage) is PoolSafePostgresEventLogStorage
    url = deployed_instance.event_log_storage.postgres_url
    four_workers_claim_at_once(
        lambda: PoolSafePostgresEventLogStorage(url, should_autocreate_tables=False),
        lambda: PostgresEventLogStorage(url, should_autocreate_tables=False),
    )


@pytest.mark.integration  # four run processes
def test_concurrent_runs_never_exceed_the_pool_limit_synced_from_the_catalog(
    store, tmp_path, deployed_instance
):
    pool = stage_pool(store.snapshot().stages("user_events_etl")[0], store.snapshot())
    assert pool == "source_medallion_raw"
    store.upsert({"throttles": [limit_row("source", "medallion_raw", "concurrency", 3)]})
    tally = tmp_path / "tally.json"
    # On Dagster's own claim of a slot this test once saw four steps inside a pool of three (the test above
    # shows how).
    build_control_sensor(store.snapshot(), store, MedallionTranslator(), DEFAULT_SENSOR_INTERVAL_SECONDS)(
        build_sensor_context(instance=deployed_instance)
    )
    runs = [SPAWN.Process(target=run_pooled_step, args=(pool, str(tally), RUNS)) for _ in range(RUNS)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(timeout=300)
    assert [run.exitcode for run in runs] == [0] * RUNS
    assert len(deployed_instance.get_run_records()) == RUNS
    # Each step held its slot until the fourth run was inside the pool or waiting on it: without the limit of
    # 3 all four would have been inside at once.
    assert json.loads(tally.read_text()) == {"inside": 0, "most": 3, "finished": RUNS}


def test_two_processes_together_stay_within_the_rate(pg_database, tmp_path):
    store = CatalogStore(pg_database)
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    limit = 6000  # rows per minute: a bucket of 6000 that refills 100 rows a second
    store.upsert({"throttles": [limit_row("source", "medallion_raw", "rows_per_minute", limit)]})
    takers = [
        SPAWN.Process(target=take_in_a_process, args=(pg_database, 40, str(tmp_path / f"{n}.json")))
        for n in range(2)
    ]
    for taker in takers:
        taker.start()
    for taker in takers:
        taker.join(timeout=300)
    assert [taker.exitcode for taker in takers] == [0, 0]
    per_process = [json.loads((tmp_path / f"{n}.json").read_text()) for n in range(2)]
    grants = sorted(grant for grants in per_process for grant in grants)
    assert len(grants) == 80 and sum(g[1] for g in grants) == 8000
    # 8000 rows is 2000 more than the full bucket, 20 s of refill: far more than 80 grants take on a loaded
    # machine, so someone had to wait for it.
    assert any(g[2] > 0 for g in grants)
    rate = limit / 60
    # The bucket's promise, checked on what it granted: between any two grants, no more than a full bucket
    # plus what refilled in between. Two processes taking the same tokens would break it.
    for first in range(len(grants)):
        granted = 0
        for last in range(first, len(grants)):
            granted += grants[last][1]
            assert granted <= limit + rate * (grants[last][0] - grants[first][0]) + 1e-6
    assert all(g[3] >= -1e-6 for g in grants)
    store.engine.dispose()


def test_an_ingest_waits_for_its_source_rate_and_audits_the_wait(tmp_path, spark):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "part-1.jsonl").write_text(
        "".join(json.dumps({"id": f"o{i}", "amount": i}) + "\n" for i in range(30))
    )
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    snapshot = CatalogSnapshot()
    snapshot.add(
        "sources",
        Source(
            source_id="orders_files",
            s3_path=str(raw),
            file_format="jsonl",
            columns={"id": "string", "amount": "int"},
        ),
    )
    snapshot.add("targets", Target(target_id="bronze_orders", layer="bronze"))
    stage = Stage(
        pipeline_id="orders",
        stage_order=1,
        stage_name="ingest",
        input_id="orders_files",
        target_id="bronze_orders",
    )
    snapshot.add("stages", stage)
    store.upsert({"throttles": [limit_row("source", "local_files", "rows_per_minute", 60)]})
    # Empty the bucket: the 30 parsed rows would then wait half a minute for the refill (a row a second).
    assert take(store, "source", "local_files", "rows_per_minute", 60).waited_sec == 0

    def refill_while_the_ingest_waits():
        """Fill the bucket (as the clock would, only sooner) a second after the ingest's rows reach it."""
        while not store.processed_objects("orders_files"):
            time.sleep(0.05)
        time.sleep(1)
        with store.engine.begin() as connection:
            connection.execute(update(throttle_buckets).values(tokens=60))

    refiller = threading.Thread(target=refill_while_the_ingest_waits)
    refiller.start()
    outcome = StageRunner(
        spark,
        snapshot,
        store,
        Lake.resolve(tmp_path / "lake"),
        throttle=CatalogThrottles(store),
        recovery=CatalogRoutes(store, snapshot),
    ).run_stage(stage)
    refiller.join()
    assert outcome.rows_written == 30
    waits = store.audit_entries(event="throttle")
    assert [(w["pipeline_id"], w["stage_name"], w["dataset"], w["status"]) for w in waits] == [
        ("orders", "ingest", "bronze_orders", "waited")
    ]
    details = waits[0]["details"]
    assert {k: details[k] for k in ("system_kind", "system_id", "metric", "amount", "limit")} == {
        "system_kind": "source",
        "system_id": "local_files",
        "metric": "rows_per_minute",
        "amount": 30,
        "limit": 60.0,
    }
    assert waits[0]["duration_sec"] > 0


def test_throttle_without_a_row_passes_freely(store):
    assert (
        throttle(store, "source", "medallion_raw", {"rows_per_minute": 10**9, "bytes_per_hour": 10**12}) == []
    )
    assert store.audit_entries(event="throttle") == []


def test_cli_set_show_sync_and_refusals(store, tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_CATALOG_URL", store.url)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    runner = CliRunner()

    def medallion(*args: str):
        return runner.invoke(main, ["throttle", *args])

    unknown = medallion("set", "source", "crm", "--metric", "concurrency", "--limit", "3")
    assert unknown.exit_code == 2
    assert unknown.stderr == (
        "unknown source system 'crm'; known source systems: medallion_raw, medallion_replica\n"
    )
    for limit in ("0", "-5"):
        refused = medallion("set", "target", "warehouse", "--metric", "bytes_per_hour", "--limit", limit)
        assert refused.exit_code == 2
        assert refused.stderr == (
            f"--limit must be greater than 0, not {limit} (to stop a system, use "
            "`medallion disable target warehouse`)\n"
        )
    assert store.read_table("throttles") == []

    concurrency = medallion("set", "source", "medallion_raw", "--metric", "concurrency", "--limit", "3")
    assert concurrency.exit_code == 0
    assert concurrency.stdout == (
        "source medallion_raw: concurrency limited to 3; pool source_medallion_raw: the "
        "medallion_control sensor applies it on its next tick (or run `medallion "
        "throttle sync`)\n"
    )
    rate = medallion("set", "target", "warehouse", "--metric", "rows_per_minute", "--limit", "1000")
    assert rate.stdout == "target warehouse: rows_per_minute limited to 1000; applies from the next batch\n"
    assert sorted(t.key() + (t.limit_value,) for t in store.read_table("throttles")) == [
        ("source", "medallion_raw", "concurrency", 3.0),
        ("target", "warehouse", "rows_per_minute", 1000.0),
    ]

    no_home = medallion("sync")
    assert no_home.exit_code == 2
    assert no_home.stderr == (
        "DAGSTER_HOME is not set: pool limits live in a Dagster instance; point DAGSTER_HOME "
        "at it (with Medallion's dagster.yaml) and run again\n"
    )
    assert medallion("show").stdout.splitlines()[0].split() == [
        "source",
        "medallion_raw",
        "concurrency",
        "3",
        "pool",
        "source_medallion_raw",
        "(set",
        "DAGSTER_HOME",
        "to",
        "see",
        "its",
        "slots)",
    ]

    with instance_for_test() as instance:  # sets DAGSTER_HOME
        synced = medallion("sync")
        assert synced.exit_code == 0, synced.output
        assert synced.stdout == "source_medallion_raw: 3 (set)\ntarget_warehouse: 2 (set)\n"
        assert (
            medallion("sync").stdout
            == "source_medallion_raw: 3 (unchanged)\ntarget_warehouse: 2 (unchanged)\n"
        )
        assert {p.name: p.limit for p in instance.event_log_storage.get_pool_limits()} == {
            "source_medallion_raw": 3,
            "target_warehouse": 2,
        }
        take(store, "target", "warehouse", "rows_per_minute", 250)
        shown = json.loads(medallion("show", "--json").stdout)
    by_metric = {(r["kind"], r["system"], r["metric"]): r for r in shown}
    assert list(by_metric) == [
        ("source", "medallion_raw", "concurrency"),
        ("source", "medallion_replica", "concurrency"),
        ("target", "warehouse", "concurrency"),
        ("target", "warehouse", "rows_per_minute"),
    ]
    assert by_metric["source", "medallion_raw", "concurrency"] == {
        "kind": "source",
        "system": "medallion_raw",
        "metric": "concurrency",
        "limit": 3,
        "default": False,
        "pool": "source_medallion_raw",
        "pool_limit": 3,
        "slots_in_use": 0,
        "steps_waiting": 0,
    }
    assert by_metric["source", "medallion_replica", "concurrency"]["default"] is True
    bucket = by_metric["target", "warehouse", "rows_per_minute"]
    assert bucket["limit"] == 1000 and 750 <= bucket["tokens"] < 1000


def test_the_catalog_refuses_throttles_on_unknown_systems_and_limits_out_of_range(store, tmp_path):
    bad = tmp_path / "throttles.yaml"
    bad.write_text(
        "throttles:\n"
        "  - {system_kind: source, system_id: crm, metric: rows_per_minute, limit_value: 100}\n"
        "  - {system_kind: target, system_id: warehouse, metric: concurrency, limit_value: 1.5}\n"
        "  - {system_kind: target, system_id: warehouse, metric: bytes_per_hour, limit_value: 0}\n"
    )
    with pytest.raises(CatalogInvalid) as raised:
        validate_files(store.snapshot(), [bad])
    assert [str(p) for p in raised.value.problems] == [
        f"{bad}:4: throttles[target, warehouse, bytes_per_hour].limit_value: Input should be greater than 0",
        f"{bad}:2: throttles[source, crm, rows_per_minute].system_id: unknown source system 'crm'; "
        "known source systems: medallion_raw, medallion_replica",
        f"{bad}:3: throttles[target, warehouse, concurrency].limit_value: a concurrency limit is a whole "
        "number of steps, not 1.5",
    ]
