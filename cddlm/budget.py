"""Bounded evaluation of user input: the small helper every package calls when it evaluates
something a user wrote (DESIGN.md section 8). Pure: no I/O, no clock.

- ``user_regex``: a user's regular expression (a readiness ``log`` pattern, HOT's
  ``allowed_pattern``) compiled by RE2 (google-re2), whose matching time is linear in the
  input, whatever the pattern: ``(a+)+$`` against forty ``a``s and a ``b`` takes microseconds,
  where Python's backtracking ``re`` takes hours and holds the GIL all the while. RE2 has no
  backreferences or look-around; a pattern that needs them is refused with the reason.
- ``check_xpath``: what any user's XPath must be before it is compiled: not too long, and XPath
  1.0 only: the EXSLT extensions lxml offers by namespace (``str:padding(1e9, 'x')`` asks for a
  gigabyte) are left out of the namespaces it may use.
- ``Meter``: a running total with a limit (bytes of resolved values, nodes expanded), raising
  the caller's error the moment the limit is passed, before more is built.

XPath from users is evaluated by ``cddlm/xpathsafe.py`` (in helper processes that can be
stopped); XML from users is parsed by ``cddlm/xmlsafe.py``.
"""

from __future__ import annotations

from typing import Callable

import re2

REGEX_MEMORY = 1024 * 1024      # RE2's own bound on the memory of one compiled pattern


class PatternError(ValueError):
    """A pattern RE2 cannot take (its syntax, a feature it lacks, its size)."""


def user_regex(pattern: str, max_chars: int):
    """``pattern`` compiled for linear-time matching (``.search(text)``); ``PatternError``
    saying why when it cannot be."""
    if not isinstance(pattern, str):
        raise PatternError("a pattern is a string")
    if len(pattern) > max_chars:
        raise PatternError("the pattern is longer than %d characters" % max_chars)
    options = re2.Options()
    options.log_errors = False        # the error is reported to the caller, not to stderr
    options.max_mem = REGEX_MEMORY
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        reason = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) \
            else str(e)
        raise PatternError("%s (patterns use RE2 syntax: no backreferences or look-around)"
                           % reason) from None
    except (TypeError, ValueError) as e:
        raise PatternError(str(e)) from None


EXSLT = "http://exslt.org/"


class ExpressionError(ValueError):
    """An XPath a user may not have evaluated (its length, an extension it asks for)."""


def check_xpath(text: str, namespaces: dict[str, str], max_chars: int) -> dict[str, str]:
    """The namespaces ``text`` may be compiled with: ``namespaces`` without EXSLT's, so that
    only XPath 1.0's own functions are there; ``ExpressionError`` when it is too long."""
    if len(text) > max_chars:
        raise ExpressionError("the expression is longer than %d characters" % max_chars)
    return {prefix: uri for prefix, uri in namespaces.items()
            if not (uri or "").startswith(EXSLT)}


class Meter:
    """A running total that may not pass ``limit``: ``add(n)`` raises ``error()`` once it does."""

    def __init__(self, limit: int, error: Callable[[], Exception]):
        self.limit = limit
        self.total = 0
        self._error = error

    def add(self, amount: int) -> None:
        self.total += amount
        if self.total > self.limit:
            raise self._error()
