"""The one evaluator for untrusted XPath: in helper processes, with a time and a result budget.

XPath 1.0 has no bound of its own: nested ``//*`` predicates cost N^depth (five levels, 4.5 s
on a 78-node document; eight, hours), and libxml2 cannot be interrupted once it evaluates. So
users' XPath (``QueryResourceProperties``, notification ``MessageContent`` filters) is never
evaluated in the portal's own process: a small pool of helper processes (``python -m
cddlm.xpathsafe``, lxml only, a lower CPU priority, a memory limit) does it, and a helper that
passes its time budget is killed and replaced. The portal's threads only wait, with a
deadline, so a costly query costs one helper for ``seconds`` at most, never the portal.

A request waits at most ``wait`` seconds for a free helper, then is refused as ``Busy``. A
result larger than ``max_result_bytes`` (serialized) is refused. Messages between the portal
and a helper are length-prefixed JSON (never pickle: a helper is not trusted with the portal).

Expressions are checked first (``budget.check_xpath``: length, and XPath 1.0 without EXSLT)
and compiled in the portal (cheap, bounded by the length), so syntax errors are answered
without a helper.
"""

from __future__ import annotations

import json
import os
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from lxml import etree

from cddlm import affinity
from cddlm.budget import ExpressionError, check_xpath
from cddlm.errors import Busy, InvalidQueryExpression, QueryEvaluationError

MEMORY_BYTES = 1 << 30          # address space of one helper
NICE = 10                       # helpers yield the CPU to the portal's own threads
_HEADER = struct.Struct(">I")
STARTUP = 30.0                  # a new helper's start (Python, lxml; niced on a busy machine)
READY = b"R"                    # what a helper says once started, before its first message


class BudgetExceeded(QueryEvaluationError):
    """The evaluation took longer than its budget (the helper was stopped)."""


@dataclass(frozen=True)
class Result:
    kind: str                              # nodes | boolean | number | string
    items: tuple[tuple[str, str], ...] = ()  # nodes: ("element", XML) or ("text", value)
    value: object = None                   # boolean, number or string


def compile_expression(text: str, namespaces: dict[str, str], max_chars: int) -> dict[str, str]:
    """Check and compile ``text`` here (syntax errors need no helper); returns the namespaces
    it may use. ``InvalidQueryExpression`` when it cannot be used."""
    try:
        namespaces = check_xpath(text, namespaces, max_chars)
        etree.XPath(text, namespaces=namespaces)
    except ExpressionError as e:
        raise InvalidQueryExpression("%s" % e) from None
    except etree.XPathSyntaxError as e:
        raise InvalidQueryExpression("XPath syntax error in %r: %s" % (text[:200], e)) from None
    except etree.XPathError as e:
        raise InvalidQueryExpression("cannot compile %r: %s" % (text[:200], e)) from None
    return namespaces


