"""The control plane: sensors that read catalog rows fresh on every tick and steer runs."""

from medallion_assets.sensors.control import build_control_sensor

__all__ = ["build_control_sensor"]
