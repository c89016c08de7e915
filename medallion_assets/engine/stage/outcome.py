"""What running a stage did (`StageOutcome`), and how healing changed its next attempt (`Adjustments`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame

from medallion_assets.engine.timing import StageTimes
from medallion_assets.engine.validation import RuleOutcome
from medallion_assets.storage.warehouse import LoadResult


@dataclass
class StageOutcome:
    rows_read: int = 0
    rows_written: int = 0
    rows_quarantined: int = 0
    rule_outcomes: list[RuleOutcome] = field(default_factory=list)
    load: LoadResult | None = None
    table: str = ""  # the lake table written
    snapshot_id: int | None = None  # its version this stage committed; None when nothing was published
    # The version the stage found its table at and left as it was, its input having brought nothing new: the
    # rule outcomes are that version's verdicts (see StageContext.verdicts_of_version).
    unchanged_since: int | None = None
    staged_branch: str | None = None  # where an unpublished version waits for inspection
    # The branch of the quarantine table holding this run's rejects, until they are published with the stage.
    quarantine_branch: str | None = None
    input_snapshots: dict[str, int] = field(default_factory=dict)  # each lake input's version read
    columns: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    times: StageTimes = field(default_factory=StageTimes)  # its wall time, and where it went
    read: list[str] = field(default_factory=list)  # the datasets actually read, after any re-route
    # Of a gold stage that recomputed only some groups: their keys (gold's columns), whose rows it replaced in
    # the version `groups_replaced_in`.
    changed_groups: DataFrame | None = None
    groups_replaced_in: int | None = None

    def blocking_failures(self) -> list[RuleOutcome]:
        return [o for o in self.rule_outcomes if not o.passed and o.rule.severity == "error"]

    def blocking_error(self) -> str | None:
        failures = self.blocking_failures()
        return "blocking rule(s) failed: " + "; ".join(o.message for o in failures) if failures else None


@dataclass(frozen=True)
class Adjustments:
    """How healing changed a stage's next attempt (see control/actions.py, which asks for them)."""

    evolve_warehouse_schema: bool = False
    load_partitions: int | None = None
