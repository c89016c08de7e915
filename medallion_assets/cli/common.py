"""What every `medallion` sub-command shares: exit codes, the catalog store it opens, and how it refuses."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from medallion_assets.redaction import echo

if TYPE_CHECKING:
    from medallion_assets.catalog.loader import LoadedRows
    from medallion_assets.catalog.models import Row, StageTest
    from medallion_assets.catalog.snapshot import CatalogSnapshot
    from medallion_assets.catalog.store import CatalogStore
    from medallion_assets.change.unit_tests import TestResult

EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_HALTED = 3
EXIT_UNAVAILABLE = 4
# A configured service (catalog, lake catalog, warehouse, S3) cannot be reached, or a setting cannot be used.
EXIT_CONFIGURATION = 5


def catalog_store() -> CatalogStore:
    """The catalog at MEDALLION_CATALOG_URL, migrated to the newest schema."""
    from medallion_assets.catalog.store import open_catalog

    return open_catalog()


def refuse(message: str, code: int = EXIT_INVALID) -> NoReturn:
    """Say why on stderr and exit with `code`: the command was given something it cannot act on."""
    echo(message, err=True)
    sys.exit(code)


def validated(snapshot: CatalogSnapshot, paths: Iterable[str | Path]) -> LoadedRows:
    """The files' rows, checked against `snapshot`; on any problem, validate's messages and exit 2."""
    from medallion_assets.catalog.loader import CatalogInvalid, CatalogNote
    from medallion_assets.catalog.models import DeprecatedName
    from medallion_assets.loading import validate_files

    try:
        with warnings.catch_warnings(record=True, action="always", category=DeprecatedName) as caught:
            warnings.simplefilter("always", CatalogNote)
            loaded = validate_files(snapshot, list(paths))
    except (CatalogInvalid, FileNotFoundError) as error:
        echo(str(error), err=True)
        sys.exit(EXIT_INVALID)
    for (
        warning
    ) in caught:  # a deprecated spelling is the user's to fix, so said plainly; others as Python would
        if issubclass(warning.category, DeprecatedName):
            echo(f"warning: {warning.message}", err=True)
        elif issubclass(warning.category, CatalogNote):
            echo(f"note: {warning.message}", err=True)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    return loaded


def check_change_arguments(directory: Path, env: str | None) -> None:
    """Refuse, before anything is read, an environment name that is not one or a catalog folder that is not
    there: what `plan` and `apply` both take."""
    from medallion_assets.change.environment import EnvironmentNameRefused, env_name

    try:
        if env is not None:
            env_name(env)
    except EnvironmentNameRefused as error:
        refuse(str(error))
    if not directory.is_dir():
        refuse(f"no such catalog folder: {directory}")


def unit_test_results(snapshot: CatalogSnapshot, tests: Sequence[StageTest]) -> list[TestResult]:
    """Run `tests` of `snapshot` in the process's Spark session; with no tests, start no Spark."""
    from medallion_assets.change.unit_tests import run_tests
    from medallion_assets.engine.spark import spark_session

    return run_tests(spark_session(app_name="medallion-test"), snapshot, tests) if tests else []


def run_unit_tests(
    snapshot: CatalogSnapshot, tests: Sequence[StageTest], as_json: bool = False
) -> list[TestResult]:
    """Run `tests` of `snapshot` and print each outcome with its differences, as text or JSON: `medallion
    test` and `plan --test`. With no tests it says so and starts no Spark."""
    results = unit_test_results(snapshot, tests)
    if as_json:
        echo(json.dumps({"tests": [r.as_dict() for r in results]}, indent=2))
        return results
    for result in results:
        for line in result.lines():
            echo(line)
    failed = sum(not r.passed for r in results)
    summary = f"{len(results)} test(s): {len(results) - failed} passed, {failed} failed"
    echo(summary if results else "no tests")
    return results


def load_catalog_files(store: CatalogStore, paths: Iterable[str | Path], allow_breaking: bool = False) -> str:
    """Validate, check the warehouse contracts, and upsert; give new pipelines, stages and sources their kill
    switch rows; refresh recovery paths."""
    from medallion_assets.change.plan import plan_files
    from medallion_assets.control.steering.flags import add_missing_flags
    from medallion_assets.recovery.paths import refresh_recovery_paths

    waived: list[str] = []
    targets: set[str] = set()

    def checked(snapshot: CatalogSnapshot) -> dict[str, list[Row]]:
        loaded = validated(snapshot, paths)
        made = plan_files(snapshot, loaded, None)
        refused = made.refused(allow_breaking)
        if refused:
            refuse("\n".join(f"refused: {problem}" for problem in refused))
        waived.extend(str(problem) for problem in made.contract)
        targets.update(row.key()[0] for row in loaded.rows["targets"])
        return loaded.rows

    written = store.upsert_checked(checked)
    if allow_breaking:
        allow_breaking_changes(store, waived, targets)
    flags = add_missing_flags(store)
    changed = refresh_recovery_paths(store, store.snapshot())
    return (
        "loaded: "
        + (", ".join(f"{table} {count}" for table, count in written.items()) or "nothing")
        + f"; {len(flags)} kill switch row(s) added (one per new pipeline, stage and source, enabled: "
        "`medallion disable` halts it)" + f"; recovery paths refreshed for {len(changed)} dataset(s)"
    )


def allow_breaking_changes(store: CatalogStore, waived: list[str], targets: set[str]) -> None:
    """Release the stages of `targets` the control sensor held for a contract break made by SQL, and record
    those breaks and the ones this load let through (`waived`), so the sensor does not hold them."""
    from medallion_assets.change.plan import HELD, WAIVED_EVENT
    from medallion_assets.control.steering.flags import read_control_state, set_flag

    made_by = {f"{s.pipeline_id}.{s.stage_name}": s.target_id for s in store.snapshot().stages()}
    for flag in read_control_state(store).flags:
        held = flag.entity_type == "stage" and not flag.flag_value and flag.reason.startswith(HELD)
        if held and made_by.get(flag.entity_id) in targets:
            waived.append(flag.reason.removeprefix(HELD))
            set_flag(
                store, "stage", flag.entity_id, True, "the breaking change was loaded with --allow-breaking"
            )
    if waived:
        store.record_audit(event=WAIVED_EVENT, status="allowed", details={"problems": waived})
