"""Running one stage end to end without Dagster: read inputs, transform, apply row rules, write, check, load.

The runner asks the plan what a stage will do this run (plan.py) and hands it to the strategy of that mode:
bronze ingest (bronze.py), a full recompute (full.py), a silver merge or change feed (merge.py), gold by
groups (groups.py), gold by day (days.py) or a range of days restated (restate.py). Silver and gold are
written to a branch of their lake table named after the run and published only when no blocking rule fails
(publish.py). A warehouse target is then loaded (load.py).

The asset factory wraps `run_stage`; the CLI, benchmarks and tests can call it directly.
"""

from __future__ import annotations

import time
from typing import Protocol

from pyspark.sql import DataFrame

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.engine.stage import bronze, days, full, groups, merge, restate
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.load import load
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.engine.stage.plan import Mode, plan_stage
from medallion_assets.engine.timing import StageTimes, spark_jobs_timed
from medallion_assets.errors import StageHalted
from medallion_assets.storage.lake.layout import table_of


class Strategy(Protocol):
    """How one mode builds a silver or gold dataset (a module with `build`): the outcome and the version
    written, or, when it finds it cannot go on so, the mode to build it in instead and why."""

    def build(
        self, context: StageContext, stage: Stage, target: Target, plan: Mode
    ) -> tuple[StageOutcome, DataFrame] | Mode: ...


# The strategy of each mode the plan can choose (`Mode.strategy`): a new mode is added here.
STRATEGIES: dict[str, Strategy] = {
    "full": full,
    "silver merge": merge,
    "gold by groups": groups,
    "gold by day": days,
    "restatement": restate,
}


class StageRunner(StageContext):
    """Runs the stages of one run, in the context they share (see `StageContext`)."""

    def run_stage(self, stage: Stage) -> StageOutcome:
        """Run the stage, timing it: its wall time, and of it the time in its Spark jobs and in its
        metadata commits (`StageTimes`)."""
        started, times = time.perf_counter(), StageTimes()
        with spark_jobs_timed(self.spark, f"{self.run_id}-{stage.stage_name}", times):
            outcome = self._run_stage(stage, times)
        times.wall_sec = time.perf_counter() - started
        outcome.times = times
        return outcome

    def _run_stage(self, stage: Stage, times: StageTimes) -> StageOutcome:
        target = self.snapshot.targets[stage.target_id]
        # What the warehouse holds before this run: an incremental load applies to exactly that version.
        held = (
            self.store.warehouse_snapshot(target.target_id, repr(self.warehouse))
            if target.kind == "warehouse" and self.warehouse is not None
            else None
        )
        outcome, written = self._build(stage, target)
        times.metadata_commits_sec += outcome.times.metadata_commits_sec
        outcome.table = str(table_of(target))
        # The lake's facts go where the stage's other details go: the audit row and the asset's metadata.
        outcome.details["table"] = outcome.table
        if outcome.snapshot_id is not None:
            outcome.details["snapshot_id"] = str(outcome.snapshot_id)
        if outcome.input_snapshots:
            outcome.details["input_snapshots"] = {k: str(v) for k, v in outcome.input_snapshots.items()}
        if outcome.staged_branch:
            outcome.details["staged_branch"] = outcome.staged_branch
        outcome.columns = {f.name: f.dataType.simpleString() for f in written.schema.fields}
        # A failed rule of severity error keeps the data out of the warehouse; the caller reports it.
        if target.kind == "warehouse" and not outcome.blocking_failures():
            reason = self.halt_reason(stage)
            if reason:
                raise StageHalted(reason)
            outcome.load = load(self, stage, target, written, outcome, held)
        if outcome.changed_groups is not None:
            outcome.changed_groups.unpersist()
        return outcome

    def _build(self, stage: Stage, target: Target) -> tuple[StageOutcome, DataFrame]:
        """The stage's dataset built by the strategy of its mode: bronze is ingested; silver and gold are
        built as the plan says, or, when its strategy finds it cannot (a merge meeting a truncate event), as
        the strategy says instead. Returns the outcome and the version written: the published one, or the
        staged branch when a blocking rule failed (main is untouched)."""
        if target.layer == "bronze":
            return bronze.build(self, stage, target)
        built: tuple[StageOutcome, DataFrame] | Mode = plan_stage(self, stage, target)
        while isinstance(built, Mode):
            built = STRATEGIES[built.strategy].build(self, stage, target, built)
        return built
