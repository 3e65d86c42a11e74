"""Attacks on a live portal (issue 16): the portal runs as its own process on a loopback port,
exactly as ``cddlm portal serve`` runs it, and is attacked with raw HTTP, raw SOAP and crafted
descriptors. After every attack ``Portal.after`` proves what the issue asks: a second, well-
behaved client's GetResourceProperty answers within one second, the store passes SQLite's
integrity check, and the victim application (created before any attack) is unchanged.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from pathlib import Path
from xml.sax.saxutils import escape

import pytest
import requests
from lxml import etree

from cddlm import ns
from tests.conftest import LivePortal, free_port, kill_leftovers

NS = {"soapenv": ns.SOAP11_ENV, "api": ns.API, "wsa": ns.WSA, "wsrf-rp": ns.WSRF_RP,
      "wsrf-bf": ns.WSRF_BF, "wsrf-r": ns.WSRF_R, "wsnt": ns.WSNT, "ext": ns.EXT}
ENVELOPE = ('<soapenv:Envelope %s><soapenv:Header>%s</soapenv:Header><soapenv:Body>%s</soapenv:Body>'
            '</soapenv:Envelope>') % (" ".join('xmlns:%s="%s"' % kv for kv in NS.items()), "%s", "%s")
NATIVE = "urn:cddlm:lang:components:1"
HOT = "urn:cddlm:lang:hot:1"
CDL = "http://www.gridforum.org/namespaces/2005/02/cddlm/CDL-1.0"
SLEEPER = ('<application xmlns="%s"><component name="w" type="process"><attribute name="argv">'
           '<item>sleep</item><item>3600</item></attribute></component></application>' % NATIVE)


class Answer:
    def __init__(self, status: int, data: bytes, elapsed: float):
        self.status, self.data, self.elapsed = status, data, elapsed
        try:
            self.doc = etree.fromstring(data)
        except etree.XMLSyntaxError:
            self.doc = None

    def fault(self) -> str | None:
        """The detail element's local name of a fault answer (None: no fault)."""
        if self.doc is None:
            return None
        detail = self.doc.find(".//detail")
        if detail is not None and len(detail):
            return etree.QName(detail[0]).localname
        return "Fault" if self.doc.find(".//{%s}Fault" % ns.SOAP11_ENV) is not None else None

    def text(self, xpath: str) -> str:
        return self.doc.xpath("string(%s)" % xpath, namespaces=NS) if self.doc is not None else ""

    def description(self) -> str:
        return self.text("//wsrf-bf:Description")


