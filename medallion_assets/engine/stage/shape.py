"""A stage's transformation, shared by every mode that computes rows: its SQL, the casts to its declared
schema, deduplication, and the rows its drop and quarantine rules take out."""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from medallion_assets.catalog.models import Rule, Stage, Target
from medallion_assets.engine import changes
from medallion_assets.engine.observed import Observed
from medallion_assets.engine.transform import conform, counted, deduplicate, run_sql
from medallion_assets.engine.validation import row_violation
from medallion_assets.naming import INGESTION_COLUMNS


class Shaping(Protocol):
    """What a stage's transformation asks of its run: a run's StageContext, or a unit test's (`medallion
    test`), which reads and writes no table."""

    @property
    def spark(self) -> SparkSession: ...

    def rules(self, stage: Stage) -> list[Rule]: ...


@dataclass(frozen=True)
class Shaped:
    """A stage's rows before they are written, and what the write will count: rows in, each kind of reject."""

    frame: DataFrame
    counts: Observed  # holds `rows_in_metric`, the rows the transformation made
    rejects: list[tuple[DataFrame, Observed]]
    rows_in_metric: str = "rows"

    def rows_in(self) -> int:
        return int(self.counts.result[self.rows_in_metric])


def shape(
    context: Shaping, stage: Stage, target: Target, inputs: dict[str, DataFrame], apply: bool = True
) -> Shaped:
    """The stage's transformation: SQL over its inputs (or its main input), casts to the declared schema,
    deduplication, and the rows drop or quarantine rules take out; of a change feed, the events those
    rules keep, applied to the keys' rows unless `apply` is false."""
    source_frame = (
        run_sql(context.spark, inputs, stage.transform_sql, stage.sql_dialect, list(target.columns or ()))
        if stage.transform_sql
        else inputs[stage.input_id]
    )
    rejects: list[tuple[DataFrame, Observed]] = []  # each kind of rejected rows, with its observed count
    if target.columns:  # conform counts the rows in too: one observation fewer
        conformed = conform(source_frame, target.columns)
        frame, counts, rows_in_metric = conformed.valid, conformed.counts, "rows in"
        rejects.append((conformed.rejected, conformed.counts))
    else:
        counts, rows_in_metric = counted(source_frame), "rows"
        frame = counts.frame
    if target.cdc is None:  # a change feed keeps every event until they are applied
        frame = deduplicate(frame, target.keys, target.keep_latest_by)
    for rule in context.rules(stage):
        violation = row_violation(rule)
        if violation is None or rule.action not in ("drop", "quarantine"):
            continue
        if rule.action == "quarantine":
            rejected = frame.where(violation).select(
                *[c for c in INGESTION_COLUMNS if c in frame.columns],
                F.lit(f"rule {rule.name} failed").alias("reason"),
                F.to_json(F.struct(*frame.columns)).alias("raw"),
            )
            violations = counted(frame, violation)
            rejects.append((rejected, violations))
            frame = violations.frame
        frame = frame.where(~violation)
    if target.cdc is not None and apply:
        frame = changes.apply_changes(changes.events_of(frame, target, frame), target)
    return Shaped(frame, counts, rejects, rows_in_metric)


def counted_rejects(rejects: list[tuple[DataFrame, Observed]]) -> Observed | None:
    """The rejected rows of the kinds that had some, as one frame its write counts (None: no kind had any).
    Call after the write of the kept rows, which counted each kind: a kind without rows is left out, so its
    part of the plan is not computed again."""
    present = [frame for frame, rows in rejects if rows.result["rows"]]
    if not present:
        return None
    return counted(reduce(lambda left, right: left.unionByName(right, allowMissingColumns=True), present))
