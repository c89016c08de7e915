"""The Dagster instance Medallion's runs go to: its configuration, and opening it with a clear error.

The shipped `dagster.yaml` holds what every instance needs (the queued run coordinator, run limits, pools, run
monitoring); `deploy/postgres.yaml` adds only Dagster's storage on PostgreSQL (dagster-postgres, with the
event log of medallion_assets.pool_storage). A
deployment's instance is the two merged (`medallion instance init --postgres`), so they never drift apart.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from dagster import DagsterInstance, QueuedRunCoordinator

from medallion_assets.config import DAEMON_HEARTBEAT_INTERVAL_SECONDS, daemon_silence_seconds
from medallion_assets.dagster_compat import queue_daemon_running
from medallion_assets.errors import causes

REPO = Path(__file__).resolve().parents[1]
SHIPPED_CONFIG = REPO / "dagster.yaml"
POSTGRES_STORAGE = REPO / "deploy" / "postgres.yaml"
HEADER = "# Written by `medallion instance init` from dagster.yaml{}: change those and write it again.\n"


class DeploymentError(Exception):
    """The Dagster deployment cannot take a run; the message says what to fix."""


class InstanceUnavailable(DeploymentError):
    """The instance under DAGSTER_HOME cannot be opened (its storage does not answer)."""


class DaemonGone(DeploymentError):
    """The dagster-daemon stopped sending heartbeats while a run it was to start or watch was followed."""


class QueuedRunCanceled(DaemonGone):
    """The dagster-daemon fell silent before it started the queued run, which was canceled: nothing of it ran,
    so it may be run elsewhere."""


def instance_config(postgres: bool = False) -> dict[str, Any]:
    """The shipped dagster.yaml, with PostgreSQL storage when `postgres`; the overlay's top-level blocks
    (the run, event log and schedule storages) are added whole, its event log replacing the shipped SQLite
    one."""
    config: dict[str, Any] = yaml.safe_load(SHIPPED_CONFIG.read_text())
    if postgres:
        config.update(yaml.safe_load(POSTGRES_STORAGE.read_text()))
    return config


def write_instance_config(dagster_home: Path, config: dict[str, Any], postgres: bool) -> Path:
    path = Path(dagster_home) / "dagster.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        HEADER.format(" and deploy/postgres.yaml" if postgres else "")
        + yaml.safe_dump(config, sort_keys=False)
    )
    return path


def open_instance() -> DagsterInstance:
    """The instance under DAGSTER_HOME, so runs show in the UI; a throwaway one when it is unset.

    Raises InstanceUnavailable naming the instance's config file when its storage does not answer: a
    traceback from deep inside SQLAlchemy would not say which file to look at."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return DagsterInstance.ephemeral()
    try:
        return DagsterInstance.get()
    except Exception as error:
        refused = _connection_error(error)
        if refused is None:
            raise
        # The driver's own first line (host, port, refused or timed out), never the URL, which may hold a
        # password.
        reason = str(refused).strip().splitlines()[0]
        raise InstanceUnavailable(
            f"the Dagster instance configured in {Path(home) / 'dagster.yaml'} cannot reach "
            f"its storage: {reason}"
        ) from None


def _connection_error(error: BaseException | None) -> BaseException | None:
    """The database driver's error behind a failed connection that caused `error` (dagster-postgres wraps it
    after retrying), or None."""
    import sqlalchemy.exc

    refused = (cause for cause in causes(error) if isinstance(cause, sqlalchemy.exc.OperationalError))
    return next((cause.orig for cause in refused), None)


def has_daemon(instance: DagsterInstance) -> bool:
    """Whether runs go through the run queue, which only dagster-daemon empties."""
    return isinstance(instance.run_coordinator, QueuedRunCoordinator)


def daemon_running(instance: DagsterInstance) -> bool:
    """Whether the daemon's queue loop has sent a heartbeat in the last daemon_silence_seconds()."""
    return queue_daemon_running(instance, daemon_silence_seconds() - DAEMON_HEARTBEAT_INTERVAL_SECONDS)


def forget_daemon(instance: DagsterInstance, since: float) -> None:
    """Clear the heartbeats a dagster-daemon wrote since `since` (seconds since the epoch), once it has
    stopped: the next `medallion run` then goes in process at once, instead of being queued for a daemon
    whose last heartbeat looks alive for up to daemon_silence_seconds() more. Heartbeats older than `since`
    (not that daemon's) are kept."""
    heartbeats = instance.get_daemon_heartbeats()
    if not any(heartbeat.timestamp >= since for heartbeat in heartbeats.values()):
        return
    # Dagster clears heartbeats all at once only: the others are written back.
    instance.wipe_daemon_heartbeats()
    for heartbeat in heartbeats.values():
        if heartbeat.timestamp < since:
            instance.add_daemon_heartbeat(heartbeat)


def config_file() -> Path | None:
    """The config file of the instance under DAGSTER_HOME, for messages; None for a throwaway instance."""
    home = os.environ.get("DAGSTER_HOME")
    return Path(home) / "dagster.yaml" if home else None
