"""The one output layer of the ``cddlm`` command: tables, ``--json``, and the progress line
(redrawn in place on a terminal, plain lines otherwise)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Iterable, TextIO

CONTAINERS = ("compound", "sequence", "parallel")


def emit_json(data: Any, stream: TextIO | None = None) -> None:
    """``data`` as indented JSON (what ``--json`` prints)."""
    out = stream or sys.stdout
    out.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def table(headers: Iterable[str], rows: Iterable[Iterable[Any]], stream: TextIO | None = None) -> None:
    """Columns padded to their widest cell; None prints as empty; trailing blanks trimmed.
    Columns empty in every row are left out."""
    out = stream or sys.stdout
    headers = list(headers)
    body = [["" if v is None else str(v) for v in r] for r in rows]
    keep = [i for i in range(len(headers)) if any(r[i] for r in body)] or list(range(len(headers)))
    grid = [[headers[i] for i in keep]] + [[r[i] for i in keep] for r in body]
    widths = [max(len(r[i]) for r in grid) for i in range(len(keep))]
    for r in grid:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() + "\n")


def clip(text: Any, width: int | None) -> Any:
    """``text`` cut to ``width`` characters (ending in ...), so that one long line does
    not widen a whole table; None and short texts as they are."""
    if not isinstance(text, str) or width is None or len(text) <= width:
        return text
    return text[:width - 3] + "..."


def fields(pairs: Iterable[tuple[str, Any]], stream: TextIO | None = None) -> None:
    """``key:  value`` lines, values aligned; pairs whose value is None or empty are left out."""
    out = stream or sys.stdout
    shown = [(k, v) for k, v in pairs if v not in (None, "")]
    width = max((len(k) for k, _ in shown), default=0) + 2
    for k, v in shown:
        out.write(("%s:" % k).ljust(width) + str(v) + "\n")


def counts(health: list[dict]) -> str:
    """Components (not containers) counted by state: ``1 running, 1 starting``."""
    found: dict[str, int] = {}
    for h in health:
        if h.get("type") not in CONTAINERS:
            found[h["state"]] = found.get(h["state"], 0) + 1
    return ", ".join("%d %s" % (n, s) for s, n in sorted(found.items()))


def waiting(component: dict) -> str:
    """``log /Serving HTTP/ (12s of 60s)`` for a component awaiting its readiness, else ''."""
    if not component.get("waitingFor"):
        return ""
    return "%s (%ds of %gs)" % (component["waitingFor"], component.get("waited") or 0,
                                component.get("timeout") or 0)


class Progress:
    """The line ``deploy``, ``run`` and ``terminate`` show while they wait: the state, the
    components counted by state and what the first waiting component waits for, e.g.
    ``[ 12.3s] hello: initialized (1 running, 1 starting); waiting for web: log /Serving
    HTTP/ (12s of 60s)``. On a terminal it is redrawn in place at every poll, so the clocks
    tick, and the last one stays. Otherwise (a pipe, a log) the same last line is written
    when the wait ends, and while it goes on one every ``every`` seconds if something other
    than a clock changed: a quick deploy prints what a terminal shows at its end."""

    def __init__(self, label: str, stream: TextIO | None = None, every: float = 10.0):
        self.label = label
        self.stream = stream or sys.stdout
        self.tty = _isatty(self.stream)
        self.every = every
        self.last_key: tuple | None = None      # what the last line written said
        self.pending: tuple[tuple, str] | None = None     # a line not written yet (a pipe)
        self.written = time.monotonic()         # when a line was last written to a pipe
        self.shown = False
        self.start = time.monotonic()

    def __call__(self, status: dict) -> None:
        health = status.get("health") or []
        detail = counts(health)
        line = "%s: %s%s" % (self.label, status["state"], " (%s)" % detail if detail else "")
        waiter = next((h for h in health if h.get("waitingFor")), None)
        if waiter is not None:
            line += "; waiting for %s: %s" % (waiter["path"], waiting(waiter))
        key = (status["state"], detail, waiter and (waiter["path"], waiter["waitingFor"]))
        now = time.monotonic()
        stamp = "[%5.1fs] " % (now - self.start)
        if self.tty:
            self.stream.write("\r\033[K" + stamp + line)
            self.shown = True
            self.stream.flush()
            return
        self.pending = (key, stamp + line) if key != self.last_key else None
        if self.pending and now - self.written >= self.every:
            self._write_pending()

    def _write_pending(self) -> None:
        key, line = self.pending
        self.stream.write(line + "\n")
        self.stream.flush()
        self.last_key, self.pending, self.written = key, None, time.monotonic()

    def done(self) -> None:
        """End the line: on a terminal, leave it; on a pipe, write the last one if it has
        not been. Call before printing anything else."""
        if self.tty and self.shown:
            self.stream.write("\n")
            self.stream.flush()
        elif self.pending:
            self._write_pending()
        self.shown = False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
