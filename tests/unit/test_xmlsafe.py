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
