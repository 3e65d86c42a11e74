"""xsd/api.xsd types as the spec gives them (issue 12): stateInfo admits any content, a
failure's terminationInfo holds a BaseFault-derived fault, started is nillable."""

from __future__ import annotations

from lxml import etree

from tests.schemas import ours

API = 'xmlns:api="http://www.gridforum.org/cddlm/deployapi/2005/02"'
BF = 'xmlns:wsrf-bf="http://docs.oasis-open.org/wsrf/bf-2"'


def valid(text: str) -> bool:
    return ours().is_valid(etree.fromstring(text))


def test_state_info_admits_text_elements_and_both():
    assert valid('<api:stateInfo %s>2 starting</api:stateInfo>' % API)
    assert valid('<api:stateInfo %s><x:detail xmlns:x="urn:x" x:n="1">deep</x:detail></api:stateInfo>' % API)
    assert valid('<api:stateInfo %s>mixed <x:a xmlns:x="urn:x"/> content</api:stateInfo>' % API)


def test_termination_info_fault_must_be_a_declared_fault():
    fault = ('<api:terminationInfo %s %s><api:normal>false</api:normal><api:fault>%%s</api:fault>'
             '</api:terminationInfo>' % (API, BF))
    assert valid(fault % '<api:DeploymentFault><wsrf-bf:Timestamp>2020-01-01T00:00:00Z'
                         '</wsrf-bf:Timestamp></api:DeploymentFault>')
    assert not valid(fault % '<api:DeploymentFault/>')          # a BaseFault needs its Timestamp
    assert not valid(fault % '<x:whatever xmlns:x="urn:x"/>')   # strict: a declared element


def test_started_is_nillable_and_terminated_is_not():
    nil = 'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:nil="true"'
    assert valid('<api:started %s %s/>' % (API, nil))
    assert not valid('<api:terminated %s %s/>' % (API, nil))
