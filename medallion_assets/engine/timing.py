"""Where a stage's wall time goes, as dbt prints per model: the time Spark ran its jobs, the time its metadata
commits took (publishing the lake table's branch and recording the commit in the ledger), and the rest
(planning, Python, catalog reads, the warehouse).

Spark's time is read from Spark's own status store: the stage's jobs carry a job tag set for its duration,
and their intervals (submission to completion, merged where they overlap) add up to the time Spark was
busy with them. A SparkListener cannot be registered from Python; the status store keeps the same facts.
Through Spark Connect the client sees no such store, and Spark's share is unknown (None).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import SparkSession

from medallion_assets import config


@dataclass
class StageTimes:
    """A stage's wall time and its parts, in seconds."""

    wall_sec: float = 0.0
    spark_jobs_sec: float | None = None
    metadata_commits_sec: float = 0.0

    @property
    def other_sec(self) -> float:
        """The wall time neither in Spark's jobs nor in metadata commits."""
        return max(0.0, self.wall_sec - (self.spark_jobs_sec or 0.0) - self.metadata_commits_sec)

    def as_metadata(self) -> dict[str, float]:
        """The parts, rounded to milliseconds, under the names the run report and the asset's metadata use
        (Spark's share left out when unknown)."""
        parts = {"metadata_commits_sec": self.metadata_commits_sec, "other_sec": self.other_sec}
        if self.spark_jobs_sec is not None:
            parts["spark_jobs_sec"] = self.spark_jobs_sec
        return {name: round(value, 3) for name, value in parts.items()}

    @contextmanager
    def committing(self) -> Iterator[None]:
        """Count the time inside as metadata commits."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.metadata_commits_sec += time.perf_counter() - started


@contextmanager
def spark_jobs_timed(spark: SparkSession, name: str, times: StageTimes) -> Iterator[None]:
    """Tag the Spark jobs run inside with a tag made of `name`, and set `times.spark_jobs_sec` to the time
    they ran (their intervals merged), once they are done."""
    if config.spark_remote():
        yield
        return
    context = spark.sparkContext
    tag = "medallion-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)
    context.addJobTag(tag)
    try:
        yield
    finally:
        context.removeJobTag(tag)
        times.spark_jobs_sec = _busy_sec(spark, tag)


def _busy_sec(spark: SparkSession, tag: str) -> float:
    """The time the jobs tagged `tag` ran, overlaps counted once, from Spark's status store."""
    jvm_context = spark.sparkContext._jsc.sc()
    store = jvm_context.statusStore()
    intervals = []
    for job_id in jvm_context.statusTracker().getJobIdsForTag(tag):
        job = store.job(job_id)
        if job.submissionTime().isDefined() and job.completionTime().isDefined():
            intervals.append((job.submissionTime().get().getTime(), job.completionTime().get().getTime()))
    busy_ms, reached = 0, None
    for start, end in sorted(intervals):
        if reached is not None and start < reached:
            start = reached
        if end > start:
            busy_ms += end - start
        reached = max(end, reached or end)
    return busy_ms / 1000
