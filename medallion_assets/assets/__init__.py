from medallion_assets.assets.factory import build_assets
from medallion_assets.assets.translator import MedallionTranslator

__all__ = ["MedallionTranslator", "build_assets"]
