"""The hand-written WSDL and schemas load in zeep and in xmlschema, from files and over HTTP."""

from __future__ import annotations

from pathlib import Path

import xmlschema
import zeep
from lxml import etree
from xmlschema.extras.wsdl import Wsdl11Document

from cddlm import ns

ROOT = Path(__file__).resolve().parents[1]
WSDL = ROOT / "wsdl" / "cddlm.wsdl"


def served_copy(tmp_path: Path) -> Path:
    """wsdl/ and xsd/ side by side, as the portal serves them under /cddlm/wsdl/."""
    for folder in ("wsdl", "xsd"):
        for f in (ROOT / folder).iterdir():
            (tmp_path / f.name).write_bytes(f.read_bytes())
    return tmp_path / "cddlm.wsdl"


def test_zeep_loads_it_with_every_operation(tmp_path):
    client = zeep.Client(str(served_copy(tmp_path)))
    portal = client.bind("PortalService", "PortalPort")
    for op in ("create", "lookup", "rebind", "GetResourceProperty", "QueryResourceProperties",
               "Subscribe", "GetCurrentMessage", "DestroyPortal", "SetTerminationTime"):
        assert hasattr(portal, op)
    app = client.bind("ApplicationService", "ApplicationPort")
    for op in ("initialize", "run", "ping", "resolve", "terminate", "destroy", "DestroyView",
               "SetTerminationTime", "scheduleTermination", "GetResourcePropertyDocument",
               "Subscribe", "GetCurrentMessage"):
        assert hasattr(app, op)
    manager = client.bind("SubscriptionManagerService", "SubscriptionManagerPort")
    for op in ("Renew", "Unsubscribe", "PauseSubscription", "ResumeSubscription", "DestroySubscription",
               "GetResourceProperty", "GetResourcePropertyDocument", "QueryResourceProperties"):
        assert hasattr(manager, op)


def test_xmlschema_loads_the_wsdl_and_the_api_schema(tmp_path):
    doc = Wsdl11Document(str(served_copy(tmp_path)), allow="sandbox")
    assert "{%s}Portal" % ns.API_WSDL in doc.port_types
    assert "{%s}ApplicationBinding" % ns.API_WSDL in doc.bindings
    assert "{%s}SubscriptionManagerBinding" % ns.API_WSDL in doc.bindings
    schema = xmlschema.XMLSchema10(str(ROOT / "xsd" / "api.xsd"), allow="sandbox")
    for name in ("createRequest", "initializeRequest", "lifecycleEvent", "WrongStateFault",
                 "applicationProperties", "portalProperties", "subscriptionProperties",
                 "applicationCreatedEvent"):
        assert name in schema.elements
    # the extensions are in their own namespace (spec 4.5.1), none in the spec's
    for name in ("subscriptionStatus", "queryResult", "QuotaExceededFault"):
        assert name not in schema.elements


def test_no_two_operations_of_a_port_type_differ_only_in_case():
    """Generated clients lower-case the first letter (JAX-WS) or ignore case (.NET, VB):
    destroy and wsrf-rl:Destroy on one port type became one method."""
    from lxml import etree
    W = "http://schemas.xmlsoap.org/wsdl/"
    for port_type in etree.parse(str(WSDL)).iterfind("{%s}portType" % W):
        names = [op.get("name").lower() for op in port_type.iterfind("{%s}operation" % W)]
        assert len(names) == len(set(names)), (port_type.get("name"), names)


def test_every_operation_has_an_action_and_a_binding():
    from lxml import etree
    doc = etree.parse(str(WSDL))
    W = "http://schemas.xmlsoap.org/wsdl/"
    port_ops = {op.get("name") for op in doc.iterfind(".//{%s}portType/{%s}operation" % (W, W))}
    bound = {op.get("name") for op in doc.iterfind(".//{%s}binding/{%s}operation" % (W, W))}
    assert port_ops == bound
    for io in doc.iterfind(".//{%s}portType/{%s}operation/*" % (W, W)):
        assert io.get("{%s}Action" % ns.WSAM), etree.tostring(io)


def test_python_m_zeep_prints_the_served_wsdl(live_portal):
    """``python -m zeep URL?wsdl``, the usual first look at a WSDL, prints every type and
    operation; it used to crash on wsrf-bf:ErrorCode (a mixed extension of xs:anyType)."""
    import subprocess
    import sys
    lp = live_portal()
    done = subprocess.run([sys.executable, "-m", "zeep", lp.url + "?wsdl"], capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    text = done.stdout.decode()
    fault = next(line for line in text.splitlines() if ":NotUnderstoodFault(" in line)
    assert "ErrorCode: {_value_1: ANY[], dialect: xsd:anyURI" in fault
    assert "create(name: " in text and "Renew(TerminationTime" in text


def test_initialize_declares_the_remote_fault_it_relays():
    """A delegate's refusal is an api:RemoteFault at initialize: the WSDL says so, on the
    portType and the binding (issue 29, item 10)."""
    doc = etree.parse(str(ROOT / "wsdl" / "cddlm.wsdl"))
    w = {"wsdl": "http://schemas.xmlsoap.org/wsdl/"}
    (message,) = doc.xpath("//wsdl:message[wsdl:part/@element='api:RemoteFault']", namespaces=w)
    for where in ("portType", "binding"):
        found = doc.xpath("//wsdl:%s/wsdl:operation[@name='initialize']/wsdl:fault[@name='RemoteFault']"
                          % where, namespaces=w)
        assert len(found) == 1, where
    assert doc.xpath("//wsdl:portType/wsdl:operation[@name='initialize']/wsdl:fault"
                     "[@name='RemoteFault']/@message", namespaces=w) == ["tns:" + message.get("name")]


def test_operations_of_different_meaning_differ_in_name_beyond_case():
    """PHP's SoapClient merges every port's operations under case-insensitive names, and JAX-WS
    lower-cases the first letter: two operations whose names differ only in case must be the
    same message (GetResourceProperty on each port), or one hides the other (a wsrf-rl
    ``Destroy`` once took the place of ``destroy`` in PHP, ending a view instead of the
    application)."""
    wsdl = etree.parse(str(WSDL))
    w = "{http://schemas.xmlsoap.org/wsdl/}"
    seen: dict[str, tuple[str, str]] = {}
    for port_type in wsdl.getroot().iter(w + "portType"):
        for op in port_type.iter(w + "operation"):
            name, message = op.get("name"), op.find(w + "input").get("message")
            first = seen.setdefault(name.lower(), (name, message))
            assert first[1] == message, "%s and %s (%s) differ only in case" % (
                first[0], name, port_type.get("name"))
