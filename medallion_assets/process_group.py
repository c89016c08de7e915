"""Running a server command so that stopping it stops everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

import psutil

GRACE_SECONDS = 20


def run_process_group(command: list[str], env: dict[str, str]) -> int:
    """Run `command` in a process group of its own and return its exit code. Ctrl-C or SIGTERM stops the whole
    group (dagster dev's webserver, daemon, code server and run workers, not only dagster dev): SIGTERM, then
    SIGKILL for whatever is left after a grace period. Members still alive when the command ends are stopped
    too."""
    process = subprocess.Popen(command, env=env, start_new_session=True)

    def interrupt(signum: int, frame: FrameType | None) -> NoReturn:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        return process.wait()
    except KeyboardInterrupt:
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop_group(process.pid)
        process.wait()


def _stop_group(group: int) -> None:
    """SIGTERM every member, then SIGKILL once the grace period is over, until none is left: a member may
    start another while it stops (dagster dev restarts a code server that exits), so the group is read again
    each time."""
    deadline = time.monotonic() + GRACE_SECONDS
    while members := _members(group):
        for member in members:
            _quietly(member.terminate if time.monotonic() < deadline else member.kill)
        psutil.wait_procs(members, timeout=1)


def _members(group: int) -> list[psutil.Process]:
    """The group's live processes (zombies are already stopped; they wait to be reaped)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def _quietly(action: Callable[[], object]) -> None:
    try:
        action()
    except psutil.NoSuchProcess:
        pass
