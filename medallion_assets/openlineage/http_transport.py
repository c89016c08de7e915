"""OpenLineage's http transport, with requests' reading of the environment made safe against other threads.

requests reads the proxy variables on every request by iterating `os.environ`. The emitter sends from its own
thread while the run's threads set and unset variables (Dagster's test instances unset DAGSTER_HOME on exit,
`config` sets its default), and an iteration that meets a removal raises KeyError before anything is sent:
the event was lost.
"""

from __future__ import annotations

from typing import Any

from openlineage.client.transport import http
from requests import Session

# Reading the environment changes nothing and takes microseconds, so a reading that met a change is taken
# again; the bound only stops a KeyError that is not a race from looping forever.
_ENVIRONMENT_READINGS = 10_000


class _EnvironmentSafeSession(Session):
    def merge_environment_settings(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        for _ in range(_ENVIRONMENT_READINGS - 1):
            try:
                return super().merge_environment_settings(*args, **kwargs)
            except KeyError:  # its only lookups that raise are the environment's
                continue
        return super().merge_environment_settings(*args, **kwargs)  # the last reading raises what it meets


class HttpTransport(http.HttpTransport):
    """Registered as `http`, so that every configuration reaching it (`openlineage.yml`, OPENLINEAGE_URL,
    OPENLINEAGE__ variables, a composite's member) sends through `_EnvironmentSafeSession`."""

    def __init__(self, config: http.HttpConfig) -> None:
        super().__init__(config)
        if config.session is None:
            self.session = _EnvironmentSafeSession()
