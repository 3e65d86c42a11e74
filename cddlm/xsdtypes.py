"""XML Schema simple values as the portal reads and writes them: dateTime, duration, boolean.
Times are UTC epoch seconds inside the portal and xsd:dateTime (with ``Z``) on the wire."""

from __future__ import annotations

import datetime as dt
import re

from cddlm.errors import MAX_DIGITS, BadArgument

_DURATION = re.compile(r"^(-)?P(?!$)(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?"
                       r"(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")
# the last time an xsd:dateTime is written for (a time past it could never be shown)
LATEST = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.timezone.utc).timestamp()


def format_datetime(ts: float) -> str:
    value = dt.datetime.fromtimestamp(ts, dt.timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (value.microsecond // 1000)


def parse_datetime(text: str) -> float:
    text = (text or "").strip()
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadArgument("%r is not an xsd:dateTime" % text) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.timestamp()


def parse_duration(text: str) -> float:
    """Seconds; years count 365 days and months 30 (xsd:duration has no fixed length)."""
    m = _DURATION.match((text or "").strip())
    if not m:
        raise BadArgument("%r is not an xsd:duration" % text[:80])
    sign, years, months, days, hours, minutes, seconds = m.groups()
    if any(len(part or "") > MAX_DIGITS for part in m.groups()):
        raise BadArgument("%r... is longer than any time the portal keeps" % text[:40])
    total = ((int(years or 0) * 365 + int(months or 0) * 30 + int(days or 0)) * 86400
             + int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0))
    return -total if sign else total


def format_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return "P%dDT%dH%dM%.3fS" % (days, hours, minutes, secs)


def parse_time(text: str, now: float) -> float:
    """An xsd:dateTime, or an xsd:duration counted from ``now`` (WSN AbsoluteOrRelativeTime)."""
    text = (text or "").strip()
    if text.startswith("P") or text.startswith("-P"):
        return from_now(text, now)
    return parse_datetime(text)


def from_now(duration: str, now: float) -> float:
    """The time an xsd:duration after ``now`` is: one that can be written (1970 to 9999)."""
    when = now + parse_duration(duration)
    if not 0 <= when <= LATEST:
        raise BadArgument("%r from now is past the year 9999 (or before 1970)" % duration[:80])
    return when


def parse_boolean(text: str) -> bool:
    value = (text or "").strip()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise BadArgument("%r is not an xsd:boolean" % text)
