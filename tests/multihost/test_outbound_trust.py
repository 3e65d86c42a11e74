"""Calls to other portals on a live cluster (issue 27 items 1 and 6, issue 29 item 2): the front's
host credentials go to the host portals its datacenter names and nowhere else; a ``delegate``
component may name only a portal the operator allows (``--allow-delegate-url``) on a network
the outbound policy allows, refused at initialize otherwise; mutual TLS is never downgraded to
plain http; a host portal's HTTP 429, and its proxy's 502, 503 and 504 pages, are silence
under the lease, not a failure; and a portal
serving no WSDL is delegated to all the same."""

from __future__ import annotations

import contextlib
import threading
from xml.sax.saxutils import escape

import pytest
from lxml import etree

from cddlm import ns
from cddlm.client import Credentials, Portal, PortalFault
from tests.conftest import free_port
from tests.multihost.cluster import AGENT_PORT, FRONT_PASSWORD, FRONT_USER, MultiHost
from tests.rogue import Proxy, Rogue, answer, http_answer, wait_for

HERE_ON_H1 = """<component name="here" type="process">
    <attribute name="argv"><item>sleep</item><item>600</item></attribute>
    <attribute name="host">h1</attribute>
  </component>"""
INNER = ('<application xmlns="urn:cddlm:lang:components:1"><component name="w" type="process">'
         '<attribute name="argv"><item>sleep</item><item>600</item></attribute></component></application>')


def descriptor(portal: str, here: str = "") -> str:
    return """<application xmlns="urn:cddlm:lang:components:1">%s
  <component name="there" type="delegate">
    <attribute name="portal">%s</attribute>
    <attribute name="language">urn:cddlm:lang:components:1</attribute>
    <attribute name="descriptor">%s</attribute>
  </component>
</application>""" % (here, escape(portal), escape(INNER))


def front_with_credentials(live_portal, tmp_path, extra=()):
    """A front portal with host credentials ([default]), as a multi-host front has them."""
    creds = tmp_path / "agents.toml"
    creds.write_text('[default]\nuser = "%s"\npassword = "%s"\n' % (FRONT_USER, FRONT_PASSWORD))
    creds.chmod(0o600)
    return live_portal(extra=["--agent-credentials", str(creds), "--agent-lease", "3",
                              "--agent-timeout", "2"] + list(extra))


def test_a_tenants_delegate_gets_no_credentials_while_the_hosts_do(tmp_path):
    """The attack of issue 27 item 1: a delegate whose portal is a listener of the tenant's."""
    with Rogue(answer(500)) as listener, \
            MultiHost(tmp_path, n=1, front_args=["--allow-delegate-url", listener.url]) as mh:
        front = Portal(mh.front.url, failover=False)
        app = front.create()
        # its HTTP 500 page refuses the front's initialize at once, wrapped (issue 29 item 5)
        with pytest.raises(PortalFault) as refused:
            app.initialize(ns.NATIVE, text=descriptor(listener.url, HERE_ON_H1))
        assert refused.value.fault == "RemoteFault" and "HTTP 500" in str(refused.value)
        assert refused.value.detail.findtext(".//{%s}WrappedFault/{%s}httpStatus" % (ns.EXT, ns.EXT)) == "500"
        assert listener.requests
        hosted = front.create()
        hosted.initialize(ns.NATIVE, text='<application xmlns="urn:cddlm:lang:components:1">%s'
                                          '</application>' % HERE_ON_H1)
        hosted.run()
        h1 = Portal(mh.hosts[0].url, failover=False, credentials=Credentials(FRONT_USER, FRONT_PASSWORD))
        # the host portal took the front's share: the front signed in there
        assert wait_for(lambda: h1.applications() != [], 30)
    for r in listener.requests:
        assert "authorization" not in r.headers, r.headers
        env = etree.fromstring(r.body)      # and it is a proper message, addressed
        action = env.findtext("{%s}Header/{%s}Action" % (ns.SOAP11_ENV, ns.WSA))
        assert action and r.headers["soapaction"] == '"%s"' % action


