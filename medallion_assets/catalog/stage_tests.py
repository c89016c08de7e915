"""The checks of `stage_tests` rows (unit tests of stages, `medallion test`) against the catalog they test: a
test names a silver or gold stage there is, gives rows for exactly the stage's inputs, and names only columns
its inputs and its target are declared to have."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from medallion_assets.catalog.loader import declared_columns
from medallion_assets.catalog.models import Row, StageTest
from medallion_assets.catalog.snapshot import CatalogSnapshot


def stage_tests(snapshot: CatalogSnapshot, pipeline_id: str | None = None) -> list[StageTest]:
    """The catalog's stage tests, of one pipeline or of all, in their stages' run order, then by name."""
    order = {(stage.pipeline_id, stage.stage_name): rank for rank, stage in enumerate(snapshot.stages())}
    return sorted(
        (
            t
            for t in snapshot.rows_of("stage_tests", StageTest).values()
            if pipeline_id in (None, t.pipeline_id)
        ),
        key=lambda t: (order.get((t.pipeline_id, t.stage_name), -1), t.test_name),
    )


def check_stage_tests(snapshot: CatalogSnapshot) -> Iterator[tuple[str, Row, str, str]]:
    """A test of a stage that is not there or ingests raw files, rows for an input the stage does not read
    or none for one it does, and a column its input or its target is not declared to have."""
    stages = {(stage.pipeline_id, stage.stage_name): stage for stage in snapshot.stages()}
    for test in stage_tests(snapshot):
        stage = stages.get((test.pipeline_id, test.stage_name))
        if stage is None:
            yield "stage_tests", test, "stage_name", f"unknown stage {test.pipeline_id}.{test.stage_name}"
            continue
        target = snapshot.targets.get(stage.target_id)
        reads = stage.input_ids()
        if target is None or any(i not in snapshot.targets and i not in snapshot.sources for i in reads):
            continue  # the stage's own problem, said on the stage
        if target.layer == "bronze":
            yield (
                "stage_tests",
                test,
                "stage_name",
                "a bronze stage ingests raw files: test silver and gold stages",
            )
            continue
        for input_id in test.given:
            if input_id not in reads:
                yield (
                    "stage_tests",
                    test,
                    f"given.{input_id}",
                    (f"unknown input {input_id!r}; the stage reads {', '.join(reads)}"),
                )
        for input_id in reads:
            if input_id not in test.given:
                yield "stage_tests", test, "given", f"no rows for input {input_id!r}: give [] for none"
        for input_id, rows in test.given.items():
            if input_id in reads:
                yield from _unknown_columns(
                    test, f"given.{input_id}", rows, declared_columns(snapshot, input_id)
                )
        if isinstance(test.expect_rows, list):
            yield from _unknown_columns(test, "expect_rows", test.expect_rows, target.columns)


def _unknown_columns(
    test: StageTest, field: str, rows: Iterable[dict[str, Any]] | str, declared: dict[str, str] | None
) -> Iterator[tuple[str, Row, str, str]]:
    if declared is None or isinstance(rows, str):
        return  # undeclared columns are the SQL's to name; a CSV file not read was said already
    named = dict.fromkeys(column for row in rows for column in row)
    for column in named:
        if column not in declared:
            yield "stage_tests", test, field, f"unknown column {column!r}; it has {', '.join(declared)}"
