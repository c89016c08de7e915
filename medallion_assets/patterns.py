"""Regular expressions from the catalog, in linear time: RE2 (google-re2) compiles and runs them.

A pattern is hostile input: with a backtracking engine, `(a+)+$` against a long line takes exponential time.
RE2 matches in time linear in the text, and refuses the constructs only backtracking can run (backreferences,
lookarounds), so such a pattern is refused at `catalog load` rather than found out at run time.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Protocol

import re2

# Longer patterns are not rules or error signatures but programs; RE2's own memory budget bounds the rest.
MAX_PATTERN_LENGTH = 1_000


class CompiledPattern(Protocol):
    """What callers use of an RE2 pattern (re2 ships no type information)."""

    def search(self, text: str) -> Any: ...


class InvalidPattern(ValueError):
    """A pattern that RE2 cannot compile: a syntax error, or a construct that needs backtracking."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the reason is raised, not written to stderr by the C++ library
    return options


@lru_cache(maxsize=1_024)
def compiled(pattern: str) -> CompiledPattern:
    """The compiled pattern (its `search` runs in linear time), or InvalidPattern saying why not."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise InvalidPattern(f"regular expression of {len(pattern)} characters; at most {MAX_PATTERN_LENGTH}")
    try:
        regex: CompiledPattern = re2.compile(pattern, _options())
        return regex
    except re2.error as error:
        reason = (
            error.args[0].decode(errors="replace")
            if error.args and isinstance(error.args[0], bytes)
            else error
        )
        raise InvalidPattern(
            f"invalid regular expression {pattern!r} (RE2 syntax, matched in linear time; "
            f"no backreferences or lookarounds): {reason}"
        ) from None
