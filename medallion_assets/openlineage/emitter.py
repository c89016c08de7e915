"""The emitter: sends OpenLineage events from a background thread without slowing or breaking a run.

Where events go is the client's own configuration (`openlineage.yml`, `OPENLINEAGE_*`: http, file, console,
Amazon DataZone, DataHub, …), or, with none, one JSON file per event in `events_folder()`.
"""

from __future__ import annotations

import atexit
import enum
import logging
import os
import queue
import threading
import time
from pathlib import Path

from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import RunEvent
from openlineage.client.transport import get_default_factory
from openlineage.client.transport.file import FileConfig, FileTransport
from openlineage.client.transport.noop import NoopConfig, NoopTransport

from medallion_assets import config
from medallion_assets.redaction import scrub

log = logging.getLogger(__name__)
# `transport: {type: datahub, url: …}` sends lineage to DataHub; named, so that the SDK is imported only then.
get_default_factory().register_transport("datahub", "medallion_assets.openlineage.datahub.DataHubTransport")
get_default_factory().register_transport("http", "medallion_assets.openlineage.http_transport.HttpTransport")


def events_folder() -> Path:
    """Where events go when nothing is configured: next to the Dagster storage, or in the Medallion home."""
    return (config.dagster_home() or config.home()) / "openlineage"


class _Client(OpenLineageClient):
    """The client, reading the environment by name.

    The client's own `_collect_environment_variables` iterates `os.environ` on every emit. The emitter emits
    from its thread while the run's threads set and unset variables (Dagster's test instances, `config`'s
    DAGSTER_HOME default), and an iteration that meets a removal raises KeyError: the event was lost. Looking
    each wanted name up cannot meet a removal. (requests' own reading, for http, is in `http_transport`.)
    """

    def _collect_environment_variables(self) -> dict[str, str]:
        wanted = self.config.facets.environment_variables
        found = {name: value for name in wanted if (value := os.environ.get(name)) is not None}
        if missing := set(wanted) - set(found):
            log.warning(
                "OpenLineage: the environment variables %s, asked for as facets, are not set", sorted(missing)
            )
        return found


def configured_client() -> OpenLineageClient:
    """The client as `openlineage.yml` or `OPENLINEAGE_*` configure it (http, file, console, Amazon DataZone,
    …); with no configuration at all, a file transport writing one JSON file per event into
    `events_folder()`."""
    # A client given a transport reads the configuration without resolving (and warning about) a transport.
    settings = OpenLineageClient(transport=NoopTransport(NoopConfig())).config
    if (
        (settings.transport or {}).get("type")
        or os.environ.get("OPENLINEAGE_URL")
        or os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true"
    ):
        return _Client()
    folder = events_folder()
    folder.mkdir(parents=True, exist_ok=True)
    return _Client(transport=FileTransport(FileConfig(log_file_path=str(folder / "ol"), debug_mode=True)))


class _Stop(enum.Enum):
    """What tells the sending thread to stop: an enum member, so that a type checker tells it from events."""

    STOP = enum.auto()


_STOP = _Stop.STOP
# How often an idle sending thread looks whether it was closed while the queue was too full to say so.
_POLL_SEC = 0.5


