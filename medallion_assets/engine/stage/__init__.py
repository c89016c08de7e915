"""Running one stage: the runner, its plan, one strategy per mode, write-audit-publish and the warehouse load."""
