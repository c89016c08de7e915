"""One Dagster code location per catalog domain, so a large catalog loads in parts, each alone.

A workspace entry loading attribute `<domain>` of this module gets that domain's pipelines only
(`build_definitions(domain=...)`); `medallion workspace` writes one entry per domain the catalog holds. A
location that fails to load (a broken catalog row of its domain) fails alone: the others, and the UI, keep
working, and its error names the row.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from dagster import Definitions, definitions

from medallion_assets.definitions import build_definitions

# Past this many datasets in a domain, its run workers take more than about 3 s to start (each rebuilds the
# whole domain before its first step; measured in BENCHMARKS.md, "Code locations per domain").
LARGE_DOMAIN_DATASETS = 1000


def location_name(domain: str) -> str:
    return f"medallion_{domain}"


def __getattr__(domain: str) -> Callable[..., Definitions]:
    """The Definitions of one domain, loaded by Dagster when its code location loads (PEP 562 module
    attribute)."""
    if domain.startswith("__"):  # Python's own look-ups (__path__, __wrapped__ ...) are no domains
        raise AttributeError(domain)

    @definitions
    def domain_definitions() -> Definitions:
        return build_definitions(domain=domain)

    return domain_definitions


def write_workspace(path: Path, domains: list[str]) -> Path:
    entries = [
        {
            "python_module": {
                "module_name": __name__,
                "attribute": domain,
                "location_name": location_name(domain),
            }
        }
        for domain in sorted(domains)
    ]
    path.write_text(
        "# Written by `medallion workspace`: one code location per catalog domain.\n"
        + yaml.safe_dump({"load_from": entries}, sort_keys=False)
    )
    return path
