"""What every `medallion` sub-command shares: exit codes, the catalog store it opens, and how it refuses."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

from medallion_assets.redaction import echo

if TYPE_CHECKING:
    from medallion_assets.catalog.store import CatalogStore

EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_HALTED = 3
EXIT_UNAVAILABLE = 4
EXIT_CONFIGURATION = 5  # a configured service (catalog, lake catalog, warehouse, S3) cannot be reached


def catalog_store() -> CatalogStore:
    """The catalog at MEDALLION_CATALOG_URL, migrated to the newest schema."""
    from medallion_assets.catalog.store import open_catalog

    return open_catalog()


def refuse(message: str, code: int = EXIT_INVALID) -> NoReturn:
    """Say why on stderr and exit with `code`: the command was given something it cannot act on."""
    echo(message, err=True)
    sys.exit(code)
