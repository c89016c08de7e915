"""The test tiers hold: a unit test that starts a process or reaches off this machine fails, naming itself."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.tiers import refuse_in_unit_test


def test_this_test_is_placed_in_the_unit_tier(request):
    assert request.node.get_closest_marker("unit") and not request.node.get_closest_marker("integration")


def test_a_unit_test_that_starts_a_process_fails_naming_itself():
    test = "tests/test_tiers.py::test_a_unit_test_that_starts_a_process_fails_naming_itself"
    with pytest.raises(RuntimeError, match=rf"^unit test {test} started a process \(true\): "):
        subprocess.run(["true"], check=True)


def test_a_unit_test_that_connects_off_this_machine_fails_before_it_connects():
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): nothing answers there; the guard refuses before the attempt.
    with pytest.raises(RuntimeError, match=r" connected to 192\.0\.2\.1: "):
        socket.create_connection(("192.0.2.1", 9), timeout=5)


def test_a_unit_test_that_asks_for_a_real_part_fails_naming_it():
    # What the fixtures of real parts call first. Not through `getfixturevalue("pg_url")`: pytest would keep
    # the session fixture's failure for every later test.
    with pytest.raises(RuntimeError, match=r" uses the fixture pg_url: "):
        refuse_in_unit_test("pg_url")
