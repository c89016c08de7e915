"""What every part of running a stage shares: the outside world it runs in (Spark, the catalog, the ledger,
the lake, the warehouse) and the reads and records each mode makes alike."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from medallion_assets.catalog.models import Rule, Stage, Target, history_rules
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.versions import stage_fingerprint
from medallion_assets.engine.ingest import bronze_schema, struct_of
from medallion_assets.engine.refresh import FullRefresh
from medallion_assets.engine.restatement import Restatement
from medallion_assets.engine.services import Ledger, Recovery, Throttle
from medallion_assets.engine.stage.outcome import Adjustments
from medallion_assets.engine.validation import RuleOutcome
from medallion_assets.storage.lake.layout import table_of
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables
from medallion_assets.storage.warehouse import Warehouse


def stage_rules(snapshot: CatalogSnapshot, stage: Stage) -> list[Rule]:
    """The stage's rule set, and the checks its target's kind implies (a type 2 history's)."""
    implied = history_rules(snapshot.targets[stage.target_id])
    if not stage.validation_set_id:
        return implied
    return [*snapshot.rule_sets[stage.validation_set_id].check_def, *implied]


@dataclass
class StageContext:
    """What a stage needs from the outside world; one per run, shared by its stages. `store` is the ledger it
    records bookmarks and audit entries in; `resolved_lake` is the lake, whose tables `lake` reads and
    writes; `throttle` and `recovery` are given by the asset layer (see engine/services.py); `full_refresh`
    is the one the run's user asked for, if any (engine/refresh.py), and `restatement` the days they asked
    to restate (engine/restatement.py)."""

    spark: SparkSession
    snapshot: CatalogSnapshot
    store: Ledger
    resolved_lake: Lake
    warehouse: Warehouse | None = None
    halt_reason: Callable[[Stage], str | None] = lambda stage: None
    adjustments: Adjustments = field(default_factory=Adjustments)
    throttle: Throttle = field(kw_only=True)
    recovery: Recovery = field(kw_only=True)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex, kw_only=True)
    full_refresh: FullRefresh | None = field(default=None, kw_only=True)
    restatement: Restatement | None = field(default=None, kw_only=True)
    lake: LakeTables = field(init=False)

    def __post_init__(self) -> None:
        self.lake = LakeTables(self.spark, self.resolved_lake)

    def read_dataset(
        self, target_id: str, snapshot_id: int | None = None, appended_after: int | None = None
    ) -> DataFrame:
        """A lake dataset as of `snapshot_id`, or its current version; of bronze, with `appended_after`, only
        the rows appended after that snapshot."""
        target = self.snapshot.targets[target_id]
        table = table_of(target)
        if target.layer != "bronze":
            return self.lake.read(table, snapshot_id=snapshot_id)
        # Read with the catalog's schema: its columns in its order, whatever the table gained meanwhile.
        producer = self.snapshot.stage_producing(target_id)
        assert producer is not None, "a bronze target is made by the stage that ingests its source"
        schema = struct_of(bronze_schema(self.snapshot.sources[producer.input_id]))
        return self.lake.read_columns(table, schema, snapshot_id=snapshot_id, appended_after=appended_after)

    def rules(self, stage: Stage) -> list[Rule]:
        return stage_rules(self.snapshot, stage)

    def verdicts_of_version(
        self, stage: Stage, snapshot_id: int, judged: Callable[[], list[RuleOutcome]]
    ) -> list[RuleOutcome]:
        """The stage's rules' verdicts on its table's `snapshot_id`, which this run left as it was: those
        the ledger kept of that version, for rules unchanged since; the others (new or changed rules,
        freshness, which ages with the clock, a version whose verdicts were not kept) as `judged` finds
        every rule this run, called only then."""
        rules = self.rules(stage)
        kept = self.store.verdicts(stage.target_id, snapshot_id)
        outcomes = {
            i: outcome
            for i, rule in enumerate(rules)
            if rule.type != "freshness"
            and rule.name in kept
            and (outcome := RuleOutcome.of_verdict(rule, kept[rule.name])) is not None
        }
        if len(outcomes) == len(rules):
            return [outcomes[i] for i in range(len(rules))]
        judged_now = judged()
        return [outcomes.get(i, judged_now[i]) for i in range(len(rules))]

    def record_commit(self, stage: Stage, snapshot_id: int, operation: str, inputs: dict[str, int]) -> None:
        target = self.snapshot.targets[stage.target_id]
        self.store.record_commit(
            fingerprint=stage_fingerprint(stage, target, self.snapshot),
            dataset=stage.target_id,
            snapshot_id=snapshot_id,
            run_id=self.run_id,
            pipeline_id=stage.pipeline_id,
            stage_name=stage.stage_name,
            operation=operation,
            inputs=inputs,
        )

    def last_publish(self, target: Target) -> dict[str, Any] | None:
        """The ledger's row of the last version of the target's table this stage published, if any."""
        commits = [c for c in self.store.lake_commits(target.target_id) if c["operation"] == "publish"]
        return commits[-1] if commits else None

    def lake_ancestry(self, stage: Stage) -> set[str]:
        """Every lake dataset the stage's inputs are made from, the inputs included."""
        found, frontier = set(), list(stage.input_ids())
        while frontier:
            dataset = frontier.pop()
            if dataset in self.snapshot.targets and dataset not in found:
                found.add(dataset)
                producer = self.snapshot.stage_producing(dataset)
                frontier += producer.input_ids() if producer else []
        return found
