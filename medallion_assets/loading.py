"""Checking catalog rows before they are written: the catalog's own checks and those of the layers that give
rows their meaning, in one list (`CHECKS`).

The catalog (`catalog/loader.py`) knows rows, references, cycles and SQL. Whether a healing rule names a
registered action with parameters it accepts, a throttle or notification channel can apply, or lineage rows
hold together is known to control/ and recovery/, which sit above the catalog; this module, above them all,
hands their checks to the loader. `medallion catalog validate|load` and onboarding check through it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, cast

from medallion_assets.catalog import loader
from medallion_assets.catalog.days import check_gold_days
from medallion_assets.catalog.loader import CatalogProblem, LoadedRows
from medallion_assets.catalog.models import HealingAction, Row
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.stage_tests import check_stage_tests
from medallion_assets.control.healing.rules import rule_problems
from medallion_assets.control.monitoring.notifications import check_notifications
from medallion_assets.control.steering.maintenance import check_maintenance
from medallion_assets.control.steering.throttles import check_throttles
from medallion_assets.recovery.graph import check_lineage
from medallion_assets.storage.lake.layout import check_layouts


def check_healing_rules(snapshot: CatalogSnapshot) -> Iterator[tuple[str, Row, str, str]]:
    """Rules naming an action that is not registered, or parameters their action refuses."""
    for row in snapshot.tables["healing_actions"].values():
        # The snapshot holds each table's rows under the table's name: this table's rows are HealingActions.
        rule = cast(HealingAction, row)
        for message in rule_problems(rule):
            yield "healing_actions", rule, "action" if message.startswith("unknown") else "params", message


CHECKS: tuple[loader.RowCheck, ...] = (
    check_lineage,
    check_healing_rules,
    check_throttles,
    check_notifications,
    check_layouts,
    check_maintenance,
    check_gold_days,
    check_stage_tests,
)


def validate_files(stored: CatalogSnapshot, paths: list[str | Path]) -> LoadedRows:
    """Parse and check YAML files against the stored catalog; raises CatalogInvalid listing every problem."""
    return loader.validate_files(stored, paths, CHECKS)


def check_references(
    snapshot: CatalogSnapshot,
    origins: Mapping[tuple[str, tuple[Any, ...]], tuple[str, int | None]],
    broken: AbstractSet[str] = frozenset(),
) -> list[CatalogProblem]:
    """Every problem of the rows in `snapshot`, located through `origins`
    (`catalog.loader.check_references`)."""
    return loader.check_references(snapshot, origins, CHECKS, broken)
