"""Checks for the plain data (parsed YAML or JSON) of placement files, with precise messages.

Every message names where the value is (``request: policy 2 (llmn): n``) and what was expected.
"""

from __future__ import annotations

import math
import re

from cddlm.errors import BadArgument

NAME = re.compile(r"^[^\s:][^\s]{0,199}$")


def check_keys(data: dict, allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        raise BadArgument("%s: unknown key%s %s (expected %s)" % (
            where, "s" if len(unknown) > 1 else "", ", ".join(map(repr, unknown)),
            ", ".join(allowed)))


def check_name(value, where: str) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise BadArgument("%s: expected a name (text without spaces, not starting with ':'), "
                          "got %r" % (where, value))
    return value


def number(value, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadArgument("%s: expected a number, got %r" % (where, value))
    if value < 0 or (positive and value == 0):
        raise BadArgument("%s: must be %s, got %r" % (where, "positive" if positive else
                                                       "zero or more", value))
    return value


def integer(value, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadArgument("%s: expected a whole number of at least %d, got %r"
                          % (where, minimum, value))
    return value


def string_list(value, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BadArgument("%s: expected a list of names, got %r" % (where, value))
    return list(value)


def boolean(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise BadArgument("%s: expected true or false, got %r" % (where, value))
    return value
