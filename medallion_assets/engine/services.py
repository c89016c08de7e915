"""What the engine asks of the world outside it, as small protocols: the asset layer hands it implementations.

The engine decides nothing about rate limits, availability or recovery paths and keeps no records of its own;
it calls these. The catalog-backed implementations are `control.steering.throttles.CatalogThrottles`,
`recovery.routes.CatalogRoutes` and `catalog.store.CatalogStore` (the ledger); a test or a tool may pass
others.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from medallion_assets.catalog.models import Source, Stage, Target
from medallion_assets.storage.warehouse import Batch


class Ledger(Protocol):
    """Where a stage records what it did: the objects it ingested (its bookmark), the lake versions it
    committed, and its audit entries."""

    def processed_objects(self, source_id: str) -> dict[str, str]: ...

    def record_bookmarks(
        self, source_id: str, objects: Iterable[tuple[str, str, int]], batch_id: str, state: str = "committed"
    ) -> None: ...

    def pending_batches(self, source_id: str) -> list[str]: ...

    def batch_objects(self, source_id: str, batch_id: str) -> list[tuple[str, str, int]]: ...

    def settle_batch(self, source_id: str, batch_id: str, snapshot_id: int | None) -> None: ...

    def record_commit(self, **commit: Any) -> None: ...

    def lake_commits(self, dataset: str) -> list[dict[str, Any]]: ...

    def record_audit(self, **entry: Any) -> None: ...

    def warehouse_snapshot(self, dataset: str, warehouse: str) -> int | None: ...

    def verdicts(self, dataset: str, snapshot_id: int) -> dict[str, dict[str, Any]]:
        """The rule verdicts (`RuleOutcome.verdict`) a successful stage recorded of that version of the
        dataset, by rule name; empty when none did."""
        ...


class Throttle(Protocol):
    """Rate limits of source and target systems: each call waits until the amounts may pass."""

    def take_from_source(self, source: Source, amounts: dict[str, float], **audit: Any) -> None: ...

    def stream_to_target(self, data: Batch, target: Target, **audit: Any) -> Batch:
        """`data` as it is handed to the loader, each part taken from the target system's limits first."""
        ...


class Recovery(Protocol):
    """Where a stage reads from when what it normally reads is down."""

    def readable_source(self, stage: Stage) -> Source:
        """The stage's source, or the first source of the shortest available path to its dataset."""
        ...

    def flagged(self, datasets: Iterable[str]) -> dict[str, str]:
        """The datasets among `datasets` an operator marked unavailable, with the reason."""
        ...

    def last_good_version(self, dataset: str) -> int | None:
        """The latest version of a lake dataset committed before it was marked unavailable, if any."""
        ...

    def no_path(self, stage: Stage, down: dict[str, str]) -> Exception:
        """The error to raise when the stage's dataset cannot be made without what is `down`."""
        ...
