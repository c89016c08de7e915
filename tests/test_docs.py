"""The documents a newcomer reads: every link between them resolves, the README's catalog example is a valid
catalog drawn from the seed, and the README and BENCHMARKS stay short enough to be read."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from medallion_assets.catalog.store import CatalogStore
from medallion_assets.loading import validate_files
from tests.conftest import REPO, SEED

DOCUMENTS = sorted(
    [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "BENCHMARKS.md", REPO / "SECURITY.md"]
    + list((REPO / "docs").glob("*.md"))
    + [REPO / "bench" / "HISTORY.md"]
)
FENCED = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(document: Path) -> str:
    """The document without its code blocks and inline code, where brackets are code, not links."""
    return re.sub(r"`[^`\n]*`", "", FENCED.sub("", document.read_text()))


def anchors(document: Path) -> set[str]:
    """GitHub's anchors of the document's headings: lower case, punctuation dropped, spaces as hyphens, a
    repeated heading numbered."""
    found: set[str] = set()
    repeats: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", FENCED.sub("", document.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(f"{slug}-{repeats[slug]}" if slug in repeats else slug)
        repeats[slug] = repeats.get(slug, 0) + 1
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_link_between_the_documents_resolves(document):
    broken = []
    for target in LINK.findall(prose(document)):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: outside the repository
            continue
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved.relative_to(REPO)}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    assert broken == []


def test_the_reference_has_a_page_per_subject():
    pages = {path.name for path in (REPO / "docs").glob("*.md")}
    subjects = {"lake.md", "incremental.md", "operations.md", "lineage.md", "deploying.md", "security.md"}
    assert subjects <= pages
    readme = (REPO / "README.md").read_text()
    assert all(f"(docs/{page})" in readme for page in subjects)
    # ARCHITECTURE.md is on the README's first screen.
    assert "(ARCHITECTURE.md)" in "\n".join(readme.splitlines()[:15])


def test_readme_and_benchmarks_stay_short():
    assert len((REPO / "README.md").read_bytes()) <= 20_000
    benchmarks = (REPO / "BENCHMARKS.md").read_text()
    assert len(benchmarks.encode()) < 15_000
    tables = re.findall(r"^\|(.*)\|\n\|[-| ]+\|$", benchmarks, re.M)
    assert [[column.strip() for column in header.split("|")] for header in tables] == [
        ["benchmark", "goal", "current figure", "date", "command"]
    ]


def within(example: Any, seed: Any) -> bool:
    """Whether every field the example gives has the seed's value (a list of rows: each row within one of
    the seed's)."""
    if isinstance(example, dict):
        return isinstance(seed, dict) and all(
            key in seed and within(value, seed[key]) for key, value in example.items()
        )
    if isinstance(example, list) and all(isinstance(row, dict) for row in example):
        return isinstance(seed, list) and all(any(within(row, other) for other in seed) for row in example)
    return bool(example == seed)


def test_the_readme_catalog_example_is_a_valid_catalog_drawn_from_the_seed(tmp_path):
    example = re.search(r"^```yaml\n(.*?)^```", (REPO / "README.md").read_text(), re.S | re.M)
    assert example is not None
    (tmp_path / "example.yaml").write_text(example.group(1))
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    loaded = validate_files(store.snapshot(), [tmp_path / "example.yaml"])
    assert {table: len(rows) for table, rows in loaded.rows.items() if rows} == {
        "pipelines": 1,
        "sources": 1,
        "targets": 3,
        "validation_rules": 1,
        "stages": 3,
    }
    rows = yaml.safe_load(example.group(1))
    seed = yaml.safe_load((SEED / "user_events_etl.yaml").read_text())
    assert [table for table in rows if not within(rows[table], seed.get(table))] == []
