"""The one way Medallion builds a path it writes to: a trusted root plus parts that must stay under it.

The root comes from configuration (a local folder, ``file://`` or ``s3://bucket/prefix``). The parts come
from catalog ids, object keys and Medallion's own names, and are hostile: a part that could climb out of
the root, or be read differently by another layer (a URL decoder, Windows, a C library), is refused.
"""

from __future__ import annotations

import os
import posixpath
from urllib.parse import unquote

_UNSAFE_CHARACTERS = {"\\": "a backslash", "\x00": "a NUL byte"}


class UnsafePath(ValueError):
    """A path part that would leave its root, or could be read as something else than a plain name."""


def path_under(root: str, *parts: str) -> str:
    """``root/part/part…``; each part may hold ``/``-separated segments, none of which may leave ``root``."""
    segments = [segment for part in parts for segment in _segments(root, part)]
    joined = "/".join([root.rstrip("/"), *segments])
    if not _within(root, joined):
        raise UnsafePath(f"{joined!r} is not under {root!r}")
    return joined


def _segments(root: str, part: str) -> list[str]:
    if not isinstance(part, str) or not part:
        raise UnsafePath(f"path part {part!r} under {root!r} is empty")
    if part.startswith("/"):
        raise UnsafePath(f"path part {part!r} under {root!r} is absolute")
    segments = part.split("/")
    for segment in segments:
        # Each decoding a later layer might apply is checked too: %2e%2e is '..' to a URL decoder.
        for reading in _readings(segment):
            problem = _segment_problem(reading)
            if problem:
                raise UnsafePath(f"path part {part!r} under {root!r} holds {problem}")
    return segments


def _readings(segment: str) -> list[str]:
    readings = [segment]
    while (decoded := unquote(readings[-1])) != readings[-1]:
        readings.append(decoded)
    return readings


def _segment_problem(segment: str) -> str | None:
    if segment in ("", ".", ".."):
        return f"the segment {segment!r}" if segment else "an empty segment ('//')"
    if "/" in segment:
        return "an encoded '/'"
    for character, name in _UNSAFE_CHARACTERS.items():
        if character in segment:
            return name
    if any(ord(character) < 32 or ord(character) == 127 for character in segment):
        return "a control character"
    return None


def _within(root: str, joined: str) -> bool:
    """Belt and braces: the normalized result still starts with the normalized root."""
    if "://" in root and not root.startswith("file://"):
        base = posixpath.normpath("/" + root.split("://", 1)[1])
        full = posixpath.normpath("/" + joined.split("://", 1)[1])
    else:
        base = os.path.abspath(root.removeprefix("file://"))
        full = os.path.abspath(joined.removeprefix("file://"))
    return full == base or full.startswith(base.rstrip("/") + "/")
