import time

import pytest

from cddlm import xmlsafe


def test_parses_plain_xml():
    assert xmlsafe.parse(b"<a><b>1</b></a>").findtext("b") == "1"


@pytest.mark.parametrize("doc", [
    b'<!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]><a>&x;</a>',
    b'<!DOCTYPE a SYSTEM "http://example.com/a.dtd"><a/>',
    b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY a "1"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]><a>&b;</a>',
    '<!DOCTYPE a><a/>'.encode("utf-16"),
])
def test_refuses_dtds_in_any_encoding(doc):
    with pytest.raises(xmlsafe.UnsafeXml):
        xmlsafe.parse(doc)


def test_size_and_depth_limits_are_quick():
    with pytest.raises(xmlsafe.UnsafeXml):
        xmlsafe.parse(b"<a>" + b"x" * 100 + b"</a>", max_bytes=50)
    deep = b"<a>" * 5000 + b"</a>" * 5000
    started = time.process_time()
    with pytest.raises(xmlsafe.UnsafeXml):
        xmlsafe.parse(deep, max_depth=256)
    assert time.process_time() - started < 1


def test_not_well_formed_has_a_line():
    with pytest.raises(xmlsafe.UnsafeXml) as e:
        xmlsafe.parse(b"<a>\n<b>\n</a>")
    assert e.value.line


@pytest.mark.parametrize("doc,nodes,per_element,ok", [
    (b'<a x="1" y="2"><b/></a>', 4, 2, True),                      # exactly at the bounds
    (b'<a x="1" y="2"><b/></a>', 3, 2, False),
    (b'<a x="1" y="2"><b/></a>', 4, 1, False),
    # '<' and '=' in comments, CDATA, text and attribute values are no nodes
    (b'<a x="a=b&lt;c"><!-- <b c="d"/> --><![CDATA[<e f="g"/>]]>x = y</a>', 2, 1, True),
    (b"<a x = 'a>b'  y\n=\n\"2\"/>", 3, 2, True),
])
def test_nodes_are_counted_exactly_on_the_bytes(doc, nodes, per_element, ok):
    if ok:
        xmlsafe.count_nodes(doc, nodes, per_element)
        xmlsafe.parse(doc, max_nodes=nodes, max_attributes=per_element)
    else:
        with pytest.raises(xmlsafe.UnsafeXml) as e:
            xmlsafe.parse(doc, max_nodes=nodes, max_attributes=per_element)
        assert e.value.kind == "too-large"


def test_a_huge_tag_is_refused_quickly_and_without_memory():
    import resource
    tag = b"<a " + b" ".join(b'a%d=""' % i for i in range(200_000)) + b"/>"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    with pytest.raises(xmlsafe.UnsafeXml) as e:
        xmlsafe.parse(tag, max_nodes=300_000, max_attributes=256)
    assert "more than 256 attributes" in e.value.message
    assert time.process_time() - started < 0.5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 20 * 1024   # kB


def test_large_documents_take_a_slot_and_a_full_gate_is_busy():
    from cddlm.errors import Busy
    gate = xmlsafe._gate(7)                 # a configuration of its own
    for _ in range(7):
        assert gate.acquire(timeout=1)
    try:
        xmlsafe.parse(b"<a/>", large_bytes=100, large_slots=7)   # small: no slot needed
        old, xmlsafe.LARGE_WAIT = xmlsafe.LARGE_WAIT, 0.05
        try:
            with pytest.raises(Busy):
                xmlsafe.parse(b"<a>" + b" " * 200 + b"</a>", large_bytes=100, large_slots=7)
        finally:
            xmlsafe.LARGE_WAIT = old
    finally:
        for _ in range(7):
            gate.release()
