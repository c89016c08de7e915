"""The `medallion` command. `main` holds the top-level group and its own commands; each sub-command group
(`lineage`, `onboard`, `healing`, `profile`, `throttle`, `status`/`metrics`/`notify`, `instance`) has its
module here, and `common` what they share. Heavy modules are imported inside the commands, so
`medallion --help` and `medallion catalog validate` stay quick and load no engine."""

from medallion_assets.cli.main import main

__all__ = ["main"]
