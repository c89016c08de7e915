"""An error's chain of causes, walked in one place: healing rules match along it, and the instance check finds
the driver's error that dagster-postgres wraps."""

from __future__ import annotations

from collections.abc import Iterator


def causes(error: BaseException | None) -> Iterator[BaseException]:
    """The error, then what caused it, and so on down the chain."""
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__
