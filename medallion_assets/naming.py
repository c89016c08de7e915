"""Naming rules below Dagster: identifiers, dataset names and pools. How a dataset looks in Dagster (its
asset key, group, kinds and owners) is the translator's, `assets/translator.py`.

Catalog values become SQL identifiers, file paths and Dagster names, so they are checked here once,
against one pattern, and quoted wherever they reach SQL.
"""

from __future__ import annotations

import re
from typing import Protocol

# Matched with fullmatch: a `$` anchor would also accept a name with a trailing newline.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,126}")


# The Dagster run tag naming the pipeline a run belongs to: set by every launch, read by sensors and metrics.
PIPELINE_TAG = "medallion/pipeline"
# The tag of the runs of an environment's preview (`medallion plan DIR --env NAME`): its name, by which the
# UI's runs page filters them.
ENV_TAG = "medallion/env"

# The columns ingestion adds to every bronze row, where it came from and when, with their Spark types.
INGESTION_COLUMN_TYPES = {"_source_file": "string", "_source_line": "bigint", "_ingested_at": "timestamp"}
INGESTION_COLUMNS = tuple(INGESTION_COLUMN_TYPES)

# A merge stages its batch in the table `<name><STAGING_SUFFIX>`, next to its target.
STAGING_SUFFIX = "__medallion_stage"


class LayeredTarget(Protocol):
    """What naming reads of a catalog target (naming sits below the catalog, so it cannot import Target)."""

    @property
    def layer(self) -> str: ...

    @property
    def target_id(self) -> str: ...


class InvalidIdentifier(ValueError):
    """A catalog value meant as a name contains quotes, semicolons, spaces or other non-name characters."""


def check_identifier(value: str, what: str = "identifier") -> str:
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise InvalidIdentifier(
            f"{what} {value!r} is not a plain name "
            "(letters, digits and underscores, not starting with a digit)"
        )
    return value


def check_identifier_length(value: str, limit: int | None, warehouse: str) -> str:
    """A warehouse that silently truncates longer names (PostgreSQL at 63 bytes) would make two names one."""
    if limit is not None and len(value.encode()) > limit:
        raise InvalidIdentifier(
            f"name {value!r} is {len(value.encode())} bytes; {warehouse} keeps only {limit}, "
            f"so it would be cut to {value.encode()[:limit].decode(errors='ignore')!r}"
        )
    return value


# How many bytes of a name each warehouse keeps, by URL scheme: PostgreSQL cuts longer names, Redshift
# refuses them, DuckDB keeps any. The warehouse adapters hold the same figures (`max_identifier_bytes`, which
# a test compares); this copy lets `catalog validate` check names without loading a warehouse driver.
IDENTIFIER_BYTES: dict[str, int | None] = {"postgresql": 63, "redshift": 127, "duckdb": None}


def identifier_length_problems(names: list[str], warehouse_url: str | None) -> list[str]:
    """Why each of `names` is too long for the warehouse `warehouse_url` names; with no URL, for the
    strictest warehouse supported, since the catalog may be loaded into any."""
    if warehouse_url is None:
        limits = {scheme: limit for scheme, limit in IDENTIFIER_BYTES.items() if limit is not None}
        scheme = min(limits, key=limits.__getitem__)
        warehouse = f"{scheme} (the strictest warehouse supported; MEDALLION_WAREHOUSE_URL is unset)"
    else:
        scheme = warehouse = warehouse_url.partition("://")[0].partition("+")[0]
    problems = []
    for name in names:
        try:
            check_identifier_length(name, IDENTIFIER_BYTES.get(scheme), warehouse)
        except InvalidIdentifier as error:
            problems.append(str(error))
    return problems


def warehouse_name_problems(locations: dict[str, str]) -> dict[str, str]:
    """Warehouse tables (target id → schema.table) whose names cannot be used as they are; target id → why.

    Redshift folds names to lower case, so `Sales.Orders` and `sales.orders` are one table. A location ending
    in the staging suffix is the staging table of another name, which a crashed merge's clean-up drops. The
    staging table's own name must be a valid identifier too.
    """
    problems: dict[str, str] = {}
    seen: dict[str, str] = {}
    for target_id, location in sorted(locations.items()):
        folded = location.lower()
        if folded.endswith(STAGING_SUFFIX):
            problems[target_id] = (
                f"{location!r} ends with {STAGING_SUFFIX!r}, the name of a merge's staging table"
            )
        elif folded in seen:
            problems[target_id] = (
                f"{location!r} is the same table as target {seen[folded]}'s (names fold to lower case)"
            )
        elif not IDENTIFIER.fullmatch(location.rsplit(".", 1)[-1] + STAGING_SUFFIX):
            problems[target_id] = (
                f"{location!r} is too long: its staging table adds {len(STAGING_SUFFIX)} "
                f"characters and a name may have at most 127"
            )
        seen.setdefault(folded, target_id)
    return problems


def quote_identifier(value: str) -> str:
    """Double-quoted identifier, for PostgreSQL, Redshift and DuckDB."""
    return '"' + check_identifier(value) + '"'


def spark_identifier(value: str) -> str:
    """Back-quoted identifier, for Spark SQL and Spark schema strings."""
    return "`" + check_identifier(value) + "`"


def quote_qualified(qualified_name: str) -> str:
    """`schema.table` → `"schema"."table"`, each part checked."""
    return ".".join(quote_identifier(part) for part in split_qualified(qualified_name))


def split_qualified(qualified_name: str) -> list[str]:
    parts = qualified_name.split(".")
    if not 1 <= len(parts) <= 2:
        raise InvalidIdentifier(f"table name {qualified_name!r} must be 'table' or 'schema.table'")
    return [check_identifier(part, "table name part") for part in parts]


def dataset_name(target: LayeredTarget) -> str:
    """A target's dataset name: its id without a leading layer prefix, so keys read [silver, user_events]."""
    prefix = f"{target.layer}_"
    return target.target_id.removeprefix(prefix) if target.target_id != prefix else target.target_id


def pool_name(system_kind: str, system_id: str) -> str:
    """One Dagster concurrency pool per source or target system."""
    return f"{system_kind}_{system_id}"
