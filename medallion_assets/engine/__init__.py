"""The engine: ingest, transform, validate and load as plain functions over Spark DataFrames; no Dagster.

The code that Spark's executors run (`raw_reader`, `staging_writer`) is shipped with each task by value, so
a cluster or a Spark Connect server needs pyarrow and boto3, not Medallion itself.
"""

from pyspark import cloudpickle

from medallion_assets.engine import raw_reader, staging_writer

# pyspark's vendored cloudpickle has no annotations.
cloudpickle.register_pickle_by_value(raw_reader)  # type: ignore[no-untyped-call]
cloudpickle.register_pickle_by_value(staging_writer)  # type: ignore[no-untyped-call]