class _Helper:
    """One helper process and its pipes."""

    def __init__(self):
        self.ready = False
        with affinity.unpinned():   # a heavy query must not take the portal's own CPUs
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cddlm.xpathsafe"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
                start_new_session=True, env={"PATH": os.environ.get("PATH", ""),
                                             "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})

    def call(self, message: dict, seconds: float) -> dict | None:
        """The helper's answer, or None when it did not answer within ``seconds`` (or died).
        A new helper's start is not part of the budget: on a busy machine, a niced Python
        starting up took more than the 0.5 s a message filter has (it failed the filter)."""
        if not self.ready:
            if self._read(len(READY), time.monotonic() + STARTUP) != READY:
                return None
            self.ready = True
        data = json.dumps(message).encode("utf-8")
        try:
            self.proc.stdin.write(_HEADER.pack(len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        deadline = time.monotonic() + seconds
        header = self._read(_HEADER.size, deadline)
        if header is None:
            return None
        body = self._read(_HEADER.unpack(header)[0], deadline)
        return json.loads(body) if body is not None else None

    def _read(self, size: int, deadline: float) -> bytes | None:
        fd = self.proc.stdout.fileno()
        poller = select.poll()          # not select(): a busy portal has descriptors past 1024
        poller.register(fd, select.POLLIN)
        chunks, got = [], 0
        while got < size:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return None
            chunk = os.read(fd, min(1 << 20, size - got))
            if not chunk:
                return None
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


class XPathPool:
    """Up to ``workers`` helper processes, started when first needed."""

    def __init__(self, workers: int = 2, *, seconds: float = 2.0, wait: float = 1.0,
                 max_result_bytes: int = 4 << 20, max_chars: int = 4096):
        self.seconds = seconds
        self.wait = wait
        self.max_result_bytes = max_result_bytes
        self.max_chars = max_chars
        self._free: queue.LifoQueue = queue.LifoQueue()
        for _ in range(max(1, workers)):
            self._free.put(None)             # a slot whose helper is not started yet
        self._all: set[_Helper] = set()
        self._lock = threading.Lock()

    def _call(self, message: dict, seconds: float, wait: float | None = None) -> dict:
        try:
            helper = self._free.get(timeout=self.wait if wait is None else wait)
        except queue.Empty:
            raise Busy("every XPath helper is busy with other requests; send this one again "
                       "later") from None
        try:
            if helper is None or helper.proc.poll() is not None:
                helper = self._start()
            reply = helper.call(message, seconds)
            if reply is None:           # too slow (or died): stop it; the slot starts another
                helper.kill()
                with self._lock:
                    self._all.discard(helper)
                helper = None
                raise BudgetExceeded("the expression was stopped after its budget of %gs"
                                     % seconds)
            return reply
        finally:
            self._free.put(helper)

    def _start(self) -> _Helper:
        helper = _Helper()
        with self._lock:
            self._all.add(helper)
        return helper

    def query(self, document: bytes, expression: str, namespaces: dict[str, str]) -> Result:
        """Evaluate ``expression`` on ``document`` (its root the context node)."""
        namespaces = compile_expression(expression, namespaces, self.max_chars)
        reply = self._call({"op": "query", "doc": document.decode("utf-8"), "expr": expression,
                            "ns": namespaces, "max": self.max_result_bytes}, self.seconds)
        error = reply.get("error")
        if error == "prefix":
            raise InvalidQueryExpression("%r uses an undeclared prefix: %s"
                                         % (expression[:200], reply.get("message")))
        if error == "too-large":
            raise QueryEvaluationError("the result is larger than %d bytes" % self.max_result_bytes)
        if error:
            raise QueryEvaluationError("cannot evaluate %r: %s" % (expression[:200], reply.get("message")))
        return Result(reply["kind"], tuple(tuple(i) for i in reply.get("items", ())), reply.get("value"))

    def filter(self, filters: list[tuple[str, dict]], payloads: list[bytes], seconds: float,
               strict: bool = False, wait: float | None = None) -> list[bool]:
        """For each payload, whether every filter holds (XPath ``boolean()``) with the payload
        as context node; an evaluation error is a non-match, or an ``InvalidQueryExpression``
        when ``strict``. ``BudgetExceeded`` when all of them take longer than ``seconds``."""
        checked = [(text, compile_expression(text, ns, self.max_chars)) for text, ns in filters]
        reply = self._call({"op": "filter", "filters": checked,
                            "payloads": [p.decode("utf-8") for p in payloads], "strict": strict},
                           seconds, wait)
        if reply.get("error"):
            raise InvalidQueryExpression(str(reply.get("message")))
        return [bool(x) for x in reply["matches"]]

    def close(self) -> None:
        """Stop every helper (a later request starts a new one; a helper also ends by itself
        when the portal's end of its pipe closes)."""
        with self._lock:
            helpers, self._all = list(self._all), set()
        for helper in helpers:
            helper.kill()


# -- the helper process ---------------------------------------------------------------------------
def _boolean(value: object) -> bool:
    """XPath 1.0 ``boolean()`` of an lxml XPath result."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        return value == value and value != 0.0
    if isinstance(value, (list, str)):
        return len(value) > 0
    return bool(value)


def _parse(text: str) -> etree._Element:
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             huge_tree=False)
    return etree.fromstring(text.encode("utf-8"), parser)


def _query(message: dict) -> dict:
    doc = _parse(message["doc"])
    try:
        result = etree.XPath(message["expr"], namespaces=message["ns"])(etree.ElementTree(doc))
    except etree.XPathError as e:
        return {"error": "prefix" if "namespace prefix" in str(e) else "eval", "message": str(e)}
    if isinstance(result, bool):
        return {"kind": "boolean", "value": result}
    if isinstance(result, float):
        return {"kind": "number", "value": result}
    if isinstance(result, str):
        if len(result.encode("utf-8")) > message["max"]:
            return {"error": "too-large"}
        return {"kind": "string", "value": str(result)}
    items, size = [], 0
    for item in result:
        if isinstance(item, etree._Element):
            entry = ["element", etree.tostring(item, encoding="unicode", with_tail=False)]
        else:      # a text or attribute node: its string value
            entry = ["text", str(item)]
        size += len(entry[1]) + 16
        if size > message["max"]:
            return {"error": "too-large"}
        items.append(entry)
    return {"kind": "nodes", "items": items}


def _filter(message: dict) -> dict:
    try:
        compiled = [etree.XPath(text, namespaces=ns) for text, ns in message["filters"]]
    except etree.XPathError as e:
        return {"error": "compile", "message": str(e)}
    matches = []
    for payload in message["payloads"]:
        element = _parse(payload)
        ok = True
        for xpath in compiled:
            try:
                if not _boolean(xpath(element)):
                    ok = False
                    break
            except etree.XPathError as e:
                if message.get("strict"):
                    return {"error": "eval", "message": str(e)}
                ok = False
                break
        matches.append(ok)
    return {"matches": matches}


def _serve() -> None:
    import resource
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
        os.nice(NICE)
    except (OSError, ValueError):
        pass
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(READY)
    stdout.flush()
    while True:
        header = stdin.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return          # the portal has gone
        message = json.loads(stdin.read(_HEADER.unpack(header)[0]))
        try:
            reply = _query(message) if message.get("op") == "query" else _filter(message)
        except MemoryError:
            reply = {"error": "eval", "message": "the evaluation needs too much memory"}
        except (etree.XMLSyntaxError, ValueError) as e:
            reply = {"error": "eval", "message": "unusable input: %s" % e}
        data = json.dumps(reply).encode("utf-8")
        stdout.write(_HEADER.pack(len(data)) + data)
        stdout.flush()


if __name__ == "__main__":
    _serve()
