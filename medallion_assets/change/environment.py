"""An environment: a named preview of a catalog change (`medallion plan DIR --env NAME`). Its lake tables are
Iceberg branches `env_<NAME>` of the tables the change rebuilds, its warehouse tables live in a schema
`<schema>__<NAME>`; main and the warehouse's own schemas are never written. No Spark here: the CLI checks a
name before it starts anything."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.versions import stage_fingerprint

# The audit_log event of a preview: its details name the environment and the definition (fingerprint) of each
# dataset it built, which `apply` checks the files it loads against.
PREVIEW_EVENT = "env_preview"

# Letters, digits and underscores, starting with a letter, at most 63 characters (PostgreSQL's and Redshift's
# identifier length): a name that is safe in a branch, a schema and a shell alike.
_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")


class EnvironmentNameRefused(ValueError):
    """An environment name that is not a plain identifier; the message is one line that names it."""


def env_name(name: str) -> str:
    """`name` when it can name an environment, else EnvironmentNameRefused."""
    if _NAME.fullmatch(name) is None:
        shown = name if len(name) <= 70 else name[:70] + "…"
        raise EnvironmentNameRefused(
            f"environment name {shown!r} refused: use 1 to 63 lowercase letters, digits and underscores, "
            "starting with a letter"
        )
    return name


def env_branch(name: str) -> str:
    """The Iceberg branch of environment `name` in every lake table it rebuilds."""
    return f"env_{env_name(name)}"


def env_location(location: str, name: str) -> str:
    """Where environment `name` puts the warehouse table `location`: `s.t` goes to `s__name.t`."""
    schema, table = location.split(".", 1)
    return f"{schema}__{env_name(name)}.{table}"


def definitions(snapshot: CatalogSnapshot, datasets: Iterable[str]) -> dict[str, str]:
    """Each dataset's definition (the fingerprint a run records) in `snapshot`."""
    made = {d: snapshot.stage_producing(d) for d in datasets}
    return {d: stage_fingerprint(s, snapshot.targets[d], snapshot) for d, s in made.items() if s is not None}


def changed_since_preview(previews: list[dict[str, Any]], name: str, snapshot: CatalogSnapshot) -> list[str]:
    """The datasets whose definition in `snapshot` is not the one environment `name` was last previewed with
    (`previews`: audit rows of PREVIEW_EVENT, oldest first); every one of them when it never was."""
    mine = [p["details"]["definitions"] for p in previews if p["details"]["environment"] == name]
    if not mine:
        return ["(no preview of this environment is recorded)"]
    return sorted(d for d, made in mine[-1].items() if definitions(snapshot, [d]).get(d) != made)
