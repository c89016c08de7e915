"""Dagster's private names stay in one adapter, checked against the Dagster versions it names."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version

from packaging.requirements import Requirement
from packaging.version import Version

from medallion_assets import dagster_compat
from tests.conftest import REPO

# A private Dagster module path: `dagster.` then an underscore (dagster_shared and dagster_aws are others)
PRIVATE_DAGSTER = re.compile(r"\bdagster\.(?=_)")
SEARCHED = ("medallion_assets", "tests", "bench")


def test_the_installed_dagster_is_one_the_adapter_was_checked_against():
    first, end = (Version(v) for v in dagster_compat.CHECKED_DAGSTER_VERSIONS)
    assert first <= Version(version("dagster")) < end, (
        f"dagster {version('dagster')} is outside {first} ≤ v < {end}, the range "
        "medallion_assets/dagster_compat.py was read against: check each name it imports, then move "
        "CHECKED_DAGSTER_VERSIONS and pyproject's pin"
    )


def test_pyproject_allows_exactly_the_checked_range():
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    [dagster] = [Requirement(d) for d in dependencies if Requirement(d).name == "dagster"]
    first, end = dagster_compat.CHECKED_DAGSTER_VERSIONS
    assert {(s.operator, s.version) for s in dagster.specifier} == {
        (">=", first.removesuffix(".0")),
        ("<", end.removesuffix(".0")),
    }


def test_every_private_name_still_resolves_and_says_why_it_is_used():
    resolved = {name: getattr(dagster_compat, name) for name in dagster_compat.__all__}
    assert all(value is not None for value in resolved.values())
    assert dagster_compat.IMPLICIT_ASSET_JOB_NAME == "__ASSET_JOB"  # the name runs are stored under
    assert set(dagster_compat.WHY) == set(dagster_compat.__all__)
    assert all(len(reason) > 40 for reason in dagster_compat.WHY.values())


def test_no_private_dagster_name_is_used_outside_the_adapter():
    adapter = REPO / "medallion_assets" / "dagster_compat.py"
    uses = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for folder in SEARCHED
        for path in sorted((REPO / folder).rglob("*.py"))
        if path != adapter
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE_DAGSTER.search(line)
    ]
    assert uses == [], "private Dagster names outside medallion_assets/dagster_compat.py:\n" + "\n".join(uses)


def test_the_private_use_check_finds_what_it_looks_for():
    private = ".".join(["dagster", "_core", "run_coordinator"])  # spelled apart, or the check above finds it
    assert PRIVATE_DAGSTER.search(f"from {private} import QueuedRunCoordinator")
    assert PRIVATE_DAGSTER.search(f'{{"module": "{private}"}}')
    assert not PRIVATE_DAGSTER.search("from dagster import QueuedRunCoordinator")
    assert not PRIVATE_DAGSTER.search("from dagster_shared.error import x; import dagster_aws")
