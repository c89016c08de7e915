"""What test_throttles runs in separate processes (spawned, so they import only this small module)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from dagster import DagsterInstance, asset, materialize

from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.throttles import take

BARRIER_TIMEOUT_SEC = 180


def run_pooled_step(pool: str, log: str, run_number: int, runs: int) -> None:
    """One run: a single step in `pool` that logs its start and end, and holds its slot until all `runs`
    have been launched, so that every run contends for the pool at the same time."""
    logged = Path(log)

    @asset(pool=pool)
    def extract() -> None:
        with logged.open("a") as out:
            out.write(f"{time.time()} 1\n")
        deadline = time.time() + BARRIER_TIMEOUT_SEC
        while len(list(logged.parent.glob("launched-*"))) < runs and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        with logged.open("a") as out:
            out.write(f"{time.time()} -1\n")

    (logged.parent / f"launched-{run_number}").touch()
    assert materialize([extract], instance=DagsterInstance.get()).success


def take_in_a_process(url: str, takes: int, out: str) -> None:
    """Take 100 rows `takes` times from medallion_raw's rows_per_minute bucket; write the grants as JSON."""
    store = CatalogStore(url)
    grants = [take(store, "source", "medallion_raw", "rows_per_minute", 100) for _ in range(takes)]
    Path(out).write_text(json.dumps([[g.granted_at, g.amount, g.waited_sec, g.tokens_left] for g in grants]))