def test_a_delegate_portal_the_operator_did_not_allow_is_refused_at_initialize(live_portal, tmp_path):
    with Rogue(answer(500)) as listener:
        port = listener.port
        fronts = [
            (front_with_credentials(live_portal, tmp_path), "--allow-delegate-url"),
            # allowed by a name that resolves to loopback: no network allows it
            (front_with_credentials(live_portal, tmp_path, ["--allow-delegate-url",
                                                            "http://localhost:%d/" % port]),
             "--delegate-network"),
        ]
        for front_lp, flag in fronts:
            app = Portal(front_lp.url, failover=False).create()
            with pytest.raises(PortalFault) as refused:
                app.initialize(ns.NATIVE, text=descriptor("http://localhost:%d/cddlm/portal" % port))
            assert refused.value.fault == "ResolutionFault" and flag in str(refused.value), refused.value
            assert "there/portal" in str(refused.value)
            assert app.state() == "instantiated"
        assert listener.requests == []
        # the operator allows that network too: the delegate's portal is called, without credentials
        front_lp = front_with_credentials(live_portal, tmp_path, [
            "--allow-delegate-url", "http://localhost:%d/" % port, "--delegate-network", "127.0.0.0/8"])
        with pytest.raises(PortalFault) as refused:     # its HTTP 500 page: a wrapped refusal
            Portal(front_lp.url, failover=False).create().initialize(
                ns.NATIVE, text=descriptor("http://localhost:%d/cddlm/portal" % port))
        assert refused.value.fault == "RemoteFault" and "HTTP 500" in str(refused.value)
        assert listener.requests and all("authorization" not in r.headers for r in listener.requests)


def test_mutual_tls_credentials_never_go_over_plain_http(tmp_path):
    from cddlm.app import Portal as PortalProcess
    from cddlm.config import Settings
    from cddlm.errors import ConfigurationError
    dc = tmp_path / "dc.json"
    dc.write_text('{"resources": [], "levels": ["host"], "location": [{"name": "h1", "level": "host", '
                  '"agent": "http://127.0.0.2:%d/cddlm/portal"}]}' % AGENT_PORT)
    for toml in ('[default]\nclient_cert = "front.pem"\nclient_key = "front.key"\n',
                 '[hosts."http://127.0.0.3/cddlm/portal"]\nclient_cert = "front.pem"\n'):
        (tmp_path / "agents.toml").write_text(toml)
        settings = Settings(state_dir=str(tmp_path / "state"), datacenter_file=str(dc),
                            agent_credentials_file=str(tmp_path / "agents.toml"))
        with pytest.raises(ConfigurationError) as refused:
            PortalProcess(settings)
        assert "plain http" in str(refused.value) and "client certificate" in str(refused.value)


LIMITED = http_answer(429, (
    '<soapenv:Envelope xmlns:soapenv="%s" xmlns:wsse="%s"><soapenv:Body><soapenv:Fault>'
    '<faultcode>wsse:FailedAuthentication</faultcode><faultstring>too many failed logins from '
    '127.0.0.1: try again in 60 s</faultstring></soapenv:Fault></soapenv:Body></soapenv:Envelope>'
    % (ns.SOAP11_ENV, ns.WSSE)).encode())


def test_a_host_portals_429_is_silence_under_the_lease_not_a_failure(tmp_path):
    """A host portal's limiter answering 429 (here a proxy in front of it, whose address the
    host portal gives in its EPRs) for a few seconds, within the lease: the front's
    application keeps running."""
    proxy = Proxy()
    limited = threading.Event()
    proxy.refuse = lambda request: LIMITED if limited.is_set() else None
    with running_behind(proxy, tmp_path, 10.0) as (mh, rogue, app):
        asked = len(rogue.requests)
        limited.set()
        # the front asks through the 429s (liveness, the host monitor) for 4 s
        assert wait_for(lambda: len(rogue.requests) > asked + 4, 20)
        assert not wait_for(lambda: app.state() != "running", 4, 0.2), app.ping()
        limited.clear()
        assert app.state() == "running"
        assert not [h for h in Portal(mh.front.url, failover=False).hosts() if h["down"]]
        app.terminate()
        assert app.wait_for("terminated", timeout=60) == "terminated"


