"""Bad configuration in one line, never a traceback: a catalog, lake catalog, warehouse or S3 endpoint that
cannot be reached or refuses the connection is said as the setting to fix, its value with the password
masked, and the server's own reason. `--debug` (or MEDALLION_DEBUG=1) shows the traceback instead."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from medallion_assets import config
from medallion_assets.config import SettingInvalid
from medallion_assets.errors import ServiceUnreachable

S3_ENDPOINT_ENV = "AWS_ENDPOINT_URL_S3"
DEBUG_ENV = "MEDALLION_DEBUG"


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error and those it was raised from or during, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


# SQLAlchemy ends its errors with a link to its own documentation, which says nothing of this server.
_BACKGROUND = re.compile(r"\s*\(Background on this error at: [^)]*\)")


def _one_line(error: BaseException) -> str:
    return " ".join(_BACKGROUND.sub("", str(error)).split())


def unreachable_service(error: BaseException) -> str | None:
    """The one line a failure to reach a configured service, or a setting it cannot use, is said in; None for
    any other failure. Modules are looked up by name, so that a command which never loaded boto3 or psycopg2
    does not load them here."""
    for cause in _chain(error):
        kind = f"{type(cause).__module__}.{type(cause).__name__}"
        if isinstance(cause, ServiceUnreachable | SettingInvalid):
            return str(cause)
        if kind == "medallion_assets.storage.lake.catalogs.LakeCatalogError":
            return _one_line(cause)
        if kind == "botocore.exceptions.EndpointConnectionError":
            endpoint = os.environ.get(S3_ENDPOINT_ENV)
            setting = f"{S3_ENDPOINT_ENV}={endpoint}" if endpoint else "the AWS endpoint"
            return f"{setting}: {_one_line(cause)}"
        if kind in ("botocore.exceptions.NoCredentialsError", "botocore.exceptions.PartialCredentialsError"):
            return (
                f"AWS credentials: {_one_line(cause)} (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                "AWS_PROFILE)"
            )
        if kind == "psycopg2.OperationalError":
            # The catalog's and the lake catalog's connections go through SQLAlchemy and are named where they
            # are opened; a bare psycopg2 connection is the warehouse's.
            return f"{config.WAREHOUSE_ENV}={config.warehouse_url()}: {_one_line(cause)}"
    return None


def debugging(flag: bool) -> bool:
    """Whether tracebacks are shown: --debug, or MEDALLION_DEBUG set to anything but empty or 0."""
    return flag or os.environ.get(DEBUG_ENV, "") not in ("", "0")
