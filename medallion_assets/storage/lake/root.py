"""The lake at one configured root, resolved once where the setting enters (the Definitions' resources, a
command, a runner) and passed down, rather than a path string each function resolves again.

Pure Python (no Spark, no pyiceberg), as `layout` is: a plan and lineage name the lake's tables through it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from medallion_assets import config
from medallion_assets.catalog.models import Target
from medallion_assets.naming import check_identifier
from medallion_assets.paths import path_under
from medallion_assets.storage.lake.catalogs import (
    LakeCatalog,
    LakeCatalogError,
    catalog_setting,
    configured_catalogs,
)
from medallion_assets.storage.lake.layout import table_of


@dataclass(frozen=True)
class Lake:
    """The lake's root (a local folder made absolute, `file://…` or `s3://bucket/prefix`) and its catalogs."""

    root: str

    @classmethod
    def resolve(cls, root: str | os.PathLike[str] | None = None) -> Lake:
        """The lake at `root`, by default the configured one (MEDALLION_LAKE_URL)."""
        configured = config.lake_url() if root is None else os.fspath(root)
        # A local folder is made absolute: Spark and pyiceberg resolve it from other working folders.
        return cls(configured if "://" in configured else os.path.abspath(configured))

    @cached_property
    def catalogs(self) -> dict[str, LakeCatalog]:
        """Every catalog the environment configures, name → catalog; read when first needed, so that a lake
        whose tables are only named (a plan, lineage) needs no catalog setting."""
        return configured_catalogs(self.root)

    def catalog(self, name: str) -> LakeCatalog:
        """The catalog a table's `lake_table.catalog` names; one line naming the setting when unknown."""
        if name not in self.catalogs:
            raise LakeCatalogError(
                f"lake catalog {name!r} is not configured: set {catalog_setting(name)} "
                f"(configured: {', '.join(sorted(self.catalogs))})"
            )
        return self.catalogs[name]

    @property
    def is_local(self) -> bool:
        """Whether the root is a folder named by its path (no URL scheme)."""
        return "://" not in self.root

    def path(self, *parts: str) -> str:
        """`<root>/<part>/…`, each part kept under the root."""
        return path_under(self.root, *parts)

    def table_location(self, target: Target) -> str:
        """Where the target's table files go when its catalog places them under the lake root, as the JDBC
        catalog does: `<lake>/<namespace>/<name>`. Lineage names a lake dataset by it."""
        table = table_of(target)
        return self.path(table.namespace, table.name)

    def quarantine_path(self, dataset: str) -> str:
        """The folder where a dataset's unreadable source objects are kept, as they were, under the root."""
        return self.path("_quarantine", check_identifier(dataset, "dataset"))
