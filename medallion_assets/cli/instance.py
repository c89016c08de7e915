"""`medallion instance`: write and check the Dagster instance configuration under DAGSTER_HOME."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from medallion_assets.cli.common import EXIT_UNAVAILABLE


@click.group()
def instance() -> None:
    """The Dagster instance under DAGSTER_HOME: its dagster.yaml, and whether its storage answers."""


def _home() -> Path:
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        click.echo("DAGSTER_HOME is not set: it names the folder of the Dagster instance", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    return Path(home)


@instance.command("init")
@click.option(
    "--postgres",
    is_flag=True,
    help="Dagster's storage on PostgreSQL (deploy/postgres.yaml; connection from DAGSTER_PG_* variables)",
)
def instance_init(postgres: bool) -> None:
    """Write $DAGSTER_HOME/dagster.yaml: the shipped dagster.yaml, with PostgreSQL storage if asked."""
    from medallion_assets.instance import instance_config, write_instance_config

    click.echo(f"wrote {write_instance_config(_home(), instance_config(postgres), postgres)}")


@instance.command("check")
def instance_check() -> None:
    """Open the instance under DAGSTER_HOME: its storage answers, and whether runs go through the queue."""
    from medallion_assets.instance import InstanceUnavailable, has_daemon, open_instance

    _home()
    try:
        dagster_instance = open_instance()
    except InstanceUnavailable as error:
        click.echo(str(error), err=True)
        sys.exit(EXIT_UNAVAILABLE)
    with dagster_instance:
        storage = type(dagster_instance.run_storage).__name__
        click.echo(
            f"instance ok: run storage {storage}; runs "
            + ("queued for dagster-daemon" if has_daemon(dagster_instance) else "launched directly")
        )
