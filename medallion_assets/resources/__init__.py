"""Dagster resources: thin, configurable handles that return the plain clients the engine uses."""

from medallion_assets.resources.core import CatalogResource, LakeResource, SparkResource, WarehouseResource

__all__ = ["CatalogResource", "LakeResource", "SparkResource", "WarehouseResource"]
