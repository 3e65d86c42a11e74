"""Validators for what the portal sends: against the project's ``xsd/`` and, where the
workspace has them, against the unmodified standard schemas in ``../shared/standards``."""

from __future__ import annotations

import functools
from pathlib import Path

import xmlschema
from lxml import etree

from cddlm import ns

XSD = Path(__file__).resolve().parents[1] / "xsd"
STANDARD_FILES = ("ws-addr.xsd", "bf-2.xsd", "r-2.xsd", "rp-2.xsd", "rl-2.xsd", "t-1.xsd", "b-2.xsd")
OURS = ("api.xsd", "ext.xsd", "rp-draft.xsd")


@functools.lru_cache(maxsize=None)
def ours() -> xmlschema.XMLSchema10:
    return xmlschema.XMLSchema10([str(XSD / f) for f in STANDARD_FILES + OURS],
                                 allow="local")


@functools.lru_cache(maxsize=None)
def standard(shared: Path) -> xmlschema.XMLSchema10:
    """The OASIS/W3C files first, so api.xsd's imports of those namespaces are not reloaded."""
    files = [str(shared / "standards" / f) for f in STANDARD_FILES] + [str(XSD / f) for f in OURS]
    return xmlschema.XMLSchema10(files, allow="local")


def validate_envelope(data: bytes, shared: Path | None) -> list[str]:
    """Problems with a response envelope: its body content and WS-A headers must validate."""
    doc = etree.fromstring(data)
    targets = []
    body = doc.find("{%s}Body" % ns.SOAP11_ENV)
    for child in body:
        if child.tag == "{%s}Fault" % ns.SOAP11_ENV:
            detail = child.find("detail")
            if detail is not None:
                targets.extend(d for d in detail if isinstance(d.tag, str))
        else:
            targets.append(child)
    header = doc.find("{%s}Header" % ns.SOAP11_ENV)
    if header is not None:
        targets.extend(h for h in header if etree.QName(h).namespace == ns.WSA)
    problems = []
    schemas = [("xsd/", ours())] + ([("standards", standard(shared))] if shared else [])
    for el in targets:
        for label, schema in schemas:
            errors = list(schema.iter_errors(etree.fromstring(etree.tostring(el))))
            if errors:
                problems.append("%s does not validate against %s: %s"
                                % (etree.QName(el).localname, label, errors[0].reason))
    return problems
