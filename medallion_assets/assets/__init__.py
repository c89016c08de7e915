from medallion_assets.assets.factory import build_assets

__all__ = ["build_assets"]
