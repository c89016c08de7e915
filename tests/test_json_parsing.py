"""JSON lines parsed in the reading task by Arrow's JSON reader come out exactly as Spark's from_json makes
them.

Bronze parses a JSON line in the executor's Python worker when Arrow's reader accepts it, and leaves the line
to Spark otherwise (engine/raw_reader.py). These tests hold the two to the same result, line by line, on
hostile lines and on thousands of random mutations of valid ones: same values, same lines quarantined.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as F

from medallion_assets.engine import raw_reader
from medallion_assets.engine.ingest import CORRUPT, spark_schema
from tests.test_engine import run_ingest, source

# Every type bronze lets Arrow parse (ingest.ARROW_PARSED_TYPES).
COLUMNS = {"s": "string", "i": "bigint", "n": "int", "l": "long", "d": "double", "b": "boolean"}
DECLARED = pa.schema(
    [("s", pa.string()), ("i", pa.int64()), ("n", pa.int32()), ("l", pa.int64()), ("d", pa.float64())]
    + [("b", pa.bool_())]
)
VALID = (
    '{"s": "a\\"b\\\\c\\/d", "i": 12, "n": -3, "l": null, "d": 1.5e3, "b": true}',
    '{"s": "\\u00e9\\ud83d\\ude00\\u0000", "d": -0.0, "b": false, "i": -9223372036854775808}',
    '{"n": 2147483647, "d": 12345678901234567890123, "s": "é ü"}',
    '{"d": 0.1000000000000000055511151231257827, "l": 9223372036854775807}',
    '{"x": {"y": [1, {"z": null}]}, "s": "nested fields are not declared"}',
    "{}",
    '  {"s": "padded"}\t\r',
)
HOSTILE = (
    # Values of another type than declared.
    '{"s": 123}',
    '{"s": 1.50}',
    '{"s": true}',
    '{"s": {"x": 1}}',
    '{"s": [1]}',
    '{"s": null}',
    '{"i": 1.0}',
    '{"i": 1e3}',
    '{"i": 1E2}',
    '{"i": 9223372036854775808}',
    '{"i": -0}',
    '{"i": "1"}',
    '{"n": 3000000000}',
    '{"n": 2147483648}',
    '{"n": -2147483648}',
    '{"d": 1}',
    '{"d": "1.5"}',
    '{"d": 1e400}',
    '{"d": -1e400}',
    '{"d": 1.7976931348623157e309}',
    '{"d": 1e-400}',
    '{"d": 4.9e-324}',
    '{"d": NaN}',
    '{"d": Infinity}',
    '{"d": -Infinity}',
    '{"d": "NaN"}',
    '{"b": "true"}',
    '{"b": 1}',
    '{"b": null}',
    # Not strict JSON.
    '{"i": 007}',
    '{"i": +1}',
    '{"d": .5}',
    '{"d": 5.}',
    '{"s": "a",}',
    "{'s': 'a'}",
    "{s: 1}",
    '{"s": "a\tb"}',
    '{"s": "\\q"}',
    '{"s": "\\ud800"}',
    '{"s": "\\u12"}',
    '{"a": 1} /* comment */',
    '{"a": 1} // comment}',
    '\ufeff{"s": "bom"}',
    '{"s": "\ufeff"}',
    # Keys twice, in other case, escaped.
    '{"s": "a", "s": "b"}',
    '{"i": 1, "i": null}',
    '{"x": {"y": 1}, "x": 2}',
    '{"S": "upper"}',
    '{"\\u0073": "escaped key"}',
    # More or less than one value on the line.
    '{"s": "a"} {"s": "b"}',
    '{"s": "a"}{"s": "b"}',
    '{"s": "a"} null {}',
    '{"s": "a"} 5 {}',
    '{"s": "a"}x',
    '{"s": "a"} }',
    '{"s": "a"}}',
    '{"s": {"t": "a"}',
    '{"s": "a"',
    '{"s": "x}',
    '"}',
    '{"s": "a"}\x00{"s": "b"}',
    '{"s": "a"}\x00',
    '{"s": "a\x00"}',
    # Not objects at all.
    "null",
    "123",
    '"s"',
    "[1]",
    "[{}]",
    "true",
    "{",
    "}",
    "{}}",
    "{{}}",
)
# A line that leaves an object open, then lines that would close it: each must stay a line of its own.
SPANNING = ('{"s": "open", "t": {}', '}, "u": 1}', '{"s": "next"}', '{"s": "a"} {"s": "open",', '"t": 1}')
_MUTATIONS = ("{", "}", "[", "]", '"', ":", ",", "\\", " ", "\t", "\r", "\x00", "\ufeff", "null", "NaN")
_MUTATIONS += ("1e999", "-", ".", "0", "\\u", "ä", "/*", "} {", '"s"', '"i":', "1.0", "true")


def mutated(rng: random.Random, count: int) -> list[str]:
    """Valid lines with one to three random insertions, deletions or replacements of JSON's own characters."""
    lines = []
    for _ in range(count):
        line = rng.choice(VALID)
        for _ in range(rng.randint(1, 3)):
            at, mutation = rng.randrange(len(line) + 1), rng.random()
            if mutation < 0.4:
                line = line[:at] + rng.choice(_MUTATIONS) + line[at:]
            elif mutation < 0.7:
                line = line[:at] + line[at + rng.randint(1, 4) :]
            else:
                line = line[:at] + rng.choice(_MUTATIONS) + line[at + 1 :]
        lines.append(line)
    return lines


