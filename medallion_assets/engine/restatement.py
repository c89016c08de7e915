"""A restatement a user asks for (dbt microbatch's `--event-time-start/end`, SQLMesh's `restate`): the days
FROM to TO (inclusive) of the day-partitioned silver and gold datasets recomputed from their inputs, only
those days' partitions rewritten, one commit per table (the write-audit-publish every mode ends in), and
those days' warehouse rows replaced.

It travels as Dagster run tags, as a full refresh does (engine/refresh.py): `medallion run PIPELINE
--restate FROM:TO [--from DATASET]` sets `medallion/restate` = `FROM:TO` and, with --from,
`medallion/restate_from` = DATASET; a user launching from the UI's launchpad adds the same tags. A dataset
the restatement reaches whose table is not kept by day runs as it would (an incremental gold reads the days
rewritten below it as changes).

The tags' values come from whoever launched the run, so they are checked before any stage runs: a range
that is not two ISO dates in order, a dataset that is not the pipeline's or not kept by day, and a pipeline
with no dataset kept by day, are each refused in one line that names the value.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import date, timedelta

from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.engine.refresh import RefreshRefused, shown
from medallion_assets.storage.lake.layout import day_partition

RESTATE_TAG = "medallion/restate"
RESTATE_FROM_TAG = "medallion/restate_from"
# The longest range restated at once: a condition over its days stays small, and a typo of a year (0026)
# is refused instead of rewriting every partition of a table.
MOST_DAYS = 3660


class RestatementRefused(RefreshRefused):
    """A restatement of a range or a dataset that cannot be restated; the message is one line naming it.
    A kind of refused refresh: what refuses one refuses the other."""


@dataclass(frozen=True)
class Restatement:
    """The days `first` to `last` (inclusive) restated, from the dataset `start` and everything made from it
    (None: every dataset of the run)."""

    first: date
    last: date
    start: str | None = None

    @property
    def days(self) -> list[date]:
        return [self.first + timedelta(days=n) for n in range((self.last - self.first).days + 1)]

    @property
    def asked(self) -> str:
        """What was asked, and how, as a stage's reason says it."""
        start = f" {RESTATE_FROM_TAG}={self.start}" if self.start else ""
        return (
            f"a restatement of {self.first} to {self.last} was asked for by the run tags "
            f"{RESTATE_TAG}={self.first}:{self.last}{start}"
        )

    def reaches(self, dataset: str, made_from: Collection[str]) -> bool:
        """Whether `dataset`, made from the lake datasets `made_from`, is restated: it was asked for, or one
        it is made from was."""
        return self.start is None or self.start in {dataset, *made_from}


def restatement_tags(
    snapshot: CatalogSnapshot, pipeline_id: str, days: str, start: str | None
) -> dict[str, str]:
    """The run tags of `medallion run PIPELINE --restate FROM:TO [--from start]`, checked as a run checks
    them."""
    tags = {RESTATE_TAG: days, **({RESTATE_FROM_TAG: start} if start is not None else {})}
    requested_restatement(tags, snapshot, pipeline_id)
    return tags


def requested_restatement(
    tags: Mapping[str, str], snapshot: CatalogSnapshot, pipeline_id: str
) -> Restatement | None:
    """The restatement a run's tags ask for, None when they ask for none. Refused (RestatementRefused) when
    the range is not `FROM:TO`, two ISO dates in order, or names nothing of `pipeline_id` kept by day."""
    value, start = tags.get(RESTATE_TAG), tags.get(RESTATE_FROM_TAG)
    if value is None:
        if start is not None:
            raise RestatementRefused(f"run tag {RESTATE_FROM_TAG} needs {RESTATE_TAG}=FROM:TO beside it")
        return None
    first, last = _range(value)
    kept_by_day = [
        stage.target_id
        for stage in snapshot.stages(pipeline_id)
        if snapshot.targets[stage.target_id].layer != "bronze"
        and day_partition(snapshot.targets[stage.target_id])
    ]
    if not kept_by_day:
        raise RestatementRefused(
            f"pipeline {pipeline_id} has no silver or gold dataset partitioned by day "
            '(lake_table: {partition_by: ["days(column)"]}): nothing to restate'
        )
    if start is not None and start not in kept_by_day:
        datasets = [stage.target_id for stage in snapshot.stages(pipeline_id)]
        what = "is not partitioned by day" if start in datasets else f"is not a dataset of {pipeline_id}"
        raise RestatementRefused(
            f"{RESTATE_FROM_TAG}={shown(start)} {what}; datasets of {pipeline_id} partitioned by day: "
            f"{', '.join(kept_by_day)}"
        )
    return Restatement(first, last, start)


def _range(value: str) -> tuple[date, date]:
    """`FROM:TO` as two dates, in order, at most MOST_DAYS days apart."""
    first_day, _, last_day = value.partition(":")
    try:
        first, last = date.fromisoformat(first_day.strip()), date.fromisoformat(last_day.strip())
    except ValueError:
        raise RestatementRefused(
            f"{RESTATE_TAG}={shown(value)} is not a range of days: give FROM:TO, two dates as YYYY-MM-DD, "
            "e.g. 2026-11-01:2026-11-07"
        ) from None
    if last < first:
        raise RestatementRefused(f"{RESTATE_TAG}={shown(value)} is reversed: {last} is before {first}")
    if (last - first).days >= MOST_DAYS:
        raise RestatementRefused(
            f"{RESTATE_TAG}={shown(value)} spans {(last - first).days + 1} days; restate at most "
            f"{MOST_DAYS} at once"
        )
    return first, last
