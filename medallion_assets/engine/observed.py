"""Metrics an action computes as it goes (a count of the rows it writes, of the rows it rejects), read back on
every Spark the engine runs on.

A Spark Observation holds them once the action that ran the observed frame is done, but not always:
- through Spark Connect 4.1, the server waits 100 ms for them after the action and sends none when they are
  later (SPARK-54279, fixed after 4.1.1), which happens under load; none either when the observed plan ran
  inside another query (a view) or never ran. Reading a count from such an empty Observation failed a bronze
  ingest after its rows were committed and before its rejects were quarantined;
- in a classic session, adaptive execution plans away the part of a plan it finds empty at run time (every
  row of a batch rejected), observed node included, and the Observation's row stays empty, which PySpark
  fails to convert.
So nothing in the engine reads an Observation directly: `Observed.result` computes metrics that never came
with an aggregation of their own over the frame as it was before it was observed, a second pass paid only
then.
"""

from __future__ import annotations

from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import Column, DataFrame, Observation


class Observed:
    """`frame` with `metrics` (aggregate columns, each named) computed by the first action on it."""

    def __init__(self, frame: DataFrame, *metrics: Column) -> None:
        self._observation = Observation()
        self._unobserved = frame
        self._metrics = metrics
        self.frame = frame.observe(self._observation, *metrics)
        self._result: dict[str, Any] | None = None

    @property
    def result(self) -> dict[str, Any]:
        """The metrics by name: as the action observed them, or, when it sent none, aggregated now."""
        if self._result is None:
            try:
                observed = self._observation.get
            except Py4JJavaError:  # classic Spark: the empty row of metrics that never came
                observed = {}
            self._result = observed or self._unobserved.agg(*self._metrics).collect()[0].asDict()
        return self._result
