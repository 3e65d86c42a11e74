"""A host portal that lies to the front portal (the front's reads relayed through
``ClientHostPortal``: resolve, ``ext:logs``, ``ext:components``, ping): a real host portal
behind a loopback proxy that answers chosen requests itself. What the front answers its own
callers stays bounded and true to its own records: a megabyte fault with markup is relayed
cut to a few kilobytes, its markup as text; an EPR where a value belongs, and a log offset no
log has, are garbage (the host "unreachable" for that read), not relayed; what the host says
of a component another host runs is not taken; and a failure it reports with a huge fault
fails the application with a bounded terminationInfo. A host answering far more log than
asked for is held to the front's own limits: the lines asked for, at most ``log_bytes`` of them,
and a follow read on from where the kept lines end.

Tried and found sound (no test here, or covered elsewhere): an answer of 7 MB (under
``--agent-max-response-bytes``) or nested 240 deep is relayed as the value; SOAP served as
text/html is read as SOAP; a redirect, an empty body, a non-numeric or 5,000-digit offset are
"not SOAP" or garbage; a slow drip and a flood: tests/hostile/test_outbound.py."""

from __future__ import annotations

import contextlib
import re
from xml.sax.saxutils import escape

import requests
from lxml import etree

from cddlm import ns
from cddlm.client import Portal, PortalFault
from cddlm.config import DashboardLimits
from cddlm.errors import MAX_TEXT
from cddlm.relay import MAX_CAUSE
from tests.engines.test_ssh import native, process
from tests.multihost.cluster import AGENT_PORT, MultiHost
from tests.rogue import Proxy, Rogue, http_answer, wait_for

ENVELOPE = ('<soapenv:Envelope xmlns:soapenv="%s" xmlns:api="%s" xmlns:ext="%s" xmlns:wsrf-bf="%s" '
            'xmlns:wsrf-rp="%s" xmlns:wsa="%s"><soapenv:Body>%%s</soapenv:Body></soapenv:Envelope>'
            % (ns.SOAP11_ENV, ns.API, ns.EXT, ns.WSRF_BF, ns.WSRF_RP, ns.WSA))
MARKUP = "&lt;script&gt;alert(1)&lt;/script&gt;]]&gt;"     # as the host writes it: escaped text
BIG = 2_000_000
DESCRIPTOR = native(process("here", "sleep", "600", host="h1") + process("mine", "sleep", "601", host="l1"))


def soap(body: str, status: int = 200) -> bytes:
    return http_answer(status, (ENVELOPE % body).encode())


def big_fault() -> bytes:
    return soap("<soapenv:Fault><faultcode>soapenv:Server</faultcode><faultstring>%s%s</faultstring>"
                "</soapenv:Fault>" % (MARKUP, "y" * BIG), 500)


def asks(request, operation: bytes) -> bool:
    return operation in request.body


def logs_answer(lines: list[str], offset: int) -> bytes:
    return soap('<ext:logsResponse component="here" stream="stdout" host="h1" available="true" '
                'offset="%d">%s</ext:logsResponse>' % (offset, "".join(
                    "<ext:line>%s</ext:line>" % escape(line) for line in lines)))


def generous(log: bytes):
    """A host answering ``ext:logs`` with all of ``log`` (asked for a tail) or all of it after
    the offset asked (which must be where a character begins; past its end: from its start, as
    a host reads a log that was replaced), whatever the limits asked."""
    def lie(request) -> bytes | None:
        if not asks(request, b"logsRequest"):
            return None
        asked = re.search(rb":offset>(\d+)<", request.body)
        start = int(asked.group(1)) if asked else 0
        return logs_answer(log[start if start <= len(log) else 0:].decode().splitlines(), len(log))
    return lie


def size(lines: list[str]) -> int:
    """The log's bytes they are (as the reader counts them: each with its newline)."""
    return sum(len(line.encode()) + 1 for line in lines)


