"""Volume anomalies and data-quality rates, from the audit log's history of each stage.

A stage's rows read and written are compared with a robust band of its recent successful runs: median ± k·MAD
(median absolute deviation), so one odd day in the history does not move the band. With fewer runs than the
catalog's `min_runs`, the verdict says so instead of guessing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import select

from medallion_assets.catalog.models import VolumeBand
from medallion_assets.catalog.schema import audit_log
from medallion_assets.catalog.store import CatalogStore

METRICS = ("rows_read", "rows_written")
# A perfectly steady history has MAD 0, which would flag a single extra row: the band is at least this share
# of the median wide on each side.
MIN_HALF_WIDTH_SHARE = 0.01


@dataclass(frozen=True)
class VolumeVerdict:
    metric: str
    value: int
    status: Literal["normal", "anomaly", "insufficient_history"]
    history_runs: int
    median: float | None = None
    mad: float | None = None
    low: float | None = None
    high: float | None = None

    def explanation(self, band: VolumeBand) -> str:
        if self.status == "insufficient_history":
            return (
                f"{self.metric}={self.value}: only {self.history_runs} earlier successful run(s), "
                f"{band.min_runs} needed for a band; no verdict yet"
            )
        where = "outside" if self.status == "anomaly" else "within"
        return (
            f"{self.metric}={self.value} is {where} [{self.low:g}, {self.high:g}] = median {self.median:g} ± "
            f"{band.k:g}·MAD {self.mad:g} of the last {self.history_runs} successful runs"
        )


def judge_volume(metric: str, value: int, history: list[int], band: VolumeBand) -> VolumeVerdict:
    if len(history) < band.min_runs:
        return VolumeVerdict(metric, value, "insufficient_history", len(history))
    median = statistics.median(history)
    mad = statistics.median(abs(x - median) for x in history)
    half_width = max(band.k * mad, MIN_HALF_WIDTH_SHARE * abs(median))
    low, high = median - half_width, median + half_width
    status: Literal["normal", "anomaly"] = "normal" if low <= value <= high else "anomaly"
    return VolumeVerdict(metric, value, status, len(history), median, mad, low, high)


def stage_history(store: CatalogStore, pipeline_id: str, stage_name: str, runs: int) -> list[dict[str, Any]]:
    """Rows read and written by the stage's last `runs` successful executions, newest first."""
    query = (
        select(audit_log.c.rows_read, audit_log.c.rows_written)
        .where(
            audit_log.c.pipeline_id == pipeline_id,
            audit_log.c.stage_name == stage_name,
            audit_log.c.event == "stage",
            audit_log.c.status == "success",
        )
        .order_by(audit_log.c.audit_id.desc())
        .limit(runs)
    )
    with store.engine.connect() as connection:
        return [dict(row) for row in connection.execute(query).mappings()]


def volume_verdicts(
    store: CatalogStore, pipeline_id: str, stage_name: str, counts: dict[str, int], band: VolumeBand
) -> list[VolumeVerdict]:
    """This run's counts (not yet in the audit log) against the band of the runs before it."""
    history = stage_history(store, pipeline_id, stage_name, band.runs)
    return [
        judge_volume(metric, counts[metric], [h[metric] for h in history if h[metric] is not None], band)
        for metric in METRICS
    ]


def dq_rate(rows_read: int, rows_rejected: int) -> float | None:
    """Share of rows read that no rule rejected (dropped or quarantined); None with no input. Deduplication
    removes rows too, but they were not bad: they are not counted as rejected."""
    return max(0.0, 1 - rows_rejected / rows_read) if rows_read else None
