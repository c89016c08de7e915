"""bench/end_to_end.py timed in CPU seconds of this process tree instead of wall seconds.

On a shared machine another job's load stretches wall time by a factor that changes from one minute to the
next; the CPU the driver JVM, the Python workers and Dagster spend on the work stretches far less. This runs
end_to_end.py unchanged (same data, sides, repeats, checks and report) with one clock swapped: the
`time.perf_counter` that the benchmark and the stage runner call (the runner's durations are the audit's,
which the per-stage breakdown reads) returns `cpu_seconds()` of bench/bronze_pieces.py instead. Every figure
it prints is then CPU seconds: ratios compare the work done, not the time two cores took to do it.

    python bench/end_to_end_cpu.py --rows 2000000 --repeats 3
"""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import medallion_assets.engine.stage.runner as stage_runner  # noqa: E402
from bench import end_to_end  # noqa: E402
from bench.bronze_pieces import cpu_seconds  # noqa: E402

if __name__ == "__main__":
    cpu_clock = types.SimpleNamespace(**vars(time))
    cpu_clock.perf_counter = cpu_seconds
    end_to_end.time = cpu_clock
    stage_runner.time = cpu_clock
    print("clock: CPU seconds of this process tree (every 's' below)")
    end_to_end.main()
