"""What Medallion may show of a text: no credentials, no terminal control characters.

`scrub` is the one redaction function: the CLI, the audit log, OpenLineage events and Dagster metadata pass
text through it before it leaves the process. `printable` makes hostile text (a dataset name from an event, an
object key) safe to print: control characters are shown escaped, never sent to the terminal.
"""

from __future__ import annotations

import re

import click

from medallion_assets import config

_URL_CREDENTIALS = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]+):[^\s@/]+@", re.IGNORECASE)
_SQL_CREDENTIALS = re.compile(
    r"\b(IAM_ROLE|CREDENTIALS|ACCESS_KEY_ID|SECRET_ACCESS_KEY|SESSION_TOKEN|PASSWORD)(\s+)'[^']*'",
    re.IGNORECASE,
)
_SECRET_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|API_?KEY|CREDENTIAL", re.IGNORECASE)
# Shorter values (a "1", a "true") would mask ordinary words all over the text.
_MIN_SECRET_LENGTH = 6
# C0 and C1 controls and DEL, except the line breaks and tabs output is laid out with.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def scrub(text: str) -> str:
    """`text` without credentials: URL passwords, secret environment values and COPY/IAM credentials
    masked."""
    text = _SQL_CREDENTIALS.sub(r"\1\2'***'", _URL_CREDENTIALS.sub(r"\1:***@", text))
    for name, value in config.environment().items():
        if len(value) >= _MIN_SECRET_LENGTH and _SECRET_NAME.search(name):
            text = text.replace(value, "***")
    return text


def printable(text: str) -> str:
    """`text` with every control character (an ANSI escape's ESC among them) written as `\\xNN`."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def echo(message: object = "", err: bool = False, nl: bool = True) -> None:
    """What every CLI command prints goes through here: credentials masked, control characters escaped."""
    click.echo(printable(scrub(str(message))), err=err, nl=nl)
