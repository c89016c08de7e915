"""The unit tier's guard (tests/conftest.py installs it): a module of its own, so that the conftest pytest
loads and the tests that import from it share one guard.
"""

from __future__ import annotations

import ipaddress

# Audit events of starting a program (`multiprocessing`'s spawn raises none: such tests are marked by hand).
PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn", "os.system", "os.fork"}
)


class UnitTestGuard:
    """An audit hook that refuses, while a unit test runs, what only an integration test may do."""

    def __init__(self) -> None:
        self.running: str | None = None  # the node id of the unit test being set up or run

    def __call__(self, event: str, args: tuple) -> None:
        if self.running is None:
            return
        if event in PROCESS_EVENTS:
            self.refuse(f"started a process ({args[0] if args else event})")
        elif event == "socket.connect" and isinstance(args[1], tuple) and not _is_loopback(args[1][0]):
            self.refuse(f"connected to {args[1][0]}")

    def refuse(self, what: str) -> None:
        test, self.running = self.running, None  # the failure's own report must not trip the guard
        raise RuntimeError(
            f"unit test {test} {what}: a test that needs processes, servers or the network "
            "is an integration test (mark it, or its module, `pytest.mark.integration`)"
        )


def refuse_in_unit_test(part: str) -> None:
    """Called first by every fixture of conftest.REAL_PARTS: one a unit test reaches (through
    `getfixturevalue`, which the tiers cannot see at collection) fails it, naming the part."""
    if UNIT_TEST_GUARD.running is not None:
        UNIT_TEST_GUARD.refuse(f"uses the fixture {part}")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


UNIT_TEST_GUARD = UnitTestGuard()
