"""The job the launcher and healing sensors request their runs in.

Dagster's implicit global asset job, which every code location with assets has anyway: a sensor given
`target=AssetSelection.all()` instead builds a job of its own over every asset, and each such job doubles the
time a large catalog's code location takes to load (10,000 datasets: resolve + snapshot 20 s → 10 s). Dagster
does not export the job's name, so it is imported from where Dagster defines it; the pinned Dagster version
and the sensor tests keep it honest.
"""

from dagster._core.definitions.assets.job.asset_job import IMPLICIT_ASSET_JOB_NAME

__all__ = ["IMPLICIT_ASSET_JOB_NAME"]
