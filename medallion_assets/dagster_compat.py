"""Every private Dagster name Medallion uses, imported here and nowhere else, so a Dagster upgrade that moves one
breaks this module alone.

DefinitionsLoadContext: where a code location's loader leaves reconstruction metadata for Dagster to keep with
its load data, and where a run worker finds it again (Dagster 1.13's public `Definitions.with_reconstruction_
metadata` only sets the Definitions' metadata, which does not reach the load data).
ReconstructableRepository: how a run worker rebuilds a code location's definitions with that metadata (the
benchmark of a run worker's start does the same).
"""

from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext, DefinitionsLoadType
from dagster._core.definitions.reconstruct import ReconstructableRepository

__all__ = ["DefinitionsLoadContext", "DefinitionsLoadType", "ReconstructableRepository"]
