"""The 2005/02 wire format's own request (issue 29, item 9): the SmartFrog conformance
corpus's ``getResourceProperties.xml`` (a GetResourceProperty in the 2004/06 draft
WS-ResourceProperties namespace, WS-Addressing 2003/03, read in place from ../shared) reaches
the operation: it asks the portal for ``wsdm:ResourceId``, a property the portal does not have,
and so gets WS-RP's InvalidResourcePropertyQNameFault, not "not an operation"."""

from __future__ import annotations

from lxml import etree

from cddlm import ns
from tests.conftest import WsgiClient, require_shared, shared_dir
from tests.schemas import validate_envelope

REQUEST = ("conformance/smartfrog-cdl/components/deployapi/test/org/smartfrog/services/deployapi/"
           "test/system/alpine/deployapi/files/getResourceProperties.xml")


def test_the_corpus_get_resource_property_reaches_the_operation(portal):
    request = require_shared(REQUEST)
    data = request.read_bytes()
    status, answer = WsgiClient(portal.wsgi).post("/cddlm/portal", data)
    assert status == 500, answer
    fault = etree.fromstring(answer).find(".//{%s}Fault" % ns.SOAP11_ENV)
    (detail,) = fault.find("detail")
    assert detail.tag == "{%s}InvalidResourcePropertyQNameFault" % ns.WSRF_RP, answer
    assert "ResourceId" in fault.findtext("faultstring") and b"not an operation" not in answer
    assert validate_envelope(answer, shared_dir()) == []
