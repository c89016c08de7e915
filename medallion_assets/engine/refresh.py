"""A full refresh a user asks for: silver and gold datasets rebuilt whole from their inputs, whatever their
plan would have chosen, each as one commit (the full path's write-audit-publish).

It travels as Dagster run tags, so that every way of launching a run can ask for it: `medallion run
--full-refresh [--from DATASET]` sets them, and a user launching from the UI's launchpad adds the tag
`medallion/full_refresh` with `*` (every dataset of the run) or dataset ids separated by commas (each, and
everything made from it). Bronze is never re-ingested: its raw objects may be gone, so a refresh rebuilds only
what is made from bronze.

The tag's value comes from whoever launched the run, so it is checked before any stage runs: anything but `*`
or datasets of the catalog is refused, with a message naming the tag and the value.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from medallion_assets.catalog.snapshot import CatalogSnapshot

FULL_REFRESH_TAG = "medallion/full_refresh"
# Set beside it by `medallion run`, so that a stage's reason names the command, not the tag it wrote.
FULL_REFRESH_BY_TAG = "medallion/full_refresh_by"
COMMAND = "medallion run"
EVERY_DATASET = "*"

# The longest part of a refused value repeated in its message: a tag can be any length.
_SHOWN_CHARACTERS = 100


class RefreshRefused(ValueError):
    """A full refresh that names something other than a dataset; the message is one line that names it."""


@dataclass(frozen=True)
class FullRefresh:
    """The datasets a full refresh starts from (None: every dataset of the run), and who asked, as a stage's
    reason says it."""

    starts: frozenset[str] | None
    asked_by: str

    def reaches(self, dataset: str, made_from: Collection[str]) -> bool:
        """Whether `dataset`, made from the lake datasets `made_from`, is rebuilt: it was asked for, or one
        it is made from was."""
        return self.starts is None or not self.starts.isdisjoint({dataset, *made_from})


def full_refresh_tags(snapshot: CatalogSnapshot, pipeline_id: str, start: str | None) -> dict[str, str]:
    """The run tags of `medallion run PIPELINE --full-refresh [--from start]`; refused when `start` is not a
    dataset of the pipeline."""
    datasets = [stage.target_id for stage in snapshot.stages(pipeline_id)]
    if start is not None and start not in datasets:
        raise RefreshRefused(
            f"--from: {shown(start)} is not a dataset of pipeline {pipeline_id}; "
            f"its datasets: {', '.join(datasets)}"
        )
    return {FULL_REFRESH_TAG: start or EVERY_DATASET, FULL_REFRESH_BY_TAG: COMMAND}


def requested_full_refresh(
    tags: Mapping[str, str], snapshot: CatalogSnapshot, pipeline_id: str
) -> FullRefresh | None:
    """The full refresh a run's tags ask for, None when they ask for none. Refused when the tag holds
    anything but `*` or dataset ids of the catalog; the message offers those of `pipeline_id`."""
    value = tags.get(FULL_REFRESH_TAG)
    if value is None:
        return None
    by_command = tags.get(FULL_REFRESH_BY_TAG) == COMMAND
    if value.strip() == EVERY_DATASET:
        asked_by = f"`{COMMAND} --full-refresh`" if by_command else f"the run tag {FULL_REFRESH_TAG}=*"
        return FullRefresh(None, asked_by)
    starts = [part.strip() for part in value.split(",")]
    for start in starts:
        if start not in snapshot.targets:
            datasets = ", ".join(stage.target_id for stage in snapshot.stages(pipeline_id))
            raise RefreshRefused(
                f"run tag {FULL_REFRESH_TAG}={shown(value)} names {shown(start)}, which is not a dataset: "
                f"give {EVERY_DATASET} or dataset ids separated by commas (pipeline {pipeline_id} has "
                f"{datasets})"
            )
    asked_by = (
        f"`{COMMAND} --full-refresh" + "".join(f" --from {start}" for start in starts) + "`"
        if by_command
        else f"the run tag {FULL_REFRESH_TAG}={','.join(starts)}"
    )
    return FullRefresh(frozenset(starts), asked_by)


def shown(value: str) -> str:
    """`value` quoted for a refusal's message, cut short when long."""
    return repr(value if len(value) <= _SHOWN_CHARACTERS else value[:_SHOWN_CHARACTERS] + "…")