@contextlib.contextmanager
def running_behind(proxy: Proxy, tmp_path, lease: float):
    """A one-host cluster whose host portal is reached through ``proxy`` (the host portal gives
    the proxy's address in its EPRs), and an application running on it: (cluster, the proxy's
    Rogue, the application)."""
    with Rogue(proxy) as rogue:
        mh = MultiHost(tmp_path, n=1, lease=lease, host_args=["--public-url", rogue.base])
        proxy.target = lambda: "http://%s:%d" % (mh.hosts[0].address, AGENT_PORT)
        with mh:
            app = Portal(mh.front.url, failover=False).create()
            app.initialize(ns.NATIVE, text="""<application xmlns="urn:cddlm:lang:components:1">
                %s</application>""" % HERE_ON_H1)
            app.run()
            assert app.wait_for("running", timeout=90) == "running", app.ping()
            yield mh, rogue, app


def test_a_host_portals_proxy_saying_not_now_is_silence_under_the_lease(tmp_path):
    """A proxy in front of a host portal answers its 503, 502 and 504 pages (HTML, no SOAP) to
    the first tries of each create, initialize, run and terminate the front sends there: within
    the lease that is silence, tried again, not a refusal that fails the component (a
    delegate's portal answering so refuses at once: the tests of issue 29 item 5)."""
    proxy = Proxy()
    pages = {}      # operation -> the pages answered to it so far
    lock = threading.Lock()

    def refuse(request):
        op = next((o for o in ("create", "initialize", "run", "terminate")
                   if b"%sRequest" % o.encode() in request.body), None)
        with lock:
            answered = pages.setdefault(op, []) if op else []
            if op is None or len(answered) >= 3:
                return None
            status = (503, 502, 504)[len(answered)]
            answered.append(status)
        return http_answer(status, b"<html><body>%d: try again later</body></html>" % status,
                           "text/html")
    proxy.refuse = refuse
    with running_behind(proxy, tmp_path, 20.0) as (mh, rogue, app):
        assert {op: pages.get(op) for op in ("create", "initialize", "run")} == \
            {op: [503, 502, 504] for op in ("create", "initialize", "run")}
        assert not [h for h in Portal(mh.front.url, failover=False).hosts() if h["down"]]
        h1 = Portal(mh.hosts[0].url, failover=False,
                    credentials=Credentials(FRONT_USER, FRONT_PASSWORD))
        assert len(h1.applications()) == 1      # created once, for all the tries
        app.terminate()
        assert app.wait_for("terminated", timeout=90) == "terminated"
        assert pages.get("terminate") == [503, 502, 504]
        assert wait_for(lambda: [a.state() for a in h1.applications()] in ([], ["terminated"]), 30)


def test_a_portal_serving_no_wsdl_is_delegated_to(live_portal, tmp_path):
    """Issue 29 item 2: the other portal answers SOAP but 404s ``?wsdl``."""
    proxy = Proxy()
    proxy.refuse = lambda r: http_answer(404, b"no", "text/plain") if r.method == "GET" else None
    with Rogue(proxy) as rogue:
        port = free_port()
        proxy.target = "http://127.0.0.1:%d" % port
        live_portal(port=port, extra=["--public-url", rogue.base])
        front_lp = front_with_credentials(live_portal, tmp_path, ["--allow-delegate-url", rogue.url])
        app = Portal(front_lp.url, failover=False).create()
        app.initialize(ns.NATIVE, text=descriptor(rogue.url))
        app.run()
        assert app.wait_for("running", timeout=60) == "running", app.ping()
        app.terminate()
        assert app.wait_for("terminated", timeout=60) == "terminated"
        assert not [r for r in rogue.requests if r.method == "GET"]

