"""Which datasets can be read now, and why the others cannot.

- A source is up when its S3 prefix (or local folder) answers and holds at least one object.
- A warehouse target is up when its table answers a query.
- A lake target lives in Medallion's own lake and is up unless an operator says otherwise.

An operator marks something down with a `control_flags` row, the kill-switch mechanism under its own flag name
(`flag_name: available, flag_value: false`) so that "do not run" and "cannot be read" stay distinct. The row
names a dataset (`entity_type: dataset`), a source or a source system (`source`), or a target or a warehouse
system (`target`). Flags are read at every call, so a row update applies at once. Probe results are cached
for `MEDALLION_AVAILABILITY_TTL_SEC` seconds (default 30); a probe that has not answered within
`MEDALLION_PROBE_TIMEOUT_SEC` seconds (default 10) counts as down, so a blocked endpoint cannot stall a run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime

from botocore.exceptions import BotoCoreError, ClientError

from medallion_assets import config
from medallion_assets.catalog.models import Source
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.errors import SourceNotFound
from medallion_assets.naming import quote_qualified
from medallion_assets.storage.objects import any_object
from medallion_assets.storage.warehouse import WarehouseError, warehouse_from_url

FLAG_NAME = "available"
# Probes wait on the network; a few at once bound a wide query without opening a connection per dataset.
_PROBE_THREADS = 8


def probe_source(source: Source) -> str | None:
    """None when the source's prefix answers with objects; otherwise why it does not. One page of its listing
    tells: a source too large to list within the probe's timeout would be judged down."""
    try:
        any_object(source.s3_path, source.source_id)
    except (SourceNotFound, BotoCoreError, ClientError, OSError) as error:
        return str(error) or type(error).__name__
    return None


def probe_table(warehouse_url: str, table: str) -> str | None:
    """None when `table` ("schema.table") answers a query in the warehouse; otherwise why it does not."""
    try:
        with warehouse_from_url(warehouse_url) as warehouse:
            warehouse.query(f"SELECT * FROM {quote_qualified(table)} LIMIT 0")
    except (WarehouseError, ValueError) as error:
        return str(error)
    return None


class Availability:
    """Answers "which of these datasets are down, and why" for one catalog; safe to share between threads."""

    def __init__(
        self,
        store: CatalogStore,
        snapshot: CatalogSnapshot,
        warehouse_url: str | None = None,
        ttl_sec: float | None = None,
        probe_timeout_sec: float | None = None,
    ):
        self.store = store
        self.sources = snapshot.sources
        self.targets = snapshot.targets
        self.warehouse_url = warehouse_url or config.warehouse_url()
        self.ttl_sec = config.availability_ttl_sec() if ttl_sec is None else ttl_sec
        self.probe_timeout_sec = (
            config.probe_timeout_sec() if probe_timeout_sec is None else probe_timeout_sec
        )
        self._cache: dict[str, tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def unavailable(self, datasets: Iterable[str]) -> dict[str, str]:
        """The given datasets that are down now, each with the reason: an operator's flag, or a failed
        probe."""
        wanted = sorted(set(datasets))
        down = self.flagged(wanted)
        probes = {d: probe for d in wanted if d not in down and (probe := self._probe_for(d)) is not None}
        down.update(self._probed(probes))
        return dict(sorted(down.items()))

    def _entities(self, dataset: str) -> set[tuple[str, str]]:
        """Every (entity_type, entity_id) whose `available` flag covers the dataset."""
        entities = {("dataset", dataset)}
        if source := self.sources.get(dataset):
            entities |= {("source", dataset), ("source", source.system_id())}
        if target := self.targets.get(dataset):
            entities.add(("target", dataset))
            if target.kind == "warehouse":
                entities.add(("target", target.system or "warehouse"))
        return entities

    def flagged(self, datasets: Iterable[str]) -> dict[str, str]:
        """The given datasets an operator marked unavailable, each with the flag's reason; no probe runs."""
        datasets = sorted(set(datasets))
        flags = [
            f
            for f in self.store.table_rows("control_flags")
            if f["flag_name"] == FLAG_NAME and not f["flag_value"]
        ]
        down = {}
        for dataset in datasets:
            entities = self._entities(dataset)
            flag = next((f for f in flags if (f["entity_type"], f["entity_id"]) in entities), None)
            if flag:
                by = f" by {flag['updated_by']}" if flag["updated_by"] else ""
                down[dataset] = (
                    f"{flag['entity_type']} {flag['entity_id']} marked unavailable{by}: "
                    f"{flag['reason'] or 'no reason given'}"
                )
        return down

    def flagged_at(self, dataset: str) -> datetime | None:
        """When the flag that marks `dataset` unavailable was set (UTC), if one does."""
        entities = self._entities(dataset)
        times = [
            f["updated_at"]
            for f in self.store.table_rows("control_flags")
            if f["flag_name"] == FLAG_NAME
            and not f["flag_value"]
            and (f["entity_type"], f["entity_id"]) in entities
        ]
        return max((as_utc(t) for t in times if t is not None), default=None)

    def _probe_for(self, dataset: str) -> Callable[[], str | None] | None:
        if source := self.sources.get(dataset):
            return lambda: probe_source(source)
        target = self.targets.get(dataset)
        if target is not None and target.kind == "warehouse":
            table = target.location
            assert table is not None  # the Target model requires a location of a warehouse target
            return lambda: probe_table(self.warehouse_url, table)
        return None

    def _probed(self, probes: dict[str, Callable[[], str | None]]) -> dict[str, str]:
        now = time.monotonic()
        with self._lock:
            results = {d: self._cache[d][1] for d in probes if d in self._cache and self._cache[d][0] > now}
        missing = {d: probe for d, probe in probes.items() if d not in results}
        if missing:
            executor = ThreadPoolExecutor(
                max_workers=min(_PROBE_THREADS, len(missing)), thread_name_prefix="availability-probe"
            )
            futures = {d: executor.submit(probe) for d, probe in missing.items()}
            wait(futures.values(), timeout=self.probe_timeout_sec)
            # A probe still waiting on a blocked endpoint is left to finish on its own; its answer is not
            # awaited.
            executor.shutdown(wait=False, cancel_futures=True)
            fresh = {d: self._answer(future) for d, future in futures.items()}
            expires = time.monotonic() + self.ttl_sec
            with self._lock:
                self._cache.update({d: (expires, reason) for d, reason in fresh.items()})
            results.update(fresh)
        return {d: reason for d, reason in results.items() if reason is not None}

    def _answer(self, future: Future[str | None]) -> str | None:
        if not future.done() or future.cancelled():
            return f"no answer within {self.probe_timeout_sec:g} s"
        error = future.exception()
        # A probe that breaks in an unforeseen way has not shown the system usable: down, with the error.
        return f"probe failed: {type(error).__name__}: {error}" if error else future.result()


def as_utc(moment: datetime) -> datetime:
    """A catalog time as an aware UTC time: SQLite gives them back without a zone."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