def comparable(value: object) -> object:
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def ingested_by_line(spark, tmp_path, lines: list[str]) -> dict[int, object]:
    """What bronze made of each line: its declared values, or ("quarantined", raw line)."""
    (tmp_path / "raw").mkdir()
    # Declared fields only at the head, where drift is looked for; the corpus after it.
    (tmp_path / "raw" / "e.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result, bronze, quarantine = run_ingest(spark, tmp_path, source(tmp_path, "jsonl", COLUMNS))
    outcome: dict[int, object] = {
        row["_source_line"]: tuple(comparable(row[name]) for name in COLUMNS) for row in bronze
    }
    outcome |= {row["_source_line"]: ("quarantined", row["raw"]) for row in quarantine}
    assert result.rows_read == len(outcome) == result.rows_written + result.rows_quarantined
    return outcome


def parsed_by_spark_alone(spark, lines: list[str]) -> dict[int, object]:
    schema = spark_schema(COLUMNS) + f", {CORRUPT} string"
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    frame = spark.createDataFrame(list(enumerate(lines, 1)), "number long, line string")
    parsed = frame.select("number", "line", F.from_json("line", schema, options).alias("r")).collect()
    return {
        row.number: ("quarantined", row.line)
        if row.r is None or row.r[CORRUPT] is not None
        else tuple(comparable(row.r[name]) for name in COLUMNS)
        for row in parsed
    }


def parsed_here(lines: list[str]) -> int:
    """How many of the lines the reading task parses itself (the rest it leaves to Spark)."""
    batch = pa.RecordBatch.from_arrays(
        [pa.array(np.zeros(len(lines), np.int32)), pa.array(np.arange(1, len(lines) + 1))]
        + [pa.array(lines, pa.string()), pa.nulls(len(lines), pa.string())],
        names=[raw_reader.OBJECT_INDEX, "_source_line", raw_reader.RAW_LINE, raw_reader.UNREADABLE],
    )
    return raw_reader._records(batch, DECLARED, parse_json=True)[raw_reader.RAW_LINE].null_count


def head_and(corpus: list[str]) -> list[str]:
    head = [f'{{"s": "head {i}", "i": {i}}}' for i in range(raw_reader.DRIFT_SAMPLE_LINES)]
    return head + [line for line in corpus if line.strip(" \t\r")]


def test_hostile_lines_come_out_of_arrow_as_out_of_spark(spark, tmp_path):
    # Each hostile line among valid ones, so that it is not merely left to Spark with bad neighbours.
    corpus = [line for hostile in [*HOSTILE, "\n".join(SPANNING)] for line in (*VALID * 3, hostile)]
    lines = head_and("\n".join(corpus).split("\n"))
    ingested = ingested_by_line(spark, tmp_path, lines)
    reference = parsed_by_spark_alone(spark, lines)
    assert [(n, ingested[n], reference[n]) for n in reference if ingested[n] != reference[n]] == []
    # The comparison is not idle: the valid lines were parsed in the task.
    assert parsed_here(lines) >= 0.5 * len(lines)


def test_random_mutations_of_valid_lines_come_out_of_arrow_as_out_of_spark(spark, tmp_path):
    rng = random.Random(20261124)
    corpus = [rng.choice(VALID) if rng.random() < 0.9 else line for line in mutated(rng, 6000)]
    lines = head_and(corpus)
    ingested = ingested_by_line(spark, tmp_path, lines)
    reference = parsed_by_spark_alone(spark, lines)
    assert [(n, ingested[n], reference[n]) for n in reference if ingested[n] != reference[n]] == []
    assert parsed_here(lines) >= 0.5 * len(lines)
