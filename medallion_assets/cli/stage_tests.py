"""`medallion test [PIPELINE]`: the catalog's unit tests of stages (`stage_tests` rows) on local Spark."""

from __future__ import annotations

import sys

import click

from medallion_assets.cli.common import EXIT_FAILED, catalog_store, refuse, run_unit_tests


@click.command("test")
@click.argument("pipeline_id", metavar="[PIPELINE]", required=False)
@click.option("--json", "as_json", is_flag=True, help="print each test's outcome and differences as JSON")
def test(pipeline_id: str | None, as_json: bool) -> None:
    """Run the loaded catalog's stage tests (of PIPELINE, or all) in one local Spark session: each gives a
    silver or gold stage input rows, runs its SQL, casts, deduplication and rules over them, and compares the
    rows made and the quarantine reasons with those expected, printing each difference. Reads and writes no
    lake table, warehouse or catalog row.

    Exit codes: 0 every test passed, 1 a test failed, 2 invalid tests (an unknown stage, input or column)
    or an unknown pipeline."""
    from medallion_assets.catalog.stage_tests import check_stage_tests, stage_tests

    snapshot = catalog_store().snapshot()
    if pipeline_id is not None and pipeline_id not in snapshot.pipelines:
        refuse(f"unknown pipeline {pipeline_id!r}; pipelines: {', '.join(sorted(snapshot.pipelines))}")
    problems = [
        f"stage_tests[{row.key()[0]}.{row.key()[1]}.{row.key()[2]}].{field}: {message}"
        for _, row, field, message in check_stage_tests(snapshot)
        if pipeline_id in (None, row.key()[0])
    ]
    if problems:
        refuse("\n".join(problems))
    results = run_unit_tests(snapshot, stage_tests(snapshot, pipeline_id), as_json)
    sys.exit(0 if all(r.passed for r in results) else EXIT_FAILED)