class Emitter:
    """Sends events from a background thread through a bounded queue.

    `emit` never blocks and never raises: when the queue is full the event is dropped with a warning, and a
    transport error (an endpoint that hangs or answers 500) is logged by the thread, which moves on. `close`
    waits for the queue at most `timeout` seconds and drops what is left.
    """

    def __init__(self, max_queue: int = 1000):
        self.sent = self.failed = self.dropped = 0
        # CPU seconds the sending thread has used: what emission takes from a run, whatever the wall clock.
        self.busy_sec = 0.0
        self._counts_lock = threading.Lock()
        self._queue: queue.Queue[RunEvent | _Stop] = queue.Queue(maxsize=max_queue)
        self._deadline: float | None = None
        self._flush_sec = 0.0
        self._closed = False
        try:
            self._client = configured_client()
        except Exception as error:  # a broken configuration must not break the run that emits
            log.warning("OpenLineage disabled: its configuration could not be read: %s", scrub(str(error)))
            self._client = _Client(transport=NoopTransport(NoopConfig()))
        self._thread = threading.Thread(target=self._run, name="openlineage-emitter", daemon=True)
        self._thread.start()

    @property
    def transport(self) -> str | None:
        """The kind of transport events go through: http, file, console, amazon_datazone, …"""
        return self._client.transport.kind

    def emit(self, *events: RunEvent) -> None:
        """Queue events for sending, in order; returns at once."""
        for event in events:
            if self._closed:
                self._drop("the emitter is closed")
                continue
            try:
                self._queue.put_nowait(event)
            except queue.Full:
                self._drop(f"the queue of {self._queue.maxsize} events is full")

    def _count(self, counter: str) -> int:
        with self._counts_lock:
            count: int = getattr(self, counter) + 1
            setattr(self, counter, count)
            return count

    def _drop(self, why: str) -> None:
        dropped = self._count("dropped")
        if _worth_a_warning(dropped):
            log.warning("OpenLineage event dropped (%d so far): %s", dropped, why)

    def _run(self) -> None:
        while True:
            try:
                event = self._queue.get(timeout=_POLL_SEC)
            except queue.Empty:
                if self._closed:
                    return
                continue
            if event is _STOP:
                return
            if self._deadline is not None and time.monotonic() > self._deadline:
                self._drop("closing, and the flush time is over")
                continue
            started = time.thread_time()
            try:
                self._client.emit(event)
                self._count("sent")
            except Exception as error:  # the thread must survive anything a transport raises
                failed = self._count("failed")
                if _worth_a_warning(failed):
                    log.warning(
                        "OpenLineage event not delivered (%d failures so far): %s",
                        failed,
                        scrub(f"{type(error).__name__}: {error}"),
                    )
            self.busy_sec += time.thread_time() - started

    def close(self, timeout: float | None = None) -> bool:
        """Send what is queued within `timeout` seconds (default MEDALLION_OPENLINEAGE_FLUSH_SEC, 2 s) and
        stop. True when every queued event was handed to the transport in time; idempotent."""
        if not self._closed:
            self._flush_sec = config.openlineage_flush_sec() if timeout is None else timeout
            self._deadline = time.monotonic() + self._flush_sec
            self._closed = True
            try:
                self._queue.put_nowait(_STOP)
            except queue.Full:
                pass  # the thread drains the queue, dropping what is late, and notices the close when idle
        assert self._deadline is not None, "set by the first close"
        self._thread.join(max(0.0, self._deadline - time.monotonic()))
        if self._thread.is_alive():
            log.warning(
                "OpenLineage: flush gave up after %g s; undelivered events are dropped", self._flush_sec
            )
            return False
        return True


def _worth_a_warning(count: int) -> bool:
    # The first problem, then every hundredth: a dead endpoint must not flood the run's log.
    return count == 1 or count % 100 == 0


_emitter: Emitter | None = None
_emitter_pid: int | None = None
_emitter_lock = threading.Lock()


def emitter() -> Emitter:
    """This process's emitter, created on first use and flushed (within the flush time) at the exit."""
    with _emitter_lock:
        # A forked child inherits the object but not its thread: it needs an emitter of its own.
        if _emitter is None or _emitter_pid != os.getpid():
            return _replace_emitter()
        return _emitter


def reconfigure_emitter() -> Emitter:
    """Replace this process's emitter by one built from the OpenLineage configuration as it is now, after
    sending what the previous one holds (within the flush time): for a process whose configuration changes as
    it runs."""
    with _emitter_lock:
        if _emitter is not None and _emitter_pid == os.getpid():
            _emitter.close()
        return _replace_emitter()


def _replace_emitter() -> Emitter:
    global _emitter, _emitter_pid
    _emitter, _emitter_pid = Emitter(), os.getpid()
    atexit.register(_emitter.close)
    return _emitter
