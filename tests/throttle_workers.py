"""What test_throttles runs in separate processes (spawned, so they import only this small module).

No `from __future__ import annotations`: Dagster reads the asset's `context` annotation as a type.
"""

import fcntl
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dagster import AssetExecutionContext, DagsterEventType, DagsterInstance, asset, materialize

from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.steering.throttles import take

# How long a step waits for the other runs to show up, inside the pool or waiting on it, before it fails.
ARRIVAL_TIMEOUT_SEC = 180


@contextmanager
def _tally(path: Path) -> Iterator[dict]:
    """The steps' shared tally (inside the pool now, the most ever inside, finished), read and written under a
    file lock, so processes count into it one at a time."""
    with path.open("a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        tally = json.loads(file.read() or '{"inside": 0, "most": 0, "finished": 0}')
        yield tally
        file.seek(0)
        file.truncate()
        file.write(json.dumps(tally))


def run_pooled_step(pool: str, tally: str, runs: int) -> None:
    """One run: a single step in `pool` that counts itself into the tally while it holds its slot, and holds
    it until every run not yet finished is either inside the pool or waiting on it: so the pool, and nothing
    else, decides how many are inside at once."""
    counted = Path(tally)

    @asset(pool=pool)
    def extract(context: AssetExecutionContext) -> None:
        with _tally(counted) as now:
            now["inside"] += 1
            now["most"] = max(now["most"], now["inside"])
        deadline = time.monotonic() + ARRIVAL_TIMEOUT_SEC
        while True:
            waiting = max(
                context.instance.event_log_storage.get_concurrency_info(pool).pending_step_count,
                _blocked_runs(context.instance, pool),
            )
            with _tally(counted) as now:
                if now["inside"] + waiting >= runs - now["finished"]:
                    now["inside"] -= 1
                    now["finished"] += 1
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the other runs neither entered pool {pool} nor waited on it: {now}")
            time.sleep(0.05)

    assert materialize([extract], instance=DagsterInstance.get()).success


def _blocked_runs(instance: DagsterInstance, pool: str) -> int:
    """The runs whose step Dagster reported blocked by the pool's limit. A blocked step's pending claim does
    not always show in the pool's pending count: CI once saw a step reported blocked while that count stayed
    0 for the whole timeout."""
    blocked = f"blocked by limit for pool {pool}"
    return sum(
        any(
            blocked in entry.message for entry in instance.all_logs(run.run_id, DagsterEventType.ENGINE_EVENT)
        )
        for run in instance.get_runs()
    )


def take_in_a_process(url: str, takes: int, out: str) -> None:
    """Take 100 rows `takes` times from medallion_raw's rows_per_minute bucket; write the grants as JSON."""
    store = CatalogStore(url)
    grants = [take(store, "source", "medallion_raw", "rows_per_minute", 100) for _ in range(takes)]
    Path(out).write_text(json.dumps([[g.granted_at, g.amount, g.waited_sec, g.tokens_left] for g in grants]))
