"""The portal's log lines: plain text, or one JSON object a line (``--log-format json``).

A JSON line holds ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger`` and
``message``, and, while a request is being answered, its ``operation``, ``application`` (the
application's id, once the request has named one), ``principal`` and ``address`` (the
client's). The edge says what it knows with ``begin`` and ``bind``; the formatter reads it
from a context variable, so no layer below passes it along.

Audit lines (the ``cddlm.audit`` logger, ``application/audit.py``) carry their record as
``extra={"audit": {...}}``; in JSON they always hold the same keys: ``action``,
``principal``, ``address``, ``application`` and ``detail`` (null where there is none).
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from typing import Callable

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELDS = ("operation", "application", "principal", "address")
AUDIT_KEYS = ("action", "principal", "address", "application", "detail")

_REQUEST: contextvars.ContextVar[dict | None] = contextvars.ContextVar("cddlm_request", default=None)


def begin(**fields: str | None) -> None:
    """A request starts being answered on this thread: what is known of it so far (the
    previous request's fields are forgotten)."""
    _REQUEST.set({k: v for k, v in fields.items() if v})


def bind(**fields: str | None) -> None:
    """More of the current request (the application it names, once known)."""
    current = _REQUEST.get()
    if current is not None:
        current.update({k: v for k, v in fields.items() if v})


def end() -> None:
    _REQUEST.set(None)


def current() -> dict:
    return dict(_REQUEST.get() or {})


class JsonFormatter(logging.Formatter):
    """``mask`` (text -> text) is applied to every field's text: the handlers' filters mask
    secrets in the message and the traceback, and these fields are more of the same."""

    def __init__(self, mask: Callable[[str], str] | None = None):
        super().__init__()
        self.mask = mask

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": _iso(record.created), "level": record.levelname, "logger": record.name,
               "message": record.getMessage()}
        out.update((k, v) for k, v in (_REQUEST.get() or {}).items() if k in FIELDS)
        audit = getattr(record, "audit", None)
        if isinstance(audit, dict):
            out.update((k, audit.get(k)) for k in AUDIT_KEYS)
        if record.exc_info or record.exc_text:
            out["exception"] = record.exc_text or self.formatException(record.exc_info)
        if self.mask is not None:
            out = {k: self.mask(v) if isinstance(v, str) and k not in ("time", "level", "logger")
                   else v for k, v in out.items()}
        return json.dumps(out, ensure_ascii=False, default=str)


def formatter(kind: str, mask: Callable[[str], str] | None = None) -> logging.Formatter:
    """``text`` or ``json`` (``mask``: see ``JsonFormatter``)."""
    return JsonFormatter(mask) if kind == "json" else logging.Formatter(TEXT_FORMAT)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)