class Portal(LivePortal):
    """A portal process on loopback (its stdin a pipe, as under a supervisor: /proc/self/fd/0
    is then a FIFO), with helpers to attack it and to prove what an attack left."""

    def __init__(self, tmp: Path, extra: list[str] = ()):
        self.tmp = tmp
        self.state = tmp / "state"
        self.state.mkdir(parents=True, exist_ok=True)
        super().__init__(self.state, 0, None, ["--liveness-interval", "0.5"] + list(extra),
                         stdin_pipe=True)

    def start(self, timeout: float = 30.0, port: int | None = None) -> "Portal":
        """Start (again, on ``port``: the victim's address stays valid)."""
        self.port = port or free_port()
        try:
            super().start(timeout)
        except RuntimeError as e:
            raise RuntimeError("%s: %s" % (e, self.log_text()[-2000:])) from None
        self.base = self.url.rsplit("/cddlm/", 1)[0]
        return self

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    # -- the process ----------------------------------------------------------------------------
    def status(self, field: str) -> int:
        """A kB figure of /proc/PID/status (VmRSS, VmHWM)."""
        for line in Path("/proc/%d/status" % self.proc.pid).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def cpu_seconds(self) -> float:
        fields = Path("/proc/%d/stat" % self.proc.pid).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # -- SOAP ---------------------------------------------------------------------------------
    def post(self, to: str, body: str, headers: str = "", timeout: float = 30.0,
             http_headers: dict | None = None, raw: bytes | None = None) -> Answer:
        address = to if to.startswith("http") else self.url
        data = raw if raw is not None else (ENVELOPE % (headers, body)).encode("utf-8")
        started = time.monotonic()
        r = requests.post(address, data=data, timeout=timeout,
                          headers=http_headers or {"Content-Type": "text/xml; charset=utf-8"})
        return Answer(r.status_code, r.content, time.monotonic() - started)

    def create(self, name: str | None = None) -> str:
        a = self.post(self.url, "<api:createRequest>%s</api:createRequest>"
                      % ("<api:name>%s</api:name>" % name if name else ""))
        assert a.fault() is None, a.data[:500]
        return a.text("//wsa:Address")

    def initialize(self, app: str, language: str, *, text: str | None = None,
                   body: str | None = None, reference: str | None = None,
                   properties: dict | None = None, timeout: float = 30.0) -> Answer:
        if text is not None:
            inner = "<api:text>%s</api:text>" % escape(text)
        elif body is not None:
            inner = "<api:body>%s</api:body>" % body
        else:
            inner = "<api:reference>%s</api:reference>" % escape(reference)
        props = "".join("<api:property><api:name>%s</api:name><api:value>%s</api:value></api:property>"
                        % (escape(k), escape(v)) for k, v in (properties or {}).items())
        return self.post(app, '<api:initializeRequest><api:descriptor language="%s">%s'
                              '</api:descriptor>%s</api:initializeRequest>'
                         % (language, inner, "<api:properties>%s</api:properties>" % props if props else ""),
                         timeout=timeout)

    def run(self, app: str) -> None:
        a = self.post(app, "<api:runRequest/>")
        assert a.fault() is None, a.data[:500]

    def terminate(self, app: str) -> Answer:
        return self.post(app, "<api:terminateRequest/>")

    def prop(self, app: str, qname: str, timeout: float = 30.0) -> Answer:
        return self.post(app, "<wsrf-rp:GetResourceProperty>%s</wsrf-rp:GetResourceProperty>" % qname,
                         timeout=timeout)

    def app_dir(self, app: str) -> Path:
        """The application's directory on the portal's one local host."""
        resource_id = self.prop(app, "api:id").text("//api:id")
        return self.state / "hosts" / "localhost" / "apps" / resource_id.rsplit(":", 1)[-1]

    def state_of(self, app: str) -> str:
        return self.prop(app, "api:state").text("//api:state")

    def wait_state(self, app: str, *states: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.state_of(app)
            if state in states:
                return state
            time.sleep(0.1)
        raise AssertionError("%s stayed %s, not %s" % (app, state, states))

    def deploy(self, descriptor: str = SLEEPER, language: str = NATIVE, name: str | None = None) -> str:
        app = self.create(name)
        a = self.initialize(app, language, body=descriptor) if language != HOT else \
            self.initialize(app, language, text=descriptor)
        assert a.fault() is None, a.data[:800]
        self.run(app)
        self.wait_state(app, "running")
        return app

    # -- the proof ------------------------------------------------------------------------------
    def witness(self, limit: float = 1.0) -> float:
        """A well-behaved client's GetResourceProperty on the victim: answered, within ``limit``."""
        a = self.prop(self.victim, "api:state", timeout=limit + 5)
        assert a.text("//api:state") == "running", a.data[:300]
        assert a.elapsed < limit, "a good client waited %.2fs" % a.elapsed
        return a.elapsed

    def victim_facts(self) -> tuple:
        ping = self.post(self.victim, "<api:pingRequest/>")
        return (ping.text("//api:state"), ping.text("//api:health/api:component/@pid"))

    def integrity(self) -> str:
        conn = sqlite3.connect("file:%s?mode=ro" % (self.state / "portal.db"), uri=True)
        try:
            return conn.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            conn.close()

    def after(self) -> None:
        """What every attack must leave: see the module docstring."""
        assert self.proc.poll() is None, "the portal died: %s" % self.log_text()[-2000:]
        self.witness()
        assert self.integrity() == "ok"
        assert self.victim_facts() == self.victim_before, "the victim application changed"


def start_portal(tmp: Path, extra: list[str] = ()) -> Portal:
    p = Portal(tmp, extra).start()
    p.victim = p.deploy(name="victim")
    p.victim_before = p.victim_facts()
    assert p.victim_before[0] == "running" and p.victim_before[1]
    return p


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """One portal per test module (attacks that do not need their own portal share it)."""
    tmp = tmp_path_factory.mktemp("hostile")
    allowed = tmp / "allowed"
    allowed.mkdir()
    p = start_portal(tmp, ["--allow-descriptor-dir", str(allowed)])
    p.allowed = allowed
    yield p
    p.stop()
    kill_leftovers(tmp)


@pytest.fixture(scope="module")
def portal(tmp_path_factory):
    """A portal of the test module's own, with no victim (attacks that need no witness)."""
    tmp = tmp_path_factory.mktemp("portal")
    p = Portal(tmp).start()
    yield p
    p.stop()
    kill_leftovers(tmp)


@pytest.fixture
def own_portal(tmp_path):
    """A portal of the test's own (for attacks that kill, corrupt or lock it)."""
    started: list[Portal] = []

    def make(extra: list[str] = (), victim: bool = True, sub: str = "p") -> Portal:
        tmp = tmp_path / ("%s%d" % (sub, len(started)))
        tmp.mkdir()
        p = start_portal(tmp, extra) if victim else Portal(tmp, extra).start()
        started.append(p)
        return p

    yield make
    for p in started:
        p.stop()
    kill_leftovers(tmp_path)


def drip(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that have sent the first bytes of a request and nothing more."""
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"POST /cddlm/portal HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(s)
    return socks
