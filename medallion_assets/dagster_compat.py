"""Every Dagster name Medallion uses that Dagster does not export publicly, in one place.

Dagster keeps its internals under `dagster._…` and changes them between minor versions. Medallion uses a
handful of them where no public API does the job; each is imported here and nowhere else, with the reason
next to it, so a Dagster upgrade means reading one file and running `tests/test_dagster_compat.py`, which
names the Dagster versions this module was checked against and fails when a name stops resolving. Everything
else, in the package and in the tests, imports from `dagster` itself (a unit test refuses `dagster._`
anywhere but here).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from dagster import DagsterInstance, DagsterRun
from dagster._core.definitions.assets.job.asset_job import IMPLICIT_ASSET_JOB_NAME
from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext, DefinitionsLoadType
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster._utils.schedules import cron_string_iterator, get_latest_completed_cron_tick

# Where dagster._utils.error takes it from, which does not re-export it.
from dagster_shared.error import SerializableErrorInfo

if TYPE_CHECKING:
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from dagster._core.remote_origin import (
        InProcessCodeLocationOrigin,
        RegisteredCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster._core.storage.event_log import SqliteEventLogStorage
    from dagster._core.storage.event_log.schema import ConcurrencySlotsTable
    from dagster._core.test_utils import freeze_time
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
    from dagster._daemon.freshness import FreshnessDaemon
    from dagster._utils.concurrency import ConcurrencySlotStatus

# Names imported on first use: those only tests and benchmarks use (dagster._core.test_utils alone costs a
# second of import time that a sensor tick or `medallion catalog validate` should not pay), and the event
# log's, which only the instance's storage needs.
_ON_FIRST_USE = {
    "ConcurrencySlotsTable": "dagster._core.storage.event_log.schema",
    "ConcurrencySlotStatus": "dagster._utils.concurrency",
    "SqliteEventLogStorage": "dagster._core.storage.event_log",
    "InProcessCodeLocationOrigin": "dagster._core.remote_origin",
    "RegisteredCodeLocationOrigin": "dagster._core.remote_origin",
    "RemoteJobOrigin": "dagster._core.remote_origin",
    "RemoteRepositoryOrigin": "dagster._core.remote_origin",
    "RepositorySnap": "dagster._core.remote_representation.external_data",
    "ReconstructableRepository": "dagster._core.definitions.reconstruct",
    "freeze_time": "dagster._core.test_utils",
    "LoadableTargetOrigin": "dagster._core.types.loadable_target_origin",
    "InProcessWorkspaceLoadTarget": "dagster._core.workspace.load_target",
    "FreshnessDaemon": "dagster._daemon.freshness",
}


def __getattr__(name: str) -> object:
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)


# The Dagster releases this module was read against, [first, end): tests/test_dagster_compat.py holds the
# installed Dagster, and pyproject's pin, to the same range.
CHECKED_DAGSTER_VERSIONS = ("1.13.0", "1.14.0")

__all__ = [
    "CHECKED_DAGSTER_VERSIONS",
    "ConcurrencySlotStatus",
    "ConcurrencySlotsTable",
    "DefinitionsLoadContext",
    "DefinitionsLoadType",
    "IMPLICIT_ASSET_JOB_NAME",
    "FreshnessDaemon",
    "ReconstructableRepository",
    "InProcessCodeLocationOrigin",
    "InProcessWorkspaceLoadTarget",
    "JobSubsetSelector",
    "LoadableTargetOrigin",
    "RegisteredCodeLocationOrigin",
    "RemoteJobOrigin",
    "RemoteRepositoryOrigin",
    "RepositorySnap",
    "SerializableErrorInfo",
    "SqliteEventLogStorage",
    "WorkspaceFileTarget",
    "WorkspaceProcessContext",
    "cron_string_iterator",
    "freeze_time",
    "get_latest_completed_cron_tick",
    "queue_daemon_running",
    "runs_to_dequeue",
]

# Why each name is used although Dagster does not export it (a constant or a class cannot carry a docstring of
# ours). The compatibility test checks every name in `__all__` has its reason, so none arrives without one.
WHY: dict[str, str] = {
    "IMPLICIT_ASSET_JOB_NAME": (
        "The job the launcher and healing sensors request their runs in, and the queued CLI run is created "
        "in: Dagster's implicit global asset job, which every code location with assets has anyway. A sensor"
        " given `target=AssetSelection.all()` builds a job of its own over every asset instead, doubling the"
        " load time of a large catalog's code location (10,000 datasets: resolve + snapshot 20 s → 10 s). "
        "The public `Definitions.resolve_implicit_global_asset_job_def().name` needs the Definitions, which "
        "the sensors are part of."
    ),
    "get_latest_completed_cron_tick": (
        "The launcher decides a scheduled pipeline is due with Dagster's own cron semantics (time zones, "
        "DST), so it agrees with Dagster schedules; Dagster exports no cron evaluation."
    ),
    "cron_string_iterator": (
        "The scheduling simulator replays cron arrivals with the same semantics as the launcher above."
    ),
    "SerializableErrorInfo": (
        "The type of a failed step's error as Dagster records it (`step_failure_data.error`), which the "
        "healing sensor matches against healing rules; Dagster exports the event, not its error's type."
    ),
    "JobSubsetSelector": (
        "`medallion run` against a deployed instance submits its run to the run queue from a workspace, as "
        "the webserver does; no public API creates a queued run for an asset selection of a code location, "
        "except GraphQL through a running webserver."
    ),
    "WorkspaceProcessContext": "The workspace that run is created and submitted in (see JobSubsetSelector).",
    "WorkspaceFileTarget": "Loads that workspace from workspace.yaml (see JobSubsetSelector).",
    "InProcessWorkspaceLoadTarget": (
        "Tests: a workspace of this process's code location, for Dagster's freshness daemon to evaluate."
    ),
    "InProcessCodeLocationOrigin": "Tests: the origin of that in-process code location.",
    "LoadableTargetOrigin": "Tests: the module that code location loads from.",
    "FreshnessDaemon": (
        "Tests: one iteration of Dagster's own freshness daemon, to judge SLAs as the UI shows them; Dagster"
        " has no public call that evaluates a freshness policy."
    ),
    "freeze_time": (
        "Tests: materializations reported as of a time in the past, for the freshness daemon to judge; "
        "`report_runless_asset_event` takes no timestamp."
    ),
    "RegisteredCodeLocationOrigin": (
        "Tests and benchmarks: queued runs created with `create_run_for_job` must name the code location the"
        " daemon would launch them from, as runs created by the UI do; the origin types are not exported."
    ),
    "RemoteRepositoryOrigin": "Tests and benchmarks: part of that origin (see RegisteredCodeLocationOrigin).",
    "RemoteJobOrigin": "Tests and benchmarks: part of that origin (see RegisteredCodeLocationOrigin).",
    "RepositorySnap": (
        "Tests and benchmarks: the repository snapshot the webserver fetches, serialized, to measure and pin"
        " what the UI receives; no public API builds it."
    ),
    "DefinitionsLoadContext": (
        "Where a code location's loader leaves reconstruction metadata (the catalog snapshot) for Dagster to "
        "keep with its load data, and where a run worker finds it again instead of reading the catalog; the "
        "public `Definitions.with_reconstruction_metadata` only sets the Definitions' metadata, which does "
        "not reach the load data in Dagster 1.13."
    ),
    "DefinitionsLoadType": "Tells a run worker's load (RECONSTRUCTION) from the code server's (see above).",
    "ReconstructableRepository": (
        "Tests and benchmarks: rebuild a code location's definitions with that metadata, as a run worker "
        "does."
    ),
    "queue_daemon_running": (
        "Whether the daemon's queue loop sends heartbeats. The public `DagsterInstance.get_daemon_statuses` "
        "counts a heartbeat that carries an error as unhealthy, while a queue loop that logged an error "
        "keeps dequeuing, and it tolerates 30 minutes of silence; only the private function takes "
        "`ignore_errors` and a tolerance."
    ),
    "runs_to_dequeue": (
        "Tests: the runs Dagster's queued run coordinator would launch now, in its order (priority, pools, "
        "tag limits), without launching them; the coordinator's ordering is not public."
    ),
    "ConcurrencySlotsTable": (
        "The table of a pool's slots, which medallion_assets.pool_storage claims one of in a single "
        "conditional UPDATE: Dagster's own claim (`_claim_concurrency_slot`, overridden there) lets two "
        "steps take the same slot."
    ),
    "ConcurrencySlotStatus": "What that claim returns to Dagster's step executor (see above).",
    "SqliteEventLogStorage": (
        "The event log of an instance on Dagster's default SQLite storage, which pool_storage extends with "
        "that claim (see ConcurrencySlotsTable); dagster-postgres exports its own, SQLite's is not exported."
    ),
    "CHECKED_DAGSTER_VERSIONS": "Not a Dagster name: the versions this module was read against.",
}


def queue_daemon_running(instance: DagsterInstance, tolerance_seconds: float) -> bool:
    """Whether the daemon's queue loop has sent a heartbeat within its heartbeat interval plus
    `tolerance_seconds` (its errors aside: see WHY)."""
    from dagster._daemon.controller import get_daemon_statuses  # the daemon package costs 0.4 s to import
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    queue = QueuedRunCoordinatorDaemon.daemon_type()
    statuses = get_daemon_statuses(
        instance, [queue], ignore_errors=True, heartbeat_tolerance_seconds=tolerance_seconds
    )
    return bool(statuses[queue].healthy)


def runs_to_dequeue(instance: DagsterInstance) -> list[DagsterRun]:
    """The queued runs Dagster's queued run coordinator would launch now, in its order."""
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
    return list(daemon._get_runs_to_dequeue(instance, instance.get_concurrency_config(), None))