@contextlib.contextmanager
def lying_host(tmp_path):
    """A front portal with a host of its own (l1) and a host portal h1 reached through a proxy
    (whose address h1 gives in its EPRs), an application running on both: (proxy, cluster,
    application). ``proxy.lie(request)`` answers a request itself (bytes), or None to forward."""
    proxy = Proxy()
    proxy.lie = lambda request: None
    proxy.refuse = lambda request: proxy.lie(request)
    with Rogue(proxy) as rogue:
        mh = MultiHost(tmp_path, n=1, lease=60.0, host_args=["--public-url", rogue.base], local=["l1"])
        proxy.target = lambda: "http://%s:%d" % (mh.hosts[0].address, AGENT_PORT)
        with mh:
            app = Portal(mh.front.url, failover=False).create()
            app.initialize(ns.NATIVE, body=DESCRIPTOR)
            app.run()
            assert app.wait_for("running", timeout=90) == "running", app.ping()
            yield proxy, mh, app


def post(app, body: str) -> requests.Response:
    """The front's raw answer (its bytes are what is measured)."""
    return requests.post(app.reference.address, data=(ENVELOPE % body).encode(),
                         headers={"Content-Type": "text/xml; charset=utf-8"}, timeout=60)


def resolve(app, path: str) -> requests.Response:
    return post(app, "<api:resolveRequest><api:path>%s</api:path></api:resolveRequest>" % path)


def test_a_lying_host_portals_answers_are_bounded_and_never_taken_for_the_truth(tmp_path):
    with lying_host(tmp_path) as (proxy, mh, app):
        pid = int(app.resolve("here/pid"))
        mine = {c["path"]: c for c in app.components()}["mine"]["pid"]
        assert pid and mine and pid != mine

        # a megabyte fault with markup answering a resolve: relayed cut, its markup text
        proxy.lie = lambda r: big_fault() if asks(r, b"resolveRequest") else None
        r = resolve(app, "here/pid")
        assert r.status_code == 500 and len(r.content) < 4 * MAX_TEXT + MAX_CAUSE, len(r.content)
        doc = etree.fromstring(r.content)
        assert doc.findtext(".//faultstring").endswith("characters more)")
        cause = doc.find(".//{%s}FaultCause" % ns.WSRF_BF)
        assert cause is not None and cause.find(".//script") is None      # text, never markup
        assert "<script>alert(1)</script>]]>" in "".join(cause.itertext())

        # an EPR where a value belongs: garbage (h1 "unreachable" for this read), not a value
        proxy.lie = lambda r: soap(
            "<api:resolveResponse><api:applicationReference><wsa:Address>http://elsewhere.example/x"
            "</wsa:Address></api:applicationReference></api:resolveResponse>") \
            if asks(r, b"resolveRequest") else None
        r = resolve(app, "here/pid")
        assert r.status_code == 500 and b"ResourceUnavailableFault" in r.content, r.content[:800]
        assert b"elsewhere.example" not in r.content

        # a log offset no log has: not relayed (the next read of `cddlm logs -f` would be refused)
        for offset in ("-5", str(2 ** 63)):
            proxy.lie = lambda r, o=offset: soap(
                '<ext:logsResponse component="here" stream="stdout" available="true" offset="%s">'
                '<ext:line>a</ext:line></ext:logsResponse>' % o) if asks(r, b"logsRequest") else None
            try:
                found = app.logs("here", offset=0)
            except PortalFault as e:
                assert e.fault == "ResourceUnavailableFault" and "h1" in str(e), e
            else:
                raise AssertionError("offset %s relayed: %r" % (offset, found))

        # what h1 says of the component l1 runs (and of one nobody runs) is not taken
        proxy.lie = lambda r: soap(
            '<wsrf-rp:GetResourcePropertyResponse><ext:components>'
            '<ext:component path="here" type="process" state="running" pid="%d" ports="8080"/>'
            '<ext:component path="mine" type="process" state="running" pid="1" ports="22"/>'
            '<ext:component path="ghost" type="process" state="running" pid="1"/>'
            '</ext:components></wsrf-rp:GetResourcePropertyResponse>' % pid) \
            if asks(r, b"GetResourceProperty") and asks(r, b"components") else None
        seen: dict = {}

        def told() -> bool:         # (once the front's short cache of h1's table has expired)
            seen.update((c["path"], c) for c in app.components())
            return seen["here"]["ports"] == [8080]      # of its own component: its word
        assert wait_for(told, 10, 0.2), seen
        assert set(seen) == {"here", "mine"} and seen["here"]["pid"] == pid
        assert (seen["mine"]["pid"], seen["mine"]["ports"]) == (mine, [])
        proxy.lie = lambda r: None
        assert int(app.resolve("here/pid")) == pid and app.state() == "running"     # nothing changed

        # a failure reported with a megabyte fault: the application fails, its record bounded
        failed = ("<api:pingResponse><api:state>failed</api:state><api:terminationInfo>"
                  "<api:normal>false</api:normal><api:reason>%s%s</api:reason><api:fault>"
                  "<api:DeploymentFault><wsrf-bf:Timestamp>2026-01-01T00:00:00Z</wsrf-bf:Timestamp>"
                  "<wsrf-bf:Description>%s%s</wsrf-bf:Description>%s</api:DeploymentFault>"
                  "</api:fault></api:terminationInfo></api:pingResponse>"
                  % (MARKUP, "r" * BIG, MARKUP, "d" * BIG, "<api:x>%s</api:x>" % ("z" * 4000) * 100))
        proxy.lie = lambda r: soap(failed) if asks(r, b"pingRequest") else None
        assert wait_for(lambda: app.state() == "failed", 60, 0.2), app.ping()
        proxy.lie = lambda r: None
        for asked in ("<api:pingRequest/>", "<wsrf-rp:GetResourcePropertyDocument/>"):
            r = post(app, asked)
            assert r.status_code == 200 and len(r.content) < 8 * MAX_TEXT + 2 * MAX_CAUSE, \
                (asked, len(r.content))
            assert b"<script>" not in r.content and b"&lt;script&gt;" in r.content
        front = requests.get(mh.front.url.rsplit("/cddlm/", 1)[0] + "/api/v1/applications/"
                             + app.reference.resource_id, timeout=30)
        assert front.status_code == 200 and len(front.content) < 8 * MAX_TEXT + 2 * MAX_CAUSE, \
            len(front.content)
        app.terminate()
        assert app.wait_for("terminated", timeout=60) == "terminated"


