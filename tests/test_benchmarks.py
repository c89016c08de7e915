"""The benchmarks run, and what they check besides time holds, at small sizes: the CDC benchmark's history
equal to the hand-written MERGE's after every batch, and the incremental benchmark's gold equal to a full
refresh. No figure is asserted on: they are timings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # each benchmark starts Spark (and one an S3 server) in a process

ROOT = Path(__file__).resolve().parents[1]


def _bench(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False
    )
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def test_the_cdc_benchmark_keeps_a_history_equal_to_the_hand_written_merges():
    printed = _bench("bench/cdc.py", "--keys", "20000", "--batches", "2")
    assert "equal: 20,000 rows" in printed
    # Each batch changes 1% of the keys: 98% of them update a tracked column (a new version), 2% delete.
    assert re.search(r"^\s+1\s+200\s.*\s20,196 rows, 19,996 current$", printed, re.MULTILINE), printed
    assert re.search(r"^\s+2\s+200\s.*\s20,392 rows, 19,992 current$", printed, re.MULTILINE), printed


def test_the_incremental_benchmark_runs_incrementally_with_gold_equal_to_a_full_refresh(tmp_path):
    curve = tmp_path / "curve.png"
    printed = _bench("bench/incremental.py", "--quick", "--curve", str(curve))
    # Over a silver table of a few thousand rows gold is recomputed whole, which costs less than by groups
    # (docs/incremental.md, "Which way costs less").
    incremental = "{'silver/user_events': 'incremental', 'gold/daily_user_events': 'full'}"
    assert [line.split(":")[0] for line in printed.splitlines() if line.endswith(incremental)] == [
        "day   2",
        "day   3",
        "day   4",
    ]
    assert printed.count("full refresh:") == 2  # days 2 and 4, each asserted equal inside the benchmark
    assert re.search(r"^empty batch: .*appended after snapshot \d+: none\);", printed, re.MULTILINE), printed
    assert curve.read_bytes().startswith(b"\x89PNG")
