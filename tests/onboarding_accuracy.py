"""Scoring SQL onboarding against the hand-written corpora in tests/onboarding_corpus/: the project's own SQL,
whose 00_schema.sql declares every table; no_ddl/, Redshift SQL as repositories keep it, without DDL; and
docs/, the shapes of the PostgreSQL and Redshift documentation (COPY of every format, MERGE variants, INSERT …
VALUES with subqueries, views with column lists, SELECT INTO over set operations, CTEs before INSERT).

The expectations (expected.yaml) were written from the SQL, independently of the parser; this module only
compares them with what `medallion onboard --json` reports, as table-level and column-level precision and
recall, and lists every difference. Used by tests/test_onboarding.py and bench/onboarding.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

CORPUS = Path(__file__).with_name("onboarding_corpus")
NO_DDL_CORPUS = CORPUS / "no_ddl"
DOCS_CORPUS = CORPUS / "docs"
ALL_CORPORA = (CORPUS, NO_DDL_CORPUS, DOCS_CORPUS)


@dataclass
class Counts:
    """Edges found both ways, found by the parser, and expected."""

    matched: int = 0
    predicted: int = 0
    expected: int = 0

    @property
    def precision(self) -> float:
        return self.matched / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.matched / self.expected if self.expected else 1.0

    def add(self, predicted: set, expected: set) -> None:
        """Count one statement's edges."""
        self.matched += len(predicted & expected)
        self.predicted += len(predicted)
        self.expected += len(expected)


@dataclass
class Scores:
    """Counts at table and column level, and each difference between the report and the expectations."""

    statements: int = 0
    lineage_statements: int = 0
    table: Counts = field(default_factory=Counts)
    column: Counts = field(default_factory=Counts)
    column_any_kind: Counts = field(default_factory=Counts)
    """Column edges compared without their kind: right source column, whatever the transformation."""
    kinds_expected: Counter = field(default_factory=Counter)
    differences: list[str] = field(default_factory=list)


def corpus_files(corpus: Path = CORPUS) -> list[Path]:
    """The corpus's SQL files in the order they are onboarded: by name (a schema file first)."""
    return sorted(corpus.glob("*.sql"))


def _without_kinds(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(column, source.partition(" ")[2]) for column, source in edges}


def _column_edges(columns: list[dict]) -> set[tuple[str, str]]:
    return {
        (entry["target"], f"{kind} {source}")
        for entry in columns
        for source, kind in entry["transformations"].items()
    }


def score(statements: list[dict], corpus: Path = CORPUS) -> Scores:
    """Compare reported statements (the `statements` of `--json`) with a corpus's expectations, one by one."""
    expected = {
        (file, entry["line"]): entry
        for file, entries in yaml.safe_load((corpus / "expected.yaml").read_text()).items()
        for entry in entries
    }
    reported = {(Path(s["file"]).name, s["line"]): s for s in statements}
    scores = Scores(statements=len(expected))
    for place in sorted(set(reported) - set(expected)):
        scores.differences.append(f"{place[0]}:{place[1]}: reported, but no statement is expected there")
    for place, want in expected.items():
        where = f"{place[0]}:{place[1]}"
        got = reported.get(place)
        if got is None:
            scores.differences.append(f"{where}: expected a {want['kind']} statement, none reported")
            continue
        for name, default in (("kind", None), ("status", "onboarded"), ("target", None)):
            if got[name] != want.get(name, default):
                scores.differences.append(
                    f"{where}: {name} {got[name]!r}, expected {want.get(name, default)!r}"
                )
        if "sources" not in want:
            continue
        scores.lineage_statements += 1
        target = want["target"]
        table_got = {(got["target"], source) for source in got["sources"]}
        table_want = {(target, source) for source in want["sources"]}
        scores.table.add(table_got, table_want)
        column_got = _column_edges(got["columns"])
        column_want = {(column, source) for column, sources in want["columns"].items() for source in sources}
        scores.column.add(column_got, column_want)
        scores.column_any_kind.add(_without_kinds(column_got), _without_kinds(column_want))
        scores.kinds_expected.update(source.partition(" ")[0] for _, source in column_want)
        names_got = [entry["target"] for entry in got["columns"] if entry["target"] != "*"]
        names_want = [column for column in want["columns"] if column != "*"]
        if names_got != names_want:
            scores.differences.append(f"{where}: target columns {names_got}, expected {names_want}")
        for label, extra, missing in (
            ("tables", table_got - table_want, table_want - table_got),
            ("columns", column_got - column_want, column_want - column_got),
        ):
            if extra or missing:
                scores.differences.append(
                    f"{where}: {label}: unexpected {sorted(extra)}, missing {sorted(missing)}"
                )
    return scores