def test_a_host_answering_more_log_than_asked_is_held_to_the_fronts_limits(tmp_path):
    cap = DashboardLimits.log_bytes
    with lying_host(tmp_path) as (proxy, mh, app):
        # 2 MB of lines for a tail of 10: the last 10, and at most `cap` bytes of a longer tail
        tail = ["%06d %s" % (n, "t" * 94) for n in range(20_000)]
        proxy.lie = generous(("\n".join(tail) + "\n").encode())
        found = app.logs("here", lines=10)
        assert found["lines"] == tail[-10:], (len(found["lines"]), found["lines"][:2])
        r = post(app, "<ext:logsRequest><ext:component>here</ext:component><ext:lines>1000"
                      "</ext:lines></ext:logsRequest>")
        assert r.status_code == 200 and len(r.content) < 2 * cap, len(r.content)
        found = app.logs("here", lines=1000)
        assert found["lines"] == tail[-(cap // size(tail[-1:])):], len(found["lines"])

        # following: each read the first lines that fit, and the next goes on where it stopped
        # (a line longer than the cap in pieces, never cut inside a character)
        lines = ["%05d %s" % (n, "\u00e9" * (n % 50) + "x" * (n % 97)) for n in range(3000)]
        lines[1000] = "x" + "\u00e9" * 40_000
        log = ("\n".join(lines) + "\n").encode()
        proxy.lie = generous(log)
        offset, reads = 0, 0
        while offset < len(log):
            found = app.logs("here", offset=offset)
            assert found["lines"] and size(found["lines"]) <= cap + 1, (offset, len(found["lines"]))
            assert offset < found["offset"] <= min(len(log), offset + cap)
            assert log[offset:found["offset"]].decode().splitlines() == found["lines"], offset
            offset, reads = found["offset"], reads + 1
            assert reads < 200
        assert reads >= len(log) // cap

        # a host answering an offset behind the one asked read its log from the start (it
        # was replaced, as when rotated past --max-log-bytes): relayed, and followed on from there
        proxy.lie = lambda r: logs_answer(["new"], 4) if asks(r, b"logsRequest") else None
        assert app.logs("here", offset=offset)["offset"] == 4
        proxy.lie = generous(log)
        found = app.logs("here", offset=len(log) + 10)      # from its start, cut
        assert found["lines"] == lines[:len(found["lines"])] and found["offset"] == size(found["lines"])
        proxy.lie = lambda r: None
        assert app.logs("here", offset=0)["lines"] == []      # h1's own: sleep writes nothing
