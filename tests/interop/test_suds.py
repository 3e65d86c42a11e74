"""suds (PyPI ``suds-community``, in the test extra) drives a live portal from its served WSDL,
in this process. Two workarounds, both suds's (docs/api.md, "Other SOAP stacks"): a plugin
declares the ``api`` prefix that the QName text of GetResourceProperty uses, and the client is
made with ``prettyxml=True``, since suds's compact serializer drops the children of an element
passed as a literal (the descriptor's body)."""

from __future__ import annotations

import time

import pytest

from tests.interop import DESCRIPTOR, check_session

suds_client = pytest.importorskip("suds.client", reason="suds (suds-community) is not installed: "
                                  "pip install -e '.[test]'")
from suds import WebFault  # noqa: E402
from suds.plugin import MessagePlugin  # noqa: E402
from suds.sax.element import Element  # noqa: E402
from suds.sax.parser import Parser  # noqa: E402

API = "http://www.gridforum.org/cddlm/deployapi/2005/02"
NATIVE = "urn:cddlm:lang:components:1"


class ApiPrefix(MessagePlugin):
    """suds writes the QName ``api:state`` as text: declare its prefix on the envelope."""

    def marshalled(self, context):
        context.envelope.addPrefix("api", API)


def application(wsdl: str, created):
    """A client of the application port at the EPR's address, its ResourceId as a header."""
    rid = Element("ResourceId", ns=("api", API))
    rid.setText(created.ResourceId)
    return suds_client.Client(wsdl, cache=None, service="ApplicationService", port="ApplicationPort",
                              location=str(created.applicationReference.Address), soapheaders=rid,
                              plugins=[ApiPrefix()], prettyxml=True).service


def initialize(app, xml: str) -> None:
    descriptor = Element("descriptor", ns=("api", API))
    descriptor.set("language", NATIVE)
    descriptor.append(Element("body", ns=("api", API)).append(Parser().parse(string=xml.encode()).root()))
    app.initialize(descriptor=descriptor)


def session(url: str, name: str):
    """The same session as client.js and client.php, printing the same lines."""
    wsdl = url + "?wsdl"
    portal = suds_client.Client(wsdl, cache=None).service
    created = portal.create(name=name)
    yield "created %s %s" % (created.ResourceId, created.applicationReference.Address)
    app = application(wsdl, created)

    def state() -> str:
        # the property's element, by wsrf-rp's lax wildcard: suds gives a list of its values
        return str(app.GetResourceProperty("api:state")[0])

    def wait_for(want: str) -> str:
        deadline = time.monotonic() + 60
        while (now := state()) not in (want, "failed") and time.monotonic() < deadline:
            time.sleep(0.1)
        return "state " + now

    initialize(app, DESCRIPTOR)
    yield wait_for("initialized")
    app.run()
    yield wait_for("running")
    yield "resolved %s" % app.resolve(path="nap/state").value
    app.terminate(reason="suds is done")
    yield wait_for("terminated")
    app.destroy()
    yield "destroyed"
    bad = application(wsdl, portal.create(name=name + "-bad"))
    try:
        initialize(bad, '<application xmlns="%s"><component name="x" type="no-such-type"/>'
                        '</application>' % NATIVE)
        yield "fault none"
    except WebFault as e:
        detail = [k for k, _ in e.fault.detail if not k.startswith("_")]
        yield "fault %s %s" % (detail[0], e.fault.faultstring)


def test_a_suds_client_runs_a_session(live_portal):
    url = live_portal().url
    check_session(list(session(url, "suds-app")), url, "suds-app")
