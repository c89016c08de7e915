"""The failures that cross layers: raised low (storage, engine) and handled high (control, assets, sensors).

Healing rules name these classes (`healing_actions.error_code`), the control plane matches and retries them,
and the asset layer reports them; keeping them in this leaf module lets every layer name them without
importing the layer that raises them. (The warehouse's own faults live with its adapters in
`storage/warehouse`.)
"""

from __future__ import annotations

from collections.abc import Iterator


class SourceNotFound(Exception):
    """A bucket, prefix, folder or object that should hold data does not exist (or holds nothing)."""


class CorruptSourceObject(Exception):
    """A raw object that cannot be read at all (not UTF-8 text, not a parquet file): no record of it is
    usable."""

    def __init__(self, source_id: str, url: str, reason: str):
        super().__init__(f"source {source_id}: object {url} is unreadable: {reason}")
        self.source_id, self.url, self.reason = source_id, url, reason


class SourceSchemaDrift(Exception):
    """The raw files carry fields the catalog does not declare; additive, so the catalog can follow."""

    def __init__(self, source_id: str, url: str, new_columns: dict[str, str]):
        listed = ", ".join(f"{name} ({type_name})" for name, type_name in new_columns.items())
        super().__init__(f"source {source_id}: {url} has fields not in the catalog: {listed}")
        self.source_id, self.url, self.new_columns = source_id, url, new_columns


class BreakingSourceSchemaChange(Exception):
    """Declared fields are gone from, or changed in, the raw files: the catalog cannot follow by itself."""


class SqlNotAnalyzable(Exception):
    """Spark refused a stage's SQL (or the casts to its declared columns) at analysis: a column or function
    that does not resolve. The message is Spark's first line; its plan and stack trace stay on the cause, for
    the run's log."""


class StageHalted(Exception):
    """A kill switch was flipped while the stage ran; it stopped before committing its load."""


class LakeCommitConflict(Exception):
    """Another run committed to the same lake table first; this run's version was not published. Retrying
    builds on the other's."""


class LakeSchemaDrift(Exception):
    """A lake table no longer has a column the catalog declares: someone changed it outside Medallion."""


def causes(error: BaseException | None) -> Iterator[BaseException]:
    """The error, then what caused it, and so on down the chain: healing rules match along it, and the
    instance check finds the driver's error that dagster-postgres wraps."""
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


class ServiceUnreachable(Exception):
    """A configured service (the catalog, a lake catalog, the warehouse, S3) that cannot be reached, or that
    refuses the connection: the setting to fix, its value, and the server's own reason, in one line. Whoever
    prints it masks the value's password (`redaction.scrub`)."""

    def __init__(self, setting: str, value: str, reason: str, hint: str = ""):
        self.setting, self.value, self.reason, self.hint = setting, value, reason, hint
        super().__init__(f"{setting}={value}: {reason}" + (f" ({hint})" if hint else ""))
