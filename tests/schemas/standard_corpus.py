"""Hand-written instance documents for the standard namespaces the portal uses.

Each case is validated against the project's own ``xsd/`` files and against the
unmodified standard files; see ``test_standard_restatement.py``. ``valid`` is the
verdict the standards give. Every root element must be a global element of one of
the standard namespaces.

The namespace declarations below are added to each root element, so the documents
use the prefixes without declaring them. ``nope:`` is deliberately never declared,
``api:`` is the portal's own namespace (no schema is loaded for it, so it counts as an
undeclared foreign namespace), and ``x:`` is an arbitrary foreign namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAMESPACES = {
    "wsa": "http://www.w3.org/2005/08/addressing",
    "wsrf-bf": "http://docs.oasis-open.org/wsrf/bf-2",
    "wsrf-r": "http://docs.oasis-open.org/wsrf/r-2",
    "wsrf-rp": "http://docs.oasis-open.org/wsrf/rp-2",
    "wsrf-rl": "http://docs.oasis-open.org/wsrf/rl-2",
    "wsnt": "http://docs.oasis-open.org/wsn/b-2",
    "wstop": "http://docs.oasis-open.org/wsn/t-1",
    "xsi": "http://www.w3.org/2001/XMLSchema-instance",
    "soapenv": "http://schemas.xmlsoap.org/soap/envelope/",
    "api": "http://www.gridforum.org/cddlm/deployapi/2005/02",
    "x": "urn:example:foreign",
}

_DECLS = " ".join('xmlns:%s="%s"' % item for item in NAMESPACES.items())

XPATH = "http://www.w3.org/TR/1999/REC-xpath-19991116"
SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"
CONCRETE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete"
FULL = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Full"
NOW = "2005-02-01T12:00:00Z"
LATER = "2005-02-02T12:00:00Z"
HOST = "http://127.0.0.1:8080/cddlm"


@dataclass(frozen=True)
class Case:
    name: str
    valid: bool
    xml: str

    @property
    def document(self) -> bytes:
        """The instance with the namespace declarations added to its root element."""
        text = self.xml.strip()
        text = re.sub(r"^(<[\w.:-]+)", r"\1 " + _DECLS, text, count=1)
        return text.encode("utf-8")


CASES: list[Case] = []


def V(name: str, xml: str) -> None:
    CASES.append(Case(name, True, xml))


def I(name: str, xml: str) -> None:  # noqa: E743 - reads as "invalid" in the table
    CASES.append(Case(name, False, xml))


def epr(tag: str, extra: str = "") -> str:
    """An EPR as the portal hands it out, under the element ``tag``."""
    return (
        f"<{tag}><wsa:Address>{HOST}/applications/v1</wsa:Address>"
        f"<wsa:ReferenceParameters><api:ResourceId>urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66"
        f"</api:ResourceId></wsa:ReferenceParameters>{extra}</{tag}>"
    )


def fault(tag: str, body: str = "") -> str:
    return f"<{tag}><wsrf-bf:Timestamp>{NOW}</wsrf-bf:Timestamp>{body}</{tag}>"


# ===================================================================== WS-Addressing

V("wsa/epr-address-only",
  f"<wsa:EndpointReference><wsa:Address>{HOST}/portal</wsa:Address></wsa:EndpointReference>")
V("wsa/epr-reference-parameters-foreign-attribute",
  f"""<wsa:EndpointReference x:flag="1">
        <wsa:Address x:a="b">{HOST}/applications/v1</wsa:Address>
        <wsa:ReferenceParameters x:c="d">
          <api:ResourceId wsa:IsReferenceParameter="true">urn:uuid:1</api:ResourceId>
        </wsa:ReferenceParameters>
      </wsa:EndpointReference>""")
V("wsa/epr-empty-reference-parameters",
  f"<wsa:EndpointReference><wsa:Address>{HOST}</wsa:Address><wsa:ReferenceParameters/>"
  "</wsa:EndpointReference>")
V("wsa/epr-metadata-and-extension",
  f"""<wsa:EndpointReference>
        <wsa:Address>{HOST}</wsa:Address>
        <wsa:ReferenceParameters><x:p/><wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime></wsa:ReferenceParameters>
        <wsa:Metadata x:m="1"><x:wsdl/></wsa:Metadata>
        <x:ext1/><x:ext2>text</x:ext2>
      </wsa:EndpointReference>""")
V("wsa/epr-anonymous-address",
  "<wsa:ReplyTo><wsa:Address>http://www.w3.org/2005/08/addressing/anonymous</wsa:Address>"
  "</wsa:ReplyTo>")
I("wsa/epr-without-address",
  "<wsa:EndpointReference><wsa:ReferenceParameters/></wsa:EndpointReference>")
I("wsa/epr-two-addresses",
  f"<wsa:EndpointReference><wsa:Address>{HOST}</wsa:Address><wsa:Address>{HOST}</wsa:Address>"
  "</wsa:EndpointReference>")
I("wsa/epr-reference-parameters-before-address",
  f"<wsa:EndpointReference><wsa:ReferenceParameters/><wsa:Address>{HOST}</wsa:Address>"
  "</wsa:EndpointReference>")
I("wsa/epr-unqualified-attribute",
  f'<wsa:EndpointReference flag="1"><wsa:Address>{HOST}</wsa:Address></wsa:EndpointReference>')
I("wsa/epr-attribute-in-wsa-namespace",
  f'<wsa:EndpointReference wsa:IsReferenceParameter="true"><wsa:Address>{HOST}</wsa:Address>'
  "</wsa:EndpointReference>")
I("wsa/epr-extension-in-wsa-namespace",
  f"<wsa:EndpointReference><wsa:Address>{HOST}</wsa:Address><wsa:Action>urn:a</wsa:Action>"
  "</wsa:EndpointReference>")
I("wsa/epr-invalid-declared-foreign-child",
  f"<wsa:EndpointReference><wsa:Address>{HOST}</wsa:Address>"
  "<wsrf-rl:CurrentTime>yesterday</wsrf-rl:CurrentTime></wsa:EndpointReference>")
I("wsa/address-with-child",
  "<wsa:To><x:a/></wsa:To>")
V("wsa/to", f"<wsa:To soapenv:mustUnderstand='1'>{HOST}/portal</wsa:To>")
V("wsa/action", "<wsa:Action>http://docs.oasis-open.org/wsrf/rpw-2/GetResourceProperty/"
  "GetResourcePropertyRequest</wsa:Action>")
V("wsa/message-id", "<wsa:MessageID>urn:uuid:0b5c5d36-1e7e-4a5b-a5c8-2b3f3a4b9d0e</wsa:MessageID>")
V("wsa/from", epr("wsa:From"))
V("wsa/fault-to", epr("wsa:FaultTo"))
V("wsa/relates-to-default", "<wsa:RelatesTo>urn:uuid:1</wsa:RelatesTo>")
V("wsa/relates-to-reply",
  "<wsa:RelatesTo RelationshipType='http://www.w3.org/2005/08/addressing/reply'>urn:uuid:1"
  "</wsa:RelatesTo>")
V("wsa/relates-to-other-relationship",
  "<wsa:RelatesTo RelationshipType='urn:example:rel' x:a='1'>urn:uuid:1</wsa:RelatesTo>")
I("wsa/relates-to-with-child", "<wsa:RelatesTo><x:a/></wsa:RelatesTo>")
I("wsa/action-unqualified-attribute", "<wsa:Action a='1'>urn:a</wsa:Action>")
V("wsa/metadata-empty", "<wsa:Metadata/>")
V("wsa/retry-after", "<wsa:RetryAfter>3000</wsa:RetryAfter>")
I("wsa/retry-after-negative", "<wsa:RetryAfter>-1</wsa:RetryAfter>")
I("wsa/retry-after-too-big", "<wsa:RetryAfter>18446744073709551616</wsa:RetryAfter>")
V("wsa/problem-header-qname", "<wsa:ProblemHeaderQName>wsa:Action</wsa:ProblemHeaderQName>")
I("wsa/problem-header-qname-undeclared-prefix",
  "<wsa:ProblemHeaderQName>nope:Action</wsa:ProblemHeaderQName>")
V("wsa/problem-header", "<wsa:ProblemHeader><wsa:Action>urn:a</wsa:Action></wsa:ProblemHeader>")
I("wsa/problem-header-empty", "<wsa:ProblemHeader/>")
I("wsa/problem-header-two-children", "<wsa:ProblemHeader><x:a/><x:b/></wsa:ProblemHeader>")
V("wsa/problem-iri", f"<wsa:ProblemIRI>{HOST}/nowhere</wsa:ProblemIRI>")
V("wsa/problem-action",
  "<wsa:ProblemAction><wsa:Action>urn:a</wsa:Action><wsa:SoapAction>urn:b</wsa:SoapAction>"
  "</wsa:ProblemAction>")
V("wsa/problem-action-empty", "<wsa:ProblemAction/>")
I("wsa/problem-action-wrong-order",
  "<wsa:ProblemAction><wsa:SoapAction>urn:b</wsa:SoapAction><wsa:Action>urn:a</wsa:Action>"
  "</wsa:ProblemAction>")
I("wsa/problem-action-extension", "<wsa:ProblemAction><x:a/></wsa:ProblemAction>")
V("wsa/epr-carrying-wsrf-rp-resource-properties-attribute",
  f'<wsa:EndpointReference wsrf-rp:ResourceProperties="api:PortalProperties">'
  f"<wsa:Address>{HOST}</wsa:Address></wsa:EndpointReference>")
I("wsa/epr-carrying-bad-wsrf-rp-resource-properties-attribute",
  f'<wsa:EndpointReference wsrf-rp:ResourceProperties="nope:PortalProperties">'
  f"<wsa:Address>{HOST}</wsa:Address></wsa:EndpointReference>")
I("wsa/epr-carrying-bad-xml-lang",
  f'<wsa:EndpointReference xml:lang="not a language"><wsa:Address>{HOST}</wsa:Address>'
  "</wsa:EndpointReference>")

# ===================================================================== WS-BaseFaults

V("bf/minimal", fault("wsrf-bf:BaseFault"))
I("bf/without-timestamp", "<wsrf-bf:BaseFault/>")
I("bf/timestamp-not-a-datetime",
  "<wsrf-bf:BaseFault><wsrf-bf:Timestamp>yesterday</wsrf-bf:Timestamp></wsrf-bf:BaseFault>")
I("bf/two-timestamps",
  fault("wsrf-bf:BaseFault", f"<wsrf-bf:Timestamp>{NOW}</wsrf-bf:Timestamp>"))
V("bf/every-part",
  f"""<wsrf-bf:BaseFault x:flag="1">
        <x:detail>leading extension</x:detail><api:reason>why</api:reason>
        <wsrf-bf:Timestamp>{NOW}</wsrf-bf:Timestamp>
        {epr("wsrf-bf:Originator")}
        <wsrf-bf:ErrorCode dialect="urn:example:codes">E42 <x:more/> text</wsrf-bf:ErrorCode>
        <wsrf-bf:Description xml:lang="en">it failed</wsrf-bf:Description>
        <wsrf-bf:Description xml:lang="de-CH">es ging nicht</wsrf-bf:Description>
        <wsrf-bf:Description>no language</wsrf-bf:Description>
        <wsrf-bf:FaultCause>{fault("wsrf-r:ResourceUnknownFault")}</wsrf-bf:FaultCause>
      </wsrf-bf:BaseFault>""")
V("bf/nested-fault-causes",
  fault("wsrf-bf:BaseFault",
        "<wsrf-bf:FaultCause>"
        + fault("wsrf-r:ResourceUnavailableFault",
                "<wsrf-bf:FaultCause>"
                + fault("wsrf-rl:ResourceNotDestroyedFault",
                        "<wsrf-bf:FaultCause><x:root-cause/></wsrf-bf:FaultCause>")
                + "</wsrf-bf:FaultCause>")
        + "</wsrf-bf:FaultCause>"))
I("bf/fault-cause-invalid-nested-fault",
  fault("wsrf-bf:BaseFault",
        "<wsrf-bf:FaultCause><wsrf-r:ResourceUnknownFault/></wsrf-bf:FaultCause>"))
I("bf/fault-cause-in-bf-namespace",
  fault("wsrf-bf:BaseFault", f"<wsrf-bf:FaultCause>{fault('wsrf-bf:BaseFault')}</wsrf-bf:FaultCause>"))
I("bf/fault-cause-empty", fault("wsrf-bf:BaseFault", "<wsrf-bf:FaultCause/>"))
I("bf/fault-cause-two-children",
  fault("wsrf-bf:BaseFault", "<wsrf-bf:FaultCause><x:a/><x:b/></wsrf-bf:FaultCause>"))
I("bf/error-code-without-dialect",
  fault("wsrf-bf:BaseFault", "<wsrf-bf:ErrorCode>E42</wsrf-bf:ErrorCode>"))
V("bf/error-code-empty",
  fault("wsrf-bf:BaseFault", "<wsrf-bf:ErrorCode dialect='urn:c'/>"))
I("bf/description-bad-language",
  fault("wsrf-bf:BaseFault", "<wsrf-bf:Description xml:lang='english please'>x</wsrf-bf:Description>"))
I("bf/description-with-child",
  fault("wsrf-bf:BaseFault", "<wsrf-bf:Description><x:b/></wsrf-bf:Description>"))
I("bf/description-foreign-attribute",
  fault("wsrf-bf:BaseFault", "<wsrf-bf:Description x:a='1'>x</wsrf-bf:Description>"))
I("bf/leading-extension-in-bf-namespace",
  f"<wsrf-bf:BaseFault><wsrf-bf:Extra/><wsrf-bf:Timestamp>{NOW}</wsrf-bf:Timestamp></wsrf-bf:BaseFault>")
I("bf/extension-after-timestamp", fault("wsrf-bf:BaseFault", "<x:late/>"))
I("bf/wrong-order",
  fault("wsrf-bf:BaseFault",
        "<wsrf-bf:Description>d</wsrf-bf:Description><wsrf-bf:ErrorCode dialect='urn:c'/>"))
I("bf/unqualified-attribute",
  f"<wsrf-bf:BaseFault code='1'><wsrf-bf:Timestamp>{NOW}</wsrf-bf:Timestamp></wsrf-bf:BaseFault>")
V("bf/xsi-type-derived-fault",
  f'<wsrf-bf:BaseFault xsi:type="wsrf-r:ResourceUnknownFaultType">'
  f"<wsrf-bf:Timestamp>{NOW}</wsrf-bf:Timestamp></wsrf-bf:BaseFault>")
I("bf/originator-xsi-type-not-derived",
  fault("wsrf-bf:BaseFault",
        f'<wsrf-bf:Originator xsi:type="wsa:AttributedURIType">{HOST}</wsrf-bf:Originator>'))

# ===================================================================== WS-Resource

V("r/resource-unknown", fault("wsrf-r:ResourceUnknownFault"))
V("r/resource-unknown-with-description",
  fault("wsrf-r:ResourceUnknownFault",
        "<wsrf-bf:Description>no application urn:uuid:1</wsrf-bf:Description>"))
V("r/resource-unavailable", fault("wsrf-r:ResourceUnavailableFault"))
I("r/resource-unknown-without-timestamp", "<wsrf-r:ResourceUnknownFault/>")
I("r/resource-unknown-trailing-child",
  fault("wsrf-r:ResourceUnknownFault", "<wsrf-r:Extra/>"))
I("r/resource-unknown-unqualified-timestamp",
  f"<wsrf-r:ResourceUnknownFault><Timestamp>{NOW}</Timestamp></wsrf-r:ResourceUnknownFault>")

# ========================================================== WS-ResourceProperties

V("rp/get-document", "<wsrf-rp:GetResourcePropertyDocument/>")
I("rp/get-document-with-child", "<wsrf-rp:GetResourcePropertyDocument><x:a/></wsrf-rp:GetResourcePropertyDocument>")
I("rp/get-document-with-text", "<wsrf-rp:GetResourcePropertyDocument>all</wsrf-rp:GetResourcePropertyDocument>")
V("rp/get-document-response-declared",
  f"""<wsrf-rp:GetResourcePropertyDocumentResponse>
        <wsrf-rl:ScheduledResourceTerminationRP>
          <wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime>
          <wsrf-rl:TerminationTime xsi:nil="true"/>
        </wsrf-rl:ScheduledResourceTerminationRP>
      </wsrf-rp:GetResourcePropertyDocumentResponse>""")
I("rp/get-document-response-undeclared-strict",
  "<wsrf-rp:GetResourcePropertyDocumentResponse><api:PortalProperties/>"
  "</wsrf-rp:GetResourcePropertyDocumentResponse>")
I("rp/get-document-response-empty", "<wsrf-rp:GetResourcePropertyDocumentResponse/>")
V("rp/get-property-qname", "<wsrf-rp:GetResourceProperty>wsrf-rl:CurrentTime</wsrf-rp:GetResourceProperty>")
V("rp/get-property-api-qname", "<wsrf-rp:GetResourceProperty> api:State </wsrf-rp:GetResourceProperty>")
V("rp/get-property-local-declaration",
  "<wsrf-rp:GetResourceProperty xmlns:s='http://www.gridforum.org/cddlm/deployapi/2005/02'>"
  "s:State</wsrf-rp:GetResourceProperty>")
I("rp/get-property-undeclared-prefix", "<wsrf-rp:GetResourceProperty>nope:State</wsrf-rp:GetResourceProperty>")
I("rp/get-property-clark-notation",
  "<wsrf-rp:GetResourceProperty>{http://www.gridforum.org/cddlm/deployapi/2005/02}State"
  "</wsrf-rp:GetResourceProperty>")
I("rp/get-property-empty", "<wsrf-rp:GetResourceProperty/>")
I("rp/get-property-with-child", "<wsrf-rp:GetResourceProperty><api:State/></wsrf-rp:GetResourceProperty>")
V("rp/get-property-response-declared",
  f"<wsrf-rp:GetResourcePropertyResponse><wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime>"
  "</wsrf-rp:GetResourcePropertyResponse>")
V("rp/get-property-response-empty", "<wsrf-rp:GetResourcePropertyResponse/>")
I("rp/get-property-response-undeclared-strict",
  "<wsrf-rp:GetResourcePropertyResponse><api:State>running</api:State></wsrf-rp:GetResourcePropertyResponse>")
I("rp/get-property-response-invalid-value",
  "<wsrf-rp:GetResourcePropertyResponse><wsrf-rl:CurrentTime>now</wsrf-rl:CurrentTime>"
  "</wsrf-rp:GetResourcePropertyResponse>")
V("rp/get-multiple",
  "<wsrf-rp:GetMultipleResourceProperties><wsrf-rp:ResourceProperty>api:State</wsrf-rp:ResourceProperty>"
  "<wsrf-rp:ResourceProperty>wsrf-rl:TerminationTime</wsrf-rp:ResourceProperty>"
  "</wsrf-rp:GetMultipleResourceProperties>")
I("rp/get-multiple-empty", "<wsrf-rp:GetMultipleResourceProperties/>")
I("rp/get-multiple-undeclared-prefix",
  "<wsrf-rp:GetMultipleResourceProperties><wsrf-rp:ResourceProperty>nope:State</wsrf-rp:ResourceProperty>"
  "</wsrf-rp:GetMultipleResourceProperties>")
I("rp/get-multiple-wrong-child",
  "<wsrf-rp:GetMultipleResourceProperties><wsrf-rp:GetResourceProperty>api:State</wsrf-rp:GetResourceProperty>"
  "</wsrf-rp:GetMultipleResourceProperties>")
V("rp/get-multiple-response",
  f"<wsrf-rp:GetMultipleResourcePropertiesResponse><wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime>"
  "<wsrf-rl:TerminationTime xsi:nil='true'/></wsrf-rp:GetMultipleResourcePropertiesResponse>")
I("rp/get-multiple-response-undeclared-strict",
  "<wsrf-rp:GetMultipleResourcePropertiesResponse><api:State>running</api:State>"
  "</wsrf-rp:GetMultipleResourcePropertiesResponse>")
V("rp/query-xpath",
  f"<wsrf-rp:QueryResourceProperties><wsrf-rp:QueryExpression Dialect='{XPATH}'>"
  "/*/api:State[. = 'running']</wsrf-rp:QueryExpression></wsrf-rp:QueryResourceProperties>")
V("rp/query-without-dialect",
  "<wsrf-rp:QueryResourceProperties><wsrf-rp:QueryExpression>//api:State</wsrf-rp:QueryExpression>"
  "</wsrf-rp:QueryResourceProperties>")
V("rp/query-element-expression",
  f"<wsrf-rp:QueryResourceProperties><wsrf-rp:QueryExpression Dialect='urn:q'><x:query/>"
  "</wsrf-rp:QueryExpression></wsrf-rp:QueryResourceProperties>")
I("rp/query-two-element-expressions",
  "<wsrf-rp:QueryResourceProperties><wsrf-rp:QueryExpression Dialect='urn:q'><x:a/><x:b/>"
  "</wsrf-rp:QueryExpression></wsrf-rp:QueryResourceProperties>")
I("rp/query-empty", "<wsrf-rp:QueryResourceProperties/>")
I("rp/query-two-expressions",
  "<wsrf-rp:QueryResourceProperties><wsrf-rp:QueryExpression>a</wsrf-rp:QueryExpression>"
  "<wsrf-rp:QueryExpression>b</wsrf-rp:QueryExpression></wsrf-rp:QueryResourceProperties>")
I("rp/query-expression-foreign-attribute",
  "<wsrf-rp:QueryResourceProperties><wsrf-rp:QueryExpression x:a='1'>a</wsrf-rp:QueryExpression>"
  "</wsrf-rp:QueryResourceProperties>")
V("rp/query-response-element",
  "<wsrf-rp:QueryResourcePropertiesResponse><api:State>running</api:State>"
  "</wsrf-rp:QueryResourcePropertiesResponse>")
V("rp/query-response-mixed",
  f"<wsrf-rp:QueryResourcePropertiesResponse>text<wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime>"
  "more</wsrf-rp:QueryResourcePropertiesResponse>")
I("rp/query-response-text-only",
  "<wsrf-rp:QueryResourcePropertiesResponse>true</wsrf-rp:QueryResourcePropertiesResponse>")
I("rp/query-response-empty", "<wsrf-rp:QueryResourcePropertiesResponse/>")
I("rp/query-response-invalid-declared-child",
  "<wsrf-rp:QueryResourcePropertiesResponse><wsrf-rl:CurrentTime>x</wsrf-rl:CurrentTime>"
  "</wsrf-rp:QueryResourcePropertiesResponse>")
V("rp/query-expression-dialect", f"<wsrf-rp:QueryExpressionDialect>{XPATH}</wsrf-rp:QueryExpressionDialect>")
V("rp/query-expression-rp-document",
  f"<wsrf-rp:QueryExpressionRPDocument><wsrf-rp:QueryExpressionDialect>{XPATH}"
  "</wsrf-rp:QueryExpressionDialect></wsrf-rp:QueryExpressionRPDocument>")
V("rp/query-expression-standalone", "<wsrf-rp:QueryExpression>boolean(/)</wsrf-rp:QueryExpression>")
for _name in ("InvalidResourcePropertyQNameFault", "UnknownQueryExpressionDialectFault",
              "InvalidQueryExpressionFault", "QueryEvaluationErrorFault"):
    V(f"rp/{_name}", fault(f"wsrf-rp:{_name}"))
    I(f"rp/{_name}-without-timestamp", f"<wsrf-rp:{_name}/>")

# write operations
V("rp/set-properties",
  f"""<wsrf-rp:SetResourceProperties>
        <wsrf-rp:Insert><api:Note>n</api:Note></wsrf-rp:Insert>
        <wsrf-rp:Update><wsrf-rl:TerminationTime>{LATER}</wsrf-rl:TerminationTime></wsrf-rp:Update>
        <wsrf-rp:Delete ResourceProperty="api:Note"/>
        <wsrf-rp:Insert><api:Other/></wsrf-rp:Insert>
      </wsrf-rp:SetResourceProperties>""")
I("rp/set-properties-empty", "<wsrf-rp:SetResourceProperties/>")
I("rp/set-properties-insert-empty",
  "<wsrf-rp:SetResourceProperties><wsrf-rp:Insert/></wsrf-rp:SetResourceProperties>")
I("rp/set-properties-delete-without-qname",
  "<wsrf-rp:SetResourceProperties><wsrf-rp:Delete/></wsrf-rp:SetResourceProperties>")
I("rp/set-properties-update-invalid-lax-child",
  "<wsrf-rp:SetResourceProperties><wsrf-rp:Update><wsrf-rl:TerminationTime>soon"
  "</wsrf-rl:TerminationTime></wsrf-rp:Update></wsrf-rp:SetResourceProperties>")
V("rp/insert-standalone", "<wsrf-rp:Insert><api:Note/><api:Note/></wsrf-rp:Insert>")
V("rp/update-standalone", "<wsrf-rp:Update><api:Note/></wsrf-rp:Update>")
I("rp/update-foreign-attribute", "<wsrf-rp:Update x:a='1'><api:Note/></wsrf-rp:Update>")
V("rp/delete-standalone", "<wsrf-rp:Delete ResourceProperty='wsrf-rl:TerminationTime'/>")
I("rp/delete-with-child", "<wsrf-rp:Delete ResourceProperty='api:Note'><api:Note/></wsrf-rp:Delete>")
I("rp/delete-undeclared-prefix", "<wsrf-rp:Delete ResourceProperty='nope:Note'/>")
V("rp/set-properties-response", "<wsrf-rp:SetResourcePropertiesResponse/>")
V("rp/insert", "<wsrf-rp:InsertResourceProperties><wsrf-rp:Insert><api:Note/></wsrf-rp:Insert>"
  "</wsrf-rp:InsertResourceProperties>")
I("rp/insert-two", "<wsrf-rp:InsertResourceProperties><wsrf-rp:Insert><api:Note/></wsrf-rp:Insert>"
  "<wsrf-rp:Insert><api:Note/></wsrf-rp:Insert></wsrf-rp:InsertResourceProperties>")
V("rp/insert-response", "<wsrf-rp:InsertResourcePropertiesResponse/>")
V("rp/update", "<wsrf-rp:UpdateResourceProperties><wsrf-rp:Update><api:Note/></wsrf-rp:Update>"
  "</wsrf-rp:UpdateResourceProperties>")
V("rp/update-response", "<wsrf-rp:UpdateResourcePropertiesResponse/>")
V("rp/delete", "<wsrf-rp:DeleteResourceProperties><wsrf-rp:Delete ResourceProperty='api:Note'/>"
  "</wsrf-rp:DeleteResourceProperties>")
I("rp/delete-insert-inside", "<wsrf-rp:DeleteResourceProperties><wsrf-rp:Insert><api:Note/></wsrf-rp:Insert>"
  "</wsrf-rp:DeleteResourceProperties>")
V("rp/delete-response", "<wsrf-rp:DeleteResourcePropertiesResponse/>")
V("rp/put-document",
  f"<wsrf-rp:PutResourcePropertyDocument><wsrf-rl:ScheduledResourceTerminationRP>"
  f"<wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime><wsrf-rl:TerminationTime>{LATER}</wsrf-rl:TerminationTime>"
  "</wsrf-rl:ScheduledResourceTerminationRP></wsrf-rp:PutResourcePropertyDocument>")
I("rp/put-document-undeclared-strict",
  "<wsrf-rp:PutResourcePropertyDocument><api:PortalProperties/></wsrf-rp:PutResourcePropertyDocument>")
V("rp/put-document-response-empty", "<wsrf-rp:PutResourcePropertyDocumentResponse/>")
for _name in ("UnableToPutResourcePropertyDocumentFault", "InvalidModificationFault",
              "UnableToModifyResourcePropertyFault", "SetResourcePropertyRequestFailedFault",
              "InsertResourcePropertiesRequestFailedFault",
              "UpdateResourcePropertiesRequestFailedFault",
              "DeleteResourcePropertiesRequestFailedFault"):
    V(f"rp/{_name}",
      fault(f"wsrf-rp:{_name}",
            "<wsrf-rp:ResourcePropertyChangeFailure Restored='true'>"
            f"<wsrf-rp:CurrentValue><wsrf-rl:TerminationTime>{NOW}</wsrf-rl:TerminationTime></wsrf-rp:CurrentValue>"
            f"<wsrf-rp:RequestedValue><wsrf-rl:TerminationTime>{LATER}</wsrf-rl:TerminationTime></wsrf-rp:RequestedValue>"
            "</wsrf-rp:ResourcePropertyChangeFailure>"))
    I(f"rp/{_name}-without-change-failure", fault(f"wsrf-rp:{_name}"))
V("rp/change-failure-empty",
  fault("wsrf-rp:InvalidModificationFault", "<wsrf-rp:ResourcePropertyChangeFailure/>"))
I("rp/change-failure-undeclared-strict-value",
  fault("wsrf-rp:InvalidModificationFault",
        "<wsrf-rp:ResourcePropertyChangeFailure><wsrf-rp:CurrentValue><api:Note/></wsrf-rp:CurrentValue>"
        "</wsrf-rp:ResourcePropertyChangeFailure>"))
I("rp/change-failure-restored-not-boolean",
  fault("wsrf-rp:InvalidModificationFault", "<wsrf-rp:ResourcePropertyChangeFailure Restored='yes'/>"))
V("rp/value-change-notification",
  f"""<wsrf-rp:ResourcePropertyValueChangeNotification>
        <wsrf-rp:OldValues xsi:nil="true"/>
        <wsrf-rp:NewValues><wsrf-rl:TerminationTime>{LATER}</wsrf-rl:TerminationTime></wsrf-rp:NewValues>
      </wsrf-rp:ResourcePropertyValueChangeNotification>""")
V("rp/value-change-notification-new-nil",
  "<wsrf-rp:ResourcePropertyValueChangeNotification><wsrf-rp:NewValues xsi:nil='true'/>"
  "</wsrf-rp:ResourcePropertyValueChangeNotification>")
I("rp/value-change-notification-without-new",
  "<wsrf-rp:ResourcePropertyValueChangeNotification><wsrf-rp:OldValues xsi:nil='true'/>"
  "</wsrf-rp:ResourcePropertyValueChangeNotification>")
I("rp/value-change-notification-new-empty",
  "<wsrf-rp:ResourcePropertyValueChangeNotification><wsrf-rp:NewValues/>"
  "</wsrf-rp:ResourcePropertyValueChangeNotification>")

# ========================================================== WS-ResourceLifetime

V("rl/current-time", f"<wsrf-rl:CurrentTime x:a='1'>{NOW}</wsrf-rl:CurrentTime>")
V("rl/current-time-offset", "<wsrf-rl:CurrentTime>2005-02-01T13:00:00.250+01:00</wsrf-rl:CurrentTime>")
I("rl/current-time-not-a-datetime", "<wsrf-rl:CurrentTime>2005-02-01</wsrf-rl:CurrentTime>")
I("rl/current-time-nil", "<wsrf-rl:CurrentTime xsi:nil='true'/>")
I("rl/current-time-unqualified-attribute", f"<wsrf-rl:CurrentTime a='1'>{NOW}</wsrf-rl:CurrentTime>")
V("rl/termination-time", f"<wsrf-rl:TerminationTime>{LATER}</wsrf-rl:TerminationTime>")
V("rl/termination-time-nil", "<wsrf-rl:TerminationTime xsi:nil='true'/>")
I("rl/termination-time-empty", "<wsrf-rl:TerminationTime/>")
I("rl/termination-time-nil-with-value",
  f"<wsrf-rl:TerminationTime xsi:nil='true'>{LATER}</wsrf-rl:TerminationTime>")
V("rl/scheduled-termination-rp",
  f"<wsrf-rl:ScheduledResourceTerminationRP><wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime>"
  f"<wsrf-rl:TerminationTime>{LATER}</wsrf-rl:TerminationTime></wsrf-rl:ScheduledResourceTerminationRP>")
I("rl/scheduled-termination-rp-swapped",
  f"<wsrf-rl:ScheduledResourceTerminationRP><wsrf-rl:TerminationTime>{LATER}</wsrf-rl:TerminationTime>"
  f"<wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime></wsrf-rl:ScheduledResourceTerminationRP>")
I("rl/scheduled-termination-rp-without-termination-time",
  f"<wsrf-rl:ScheduledResourceTerminationRP><wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime>"
  "</wsrf-rl:ScheduledResourceTerminationRP>")
V("rl/destroy", "<wsrf-rl:Destroy/>")
I("rl/destroy-with-child", "<wsrf-rl:Destroy><x:now/></wsrf-rl:Destroy>")
V("rl/destroy-response", "<wsrf-rl:DestroyResponse/>")
V("rl/set-termination-time-nil",
  "<wsrf-rl:SetTerminationTime><wsrf-rl:RequestedTerminationTime xsi:nil='true'/></wsrf-rl:SetTerminationTime>")
V("rl/set-termination-time-datetime",
  f"<wsrf-rl:SetTerminationTime><wsrf-rl:RequestedTerminationTime>{LATER}"
  "</wsrf-rl:RequestedTerminationTime></wsrf-rl:SetTerminationTime>")
V("rl/set-termination-time-duration",
  "<wsrf-rl:SetTerminationTime><wsrf-rl:RequestedLifetimeDuration>PT1H30M</wsrf-rl:RequestedLifetimeDuration>"
  "</wsrf-rl:SetTerminationTime>")
I("rl/set-termination-time-both",
  f"<wsrf-rl:SetTerminationTime><wsrf-rl:RequestedTerminationTime>{LATER}</wsrf-rl:RequestedTerminationTime>"
  "<wsrf-rl:RequestedLifetimeDuration>PT1H</wsrf-rl:RequestedLifetimeDuration></wsrf-rl:SetTerminationTime>")
I("rl/set-termination-time-empty", "<wsrf-rl:SetTerminationTime/>")
I("rl/set-termination-time-duration-in-datetime",
  "<wsrf-rl:SetTerminationTime><wsrf-rl:RequestedTerminationTime>PT1H</wsrf-rl:RequestedTerminationTime>"
  "</wsrf-rl:SetTerminationTime>")
I("rl/set-termination-time-duration-nil",
  "<wsrf-rl:SetTerminationTime><wsrf-rl:RequestedLifetimeDuration xsi:nil='true'/>"
  "</wsrf-rl:SetTerminationTime>")
I("rl/set-termination-time-bad-duration",
  "<wsrf-rl:SetTerminationTime><wsrf-rl:RequestedLifetimeDuration>1 hour</wsrf-rl:RequestedLifetimeDuration>"
  "</wsrf-rl:SetTerminationTime>")
V("rl/set-termination-time-response",
  f"<wsrf-rl:SetTerminationTimeResponse><wsrf-rl:NewTerminationTime>{LATER}</wsrf-rl:NewTerminationTime>"
  f"<wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime></wsrf-rl:SetTerminationTimeResponse>")
V("rl/set-termination-time-response-nil",
  "<wsrf-rl:SetTerminationTimeResponse><wsrf-rl:NewTerminationTime xsi:nil='true'/>"
  f"<wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime></wsrf-rl:SetTerminationTimeResponse>")
I("rl/set-termination-time-response-without-current-time",
  f"<wsrf-rl:SetTerminationTimeResponse><wsrf-rl:NewTerminationTime>{LATER}</wsrf-rl:NewTerminationTime>"
  "</wsrf-rl:SetTerminationTimeResponse>")
I("rl/set-termination-time-response-current-time-nil",
  "<wsrf-rl:SetTerminationTimeResponse><wsrf-rl:NewTerminationTime xsi:nil='true'/>"
  "<wsrf-rl:CurrentTime xsi:nil='true'/></wsrf-rl:SetTerminationTimeResponse>")
V("rl/termination-notification",
  f"<wsrf-rl:TerminationNotification><wsrf-rl:TerminationTime>{NOW}</wsrf-rl:TerminationTime>"
  "<wsrf-rl:TerminationReason x:a='1'>destroyed <api:by>user</api:by></wsrf-rl:TerminationReason>"
  "</wsrf-rl:TerminationNotification>")
V("rl/termination-notification-nil",
  "<wsrf-rl:TerminationNotification><wsrf-rl:TerminationTime xsi:nil='true'/>"
  "</wsrf-rl:TerminationNotification>")
I("rl/termination-notification-without-time",
  "<wsrf-rl:TerminationNotification><wsrf-rl:TerminationReason>r</wsrf-rl:TerminationReason>"
  "</wsrf-rl:TerminationNotification>")
for _name in ("ResourceNotDestroyedFault", "UnableToSetTerminationTimeFault",
              "TerminationTimeChangeRejectedFault"):
    V(f"rl/{_name}", fault(f"wsrf-rl:{_name}"))
    I(f"rl/{_name}-without-timestamp", f"<wsrf-rl:{_name}/>")

# ===================================================================== WS-Topics

V("t/topic-set",
  """<wstop:TopicSet x:a="1">
       <wstop:documentation>the portal's topics <x:b/></wstop:documentation>
       <api:Lifecycle wstop:topic="true"><api:Running wstop:topic="true"/></api:Lifecycle>
       <api:Other/>
     </wstop:TopicSet>""")
V("t/topic-set-empty", "<wstop:TopicSet/>")
I("t/topic-set-child-in-t-namespace", "<wstop:TopicSet><wstop:Topic name='a'/></wstop:TopicSet>")
I("t/topic-set-two-documentations",
  "<wstop:TopicSet><wstop:documentation/><wstop:documentation/></wstop:TopicSet>")
I("t/topic-set-unqualified-attribute", "<wstop:TopicSet a='1'/>")
V("t/topic-namespace",
  f"""<wstop:TopicNamespace name="cddlm" targetNamespace="{NAMESPACES['api']}" final="true">
        <wstop:documentation>d</wstop:documentation>
        <wstop:Topic name="Lifecycle" messageTypes="api:StateChange wsrf-rl:TerminationNotification">
          <wstop:MessagePattern Dialect="{XPATH}">/api:StateChange</wstop:MessagePattern>
          <wstop:Topic name="Running" final="false"/>
          <wstop:Topic name="Running"/>
        </wstop:Topic>
        <wstop:Topic name="Terminated" parent="api:Lifecycle/Sub"/>
        <x:ext/>
      </wstop:TopicNamespace>""")
V("t/topic-namespace-duplicate-grandchild-topics",
  # The standard's uniqueness constraint for child topics selects wstop:topic (lower
  # case), so duplicate names below the first level are accepted.
  "<wstop:TopicNamespace targetNamespace='urn:t'><wstop:Topic name='a'><wstop:Topic name='b'>"
  "<wstop:Topic name='c'/><wstop:Topic name='c'/></wstop:Topic></wstop:Topic></wstop:TopicNamespace>")
I("t/topic-namespace-without-target-namespace", "<wstop:TopicNamespace/>")
I("t/topic-namespace-duplicate-root-topics",
  "<wstop:TopicNamespace targetNamespace='urn:t'><wstop:Topic name='a'/><wstop:Topic name='a'/>"
  "</wstop:TopicNamespace>")
I("t/topic-namespace-topic-without-name",
  "<wstop:TopicNamespace targetNamespace='urn:t'><wstop:Topic/></wstop:TopicNamespace>")
I("t/topic-namespace-bad-parent",
  "<wstop:TopicNamespace targetNamespace='urn:t'><wstop:Topic name='a' parent='a//b'/></wstop:TopicNamespace>")
I("t/topic-namespace-parent-wildcard",
  "<wstop:TopicNamespace targetNamespace='urn:t'><wstop:Topic name='a' parent='a/*'/></wstop:TopicNamespace>")
I("t/topic-namespace-message-types-undeclared-prefix",
  "<wstop:TopicNamespace targetNamespace='urn:t'><wstop:Topic name='a' messageTypes='nope:M'/>"
  "</wstop:TopicNamespace>")
I("t/topic-namespace-message-pattern-without-dialect",
  "<wstop:TopicNamespace targetNamespace='urn:t'><wstop:Topic name='a'><wstop:MessagePattern>p"
  "</wstop:MessagePattern></wstop:Topic></wstop:TopicNamespace>")
I("t/topic-strict-undeclared-extension",
  "<wstop:TopicNamespace targetNamespace='urn:t'><wstop:Topic name='a'><x:ext/></wstop:Topic>"
  "</wstop:TopicNamespace>")
V("t/topic-declared-extension",
  f"<wstop:TopicNamespace targetNamespace='urn:t'><wstop:Topic name='a'>"
  f"<wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime></wstop:Topic></wstop:TopicNamespace>")
I("t/topic-namespace-name-not-ncname",
  "<wstop:TopicNamespace targetNamespace='urn:t' name='a:b'/>")

# ============================================================ WS-BaseNotification

_topic = f"<wsnt:TopicExpression Dialect='{SIMPLE}'>api:Lifecycle</wsnt:TopicExpression>"

V("b/subscribe-topic-datetime",
  f"""<wsnt:Subscribe>
        {epr("wsnt:ConsumerReference")}
        <wsnt:Filter>{_topic}</wsnt:Filter>
        <wsnt:InitialTerminationTime>{LATER}</wsnt:InitialTerminationTime>
      </wsnt:Subscribe>""")
V("b/subscribe-duration",
  f"""<wsnt:Subscribe>
        {epr("wsnt:ConsumerReference")}
        <wsnt:Filter>{_topic}</wsnt:Filter>
        <wsnt:InitialTerminationTime>PT10M</wsnt:InitialTerminationTime>
      </wsnt:Subscribe>""")
V("b/subscribe-nil-time",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}"
  "<wsnt:InitialTerminationTime xsi:nil='true'/></wsnt:Subscribe>")
V("b/subscribe-consumer-only", f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}</wsnt:Subscribe>")
V("b/subscribe-every-part",
  f"""<wsnt:Subscribe>
        {epr("wsnt:ConsumerReference")}
        <wsnt:Filter>
          <wsnt:TopicExpression Dialect="{FULL}" xml:lang="en">api:Lifecycle//*|api:Other</wsnt:TopicExpression>
          <wsnt:ProducerProperties Dialect="{XPATH}">boolean(/*/api:State)</wsnt:ProducerProperties>
          <wsnt:MessageContent Dialect="{XPATH}">/api:StateChange</wsnt:MessageContent>
        </wsnt:Filter>
        <wsnt:InitialTerminationTime>-P1D</wsnt:InitialTerminationTime>
        <wsnt:SubscriptionPolicy><wsnt:UseRaw/><x:policy/></wsnt:SubscriptionPolicy>
        <x:extension/>
      </wsnt:Subscribe>""")
V("b/subscribe-empty-filter",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}<wsnt:Filter/></wsnt:Subscribe>")
I("b/subscribe-without-consumer", f"<wsnt:Subscribe><wsnt:Filter>{_topic}</wsnt:Filter></wsnt:Subscribe>")
I("b/subscribe-bad-time",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}"
  "<wsnt:InitialTerminationTime>tomorrow</wsnt:InitialTerminationTime></wsnt:Subscribe>")
I("b/subscribe-date-only-time",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}"
  "<wsnt:InitialTerminationTime>2005-02-02</wsnt:InitialTerminationTime></wsnt:Subscribe>")
I("b/subscribe-filter-undeclared-child",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}<wsnt:Filter><api:MyFilter/></wsnt:Filter>"
  "</wsnt:Subscribe>")
I("b/subscribe-topic-without-dialect",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}<wsnt:Filter>"
  "<wsnt:TopicExpression>api:Lifecycle</wsnt:TopicExpression></wsnt:Filter></wsnt:Subscribe>")
I("b/subscribe-topic-undeclared-attribute",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}<wsnt:Filter>"
  f"<wsnt:TopicExpression Dialect='{SIMPLE}' x:flag='1'>api:Lifecycle</wsnt:TopicExpression>"
  "</wsnt:Filter></wsnt:Subscribe>")
V("b/subscribe-topic-declared-foreign-attribute",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}<wsnt:Filter>"
  f"<wsnt:TopicExpression Dialect='{SIMPLE}' wstop:topic='true'>api:Lifecycle</wsnt:TopicExpression>"
  "</wsnt:Filter></wsnt:Subscribe>")
I("b/subscribe-producer-properties-without-dialect",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}<wsnt:Filter>"
  "<wsnt:ProducerProperties>true()</wsnt:ProducerProperties></wsnt:Filter></wsnt:Subscribe>")
I("b/subscribe-trailing-wsnt-element",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}<wsnt:UseRaw/></wsnt:Subscribe>")
I("b/subscribe-wrong-order",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}<wsnt:InitialTerminationTime>PT1M"
  f"</wsnt:InitialTerminationTime><wsnt:Filter>{_topic}</wsnt:Filter></wsnt:Subscribe>")
I("b/subscribe-topic-two-element-children",
  f"<wsnt:Subscribe>{epr('wsnt:ConsumerReference')}<wsnt:Filter>"
  f"<wsnt:TopicExpression Dialect='urn:d'><x:a/><x:b/></wsnt:TopicExpression></wsnt:Filter></wsnt:Subscribe>")
V("b/subscribe-response",
  f"""<wsnt:SubscribeResponse>
        {epr("wsnt:SubscriptionReference")}
        <wsnt:CurrentTime>{NOW}</wsnt:CurrentTime>
        <wsnt:TerminationTime>{LATER}</wsnt:TerminationTime>
        <x:ext/>
      </wsnt:SubscribeResponse>""")
V("b/subscribe-response-nil-termination",
  f"<wsnt:SubscribeResponse>{epr('wsnt:SubscriptionReference')}"
  "<wsnt:TerminationTime xsi:nil='true'/></wsnt:SubscribeResponse>")
I("b/subscribe-response-empty", "<wsnt:SubscribeResponse/>")
I("b/subscribe-response-termination-duration",
  f"<wsnt:SubscribeResponse>{epr('wsnt:SubscriptionReference')}"
  "<wsnt:TerminationTime>PT1H</wsnt:TerminationTime></wsnt:SubscribeResponse>")

_message = (
    f"<wsnt:NotificationMessage>{epr('wsnt:SubscriptionReference')}"
    f"<wsnt:Topic Dialect='{CONCRETE}'>api:Lifecycle/Running</wsnt:Topic>"
    f"{epr('wsnt:ProducerReference')}"
    "<wsnt:Message><api:StateChange><api:state>running</api:state></api:StateChange></wsnt:Message>"
    "</wsnt:NotificationMessage>"
)
V("b/notify", f"<wsnt:Notify>{_message}</wsnt:Notify>")
V("b/notify-several-and-extension",
  f"<wsnt:Notify>{_message}<wsnt:NotificationMessage><wsnt:Message><x:raw/></wsnt:Message>"
  f"</wsnt:NotificationMessage><x:ext/></wsnt:Notify>")
V("b/notify-standard-payload",
  "<wsnt:Notify><wsnt:NotificationMessage><wsnt:Message><wsrf-rl:TerminationNotification>"
  f"<wsrf-rl:TerminationTime>{NOW}</wsrf-rl:TerminationTime></wsrf-rl:TerminationNotification>"
  "</wsnt:Message></wsnt:NotificationMessage></wsnt:Notify>")
I("b/notify-invalid-standard-payload",
  "<wsnt:Notify><wsnt:NotificationMessage><wsnt:Message><wsrf-rl:TerminationNotification/>"
  "</wsnt:Message></wsnt:NotificationMessage></wsnt:Notify>")
I("b/notify-empty", "<wsnt:Notify/>")
I("b/notify-without-message",
  f"<wsnt:Notify><wsnt:NotificationMessage>{epr('wsnt:SubscriptionReference')}"
  "</wsnt:NotificationMessage></wsnt:Notify>")
I("b/notify-message-empty",
  "<wsnt:Notify><wsnt:NotificationMessage><wsnt:Message/></wsnt:NotificationMessage></wsnt:Notify>")
I("b/notify-message-two-payloads",
  "<wsnt:Notify><wsnt:NotificationMessage><wsnt:Message><x:a/><x:b/></wsnt:Message>"
  "</wsnt:NotificationMessage></wsnt:Notify>")
I("b/notify-message-text-payload",
  "<wsnt:Notify><wsnt:NotificationMessage><wsnt:Message>text</wsnt:Message>"
  "</wsnt:NotificationMessage></wsnt:Notify>")
I("b/notify-topic-before-subscription",
  f"<wsnt:Notify><wsnt:NotificationMessage><wsnt:Topic Dialect='{SIMPLE}'>api:L</wsnt:Topic>"
  f"{epr('wsnt:SubscriptionReference')}<wsnt:Message><x:a/></wsnt:Message>"
  "</wsnt:NotificationMessage></wsnt:Notify>")
I("b/notify-extension-before-message",
  f"<wsnt:Notify><x:ext/>{_message}</wsnt:Notify>")
V("b/notification-message-standalone",
  "<wsnt:NotificationMessage><wsnt:Message><x:a/></wsnt:Message></wsnt:NotificationMessage>")
V("b/renew-datetime",
  f"<wsnt:Renew><wsnt:TerminationTime>{LATER}</wsnt:TerminationTime></wsnt:Renew>")
V("b/renew-duration",
  "<wsnt:Renew><wsnt:TerminationTime>P1DT2H</wsnt:TerminationTime><x:ext/></wsnt:Renew>")
V("b/renew-nil", "<wsnt:Renew><wsnt:TerminationTime xsi:nil='true'/></wsnt:Renew>")
I("b/renew-empty", "<wsnt:Renew/>")
I("b/renew-bad-time", "<wsnt:Renew><wsnt:TerminationTime>forever</wsnt:TerminationTime></wsnt:Renew>")
V("b/renew-response",
  f"<wsnt:RenewResponse><wsnt:TerminationTime>{LATER}</wsnt:TerminationTime>"
  f"<wsnt:CurrentTime>{NOW}</wsnt:CurrentTime></wsnt:RenewResponse>")
V("b/renew-response-nil", "<wsnt:RenewResponse><wsnt:TerminationTime xsi:nil='true'/></wsnt:RenewResponse>")
I("b/renew-response-without-termination",
  f"<wsnt:RenewResponse><wsnt:CurrentTime>{NOW}</wsnt:CurrentTime></wsnt:RenewResponse>")
I("b/renew-response-duration",
  "<wsnt:RenewResponse><wsnt:TerminationTime>PT1H</wsnt:TerminationTime></wsnt:RenewResponse>")
for _name in ("Unsubscribe", "PauseSubscription", "ResumeSubscription",
              "UnsubscribeResponse", "PauseSubscriptionResponse", "ResumeSubscriptionResponse",
              "DestroyPullPoint", "DestroyPullPointResponse", "CreatePullPoint"):
    V(f"b/{_name}", f"<wsnt:{_name}/>")
    V(f"b/{_name}-extension", f"<wsnt:{_name}><x:ext/><x:more>m</x:more></wsnt:{_name}>")
    I(f"b/{_name}-wsnt-child", f"<wsnt:{_name}><wsnt:UseRaw/></wsnt:{_name}>")
    I(f"b/{_name}-unqualified-child", f"<wsnt:{_name}><ext/></wsnt:{_name}>")
    I(f"b/{_name}-text", f"<wsnt:{_name}>now</wsnt:{_name}>")
V("b/get-current-message",
  f"<wsnt:GetCurrentMessage><wsnt:Topic Dialect='{SIMPLE}'>api:Lifecycle</wsnt:Topic></wsnt:GetCurrentMessage>")
I("b/get-current-message-without-topic", "<wsnt:GetCurrentMessage/>")
I("b/get-current-message-topic-expression",
  f"<wsnt:GetCurrentMessage>{_topic}</wsnt:GetCurrentMessage>")
V("b/get-current-message-response",
  "<wsnt:GetCurrentMessageResponse><api:StateChange/></wsnt:GetCurrentMessageResponse>")
V("b/get-current-message-response-empty", "<wsnt:GetCurrentMessageResponse/>")
I("b/get-current-message-response-wsnt-payload",
  f"<wsnt:GetCurrentMessageResponse><wsnt:Notify>{_message}</wsnt:Notify></wsnt:GetCurrentMessageResponse>")
V("b/notification-producer-rp",
  f"""<wsnt:NotificationProducerRP>
        {_topic}{_topic}
        <wsnt:FixedTopicSet>true</wsnt:FixedTopicSet>
        <wsnt:TopicExpressionDialect>{SIMPLE}</wsnt:TopicExpressionDialect>
        <wsnt:TopicExpressionDialect>{CONCRETE}</wsnt:TopicExpressionDialect>
        <wstop:TopicSet><api:Lifecycle wstop:topic="true"/></wstop:TopicSet>
      </wsnt:NotificationProducerRP>""")
V("b/notification-producer-rp-empty", "<wsnt:NotificationProducerRP/>")
I("b/notification-producer-rp-wrong-order",
  f"<wsnt:NotificationProducerRP><wsnt:FixedTopicSet>true</wsnt:FixedTopicSet>{_topic}"
  "</wsnt:NotificationProducerRP>")
I("b/fixed-topic-set-not-boolean", "<wsnt:FixedTopicSet>maybe</wsnt:FixedTopicSet>")
V("b/fixed-topic-set-default", "<wsnt:FixedTopicSet/>")
V("b/topic-expression-dialect", f"<wsnt:TopicExpressionDialect>{FULL}</wsnt:TopicExpressionDialect>")
V("b/subscription-manager-rp",
  f"""<wsnt:SubscriptionManagerRP>
        {epr("wsnt:ConsumerReference")}
        <wsnt:Filter>{_topic}</wsnt:Filter>
        <wsnt:SubscriptionPolicy><x:p/></wsnt:SubscriptionPolicy>
        <wsnt:CreationTime>{NOW}</wsnt:CreationTime>
      </wsnt:SubscriptionManagerRP>""")
I("b/subscription-manager-rp-without-consumer",
  f"<wsnt:SubscriptionManagerRP><wsnt:CreationTime>{NOW}</wsnt:CreationTime></wsnt:SubscriptionManagerRP>")
V("b/consumer-reference", epr("wsnt:ConsumerReference"))
V("b/producer-reference", epr("wsnt:ProducerReference"))
V("b/filter", f"<wsnt:Filter>{_topic}</wsnt:Filter>")
V("b/topic-expression", _topic)
V("b/subscription-reference", epr("wsnt:SubscriptionReference"))
V("b/subscription-policy", "<wsnt:SubscriptionPolicy><wsnt:UseRaw/><x:p/></wsnt:SubscriptionPolicy>")
V("b/subscription-policy-empty", "<wsnt:SubscriptionPolicy/>")
I("b/subscription-policy-invalid-declared-child",
  "<wsnt:SubscriptionPolicy><wsnt:UseRaw>raw</wsnt:UseRaw></wsnt:SubscriptionPolicy>")
V("b/filter-declared-foreign", f"<wsnt:Filter><wsrf-rl:CurrentTime>{NOW}</wsrf-rl:CurrentTime></wsnt:Filter>")
V("b/creation-time", f"<wsnt:CreationTime>{NOW}</wsnt:CreationTime>")
V("b/current-time", f"<wsnt:CurrentTime>{NOW}</wsnt:CurrentTime>")
I("b/current-time-foreign-attribute", f"<wsnt:CurrentTime x:a='1'>{NOW}</wsnt:CurrentTime>")
V("b/termination-time-nil", "<wsnt:TerminationTime xsi:nil='true'/>")
V("b/use-raw", "<wsnt:UseRaw/>")
I("b/use-raw-with-text", "<wsnt:UseRaw>yes</wsnt:UseRaw>")
V("b/topic", f"<wsnt:Topic Dialect='{SIMPLE}'>api:Lifecycle</wsnt:Topic>")
V("b/message-content", f"<wsnt:MessageContent Dialect='{XPATH}'>true()</wsnt:MessageContent>")
V("b/producer-properties-element",
  f"<wsnt:ProducerProperties Dialect='urn:q'><x:q/></wsnt:ProducerProperties>")
I("b/message-content-foreign-attribute",
  f"<wsnt:MessageContent Dialect='{XPATH}' wstop:topic='true'>true()</wsnt:MessageContent>")

# pull points
V("b/create-pull-point-declared-attribute", "<wsnt:CreatePullPoint wsa:IsReferenceParameter='true'/>")
I("b/create-pull-point-undeclared-attribute", "<wsnt:CreatePullPoint x:a='1'/>")
I("b/create-pull-point-unqualified-attribute", "<wsnt:CreatePullPoint a='1'/>")
V("b/create-pull-point-response",
  f"<wsnt:CreatePullPointResponse>{epr('wsnt:PullPoint')}<x:ext/></wsnt:CreatePullPointResponse>")
I("b/create-pull-point-response-empty", "<wsnt:CreatePullPointResponse/>")
V("b/get-messages", "<wsnt:GetMessages><wsnt:MaximumNumber>10</wsnt:MaximumNumber></wsnt:GetMessages>")
V("b/get-messages-empty", "<wsnt:GetMessages/>")
I("b/get-messages-negative", "<wsnt:GetMessages><wsnt:MaximumNumber>-1</wsnt:MaximumNumber></wsnt:GetMessages>")
I("b/get-messages-undeclared-attribute", "<wsnt:GetMessages x:a='1'/>")
V("b/get-messages-response", f"<wsnt:GetMessagesResponse>{_message}{_message}</wsnt:GetMessagesResponse>")
V("b/get-messages-response-empty", "<wsnt:GetMessagesResponse/>")

# faults
for _name in ("SubscribeCreationFailedFault", "TopicExpressionDialectUnknownFault",
              "InvalidTopicExpressionFault", "TopicNotSupportedFault",
              "MultipleTopicsSpecifiedFault", "InvalidProducerPropertiesExpressionFault",
              "InvalidMessageContentExpressionFault", "NotifyMessageNotSupportedFault",
              "NoCurrentMessageOnTopicFault", "UnableToDestroySubscriptionFault",
              "PauseFailedFault", "ResumeFailedFault", "UnableToCreatePullPointFault",
              "UnableToGetMessagesFault", "UnableToDestroyPullPointFault",
              "UnrecognizedPolicyRequestFault", "UnsupportedPolicyRequestFault"):
    V(f"b/{_name}", fault(f"wsnt:{_name}"))
    I(f"b/{_name}-without-timestamp", f"<wsnt:{_name}/>")
    I(f"b/{_name}-trailing-child", fault(f"wsnt:{_name}", "<x:late/>"))
V("b/InvalidFilterFault",
  fault("wsnt:InvalidFilterFault",
        "<wsnt:UnknownFilter>api:MyFilter</wsnt:UnknownFilter><wsnt:UnknownFilter>x:F</wsnt:UnknownFilter>"))
I("b/InvalidFilterFault-without-unknown-filter", fault("wsnt:InvalidFilterFault"))
I("b/InvalidFilterFault-undeclared-prefix",
  fault("wsnt:InvalidFilterFault", "<wsnt:UnknownFilter>nope:F</wsnt:UnknownFilter>"))
V("b/UnrecognizedPolicyRequestFault-with-policies",
  fault("wsnt:UnrecognizedPolicyRequestFault",
        "<wsnt:UnrecognizedPolicy>x:p</wsnt:UnrecognizedPolicy><wsnt:UnrecognizedPolicy>api:q"
        "</wsnt:UnrecognizedPolicy>"))
V("b/UnsupportedPolicyRequestFault-with-policy",
  fault("wsnt:UnsupportedPolicyRequestFault", "<wsnt:UnsupportedPolicy>wsnt:UseRaw</wsnt:UnsupportedPolicy>"))
I("b/UnsupportedPolicyRequestFault-wrong-child",
  fault("wsnt:UnsupportedPolicyRequestFault", "<wsnt:UnrecognizedPolicy>x:p</wsnt:UnrecognizedPolicy>"))
for _name in ("UnacceptableInitialTerminationTimeFault", "UnacceptableTerminationTimeFault"):
    V(f"b/{_name}", fault(f"wsnt:{_name}", f"<wsnt:MinimumTime>{NOW}</wsnt:MinimumTime>"))
    V(f"b/{_name}-with-maximum",
      fault(f"wsnt:{_name}",
            f"<wsnt:MinimumTime>{NOW}</wsnt:MinimumTime><wsnt:MaximumTime>{LATER}</wsnt:MaximumTime>"))
    I(f"b/{_name}-without-minimum", fault(f"wsnt:{_name}"))
    I(f"b/{_name}-maximum-only", fault(f"wsnt:{_name}", f"<wsnt:MaximumTime>{LATER}</wsnt:MaximumTime>"))
    I(f"b/{_name}-duration", fault(f"wsnt:{_name}", "<wsnt:MinimumTime>PT1H</wsnt:MinimumTime>"))
V("b/fault-with-every-base-part",
  f"""<wsnt:SubscribeCreationFailedFault x:a="1">
        <x:why/>
        <wsrf-bf:Timestamp>{NOW}</wsrf-bf:Timestamp>
        {epr("wsrf-bf:Originator")}
        <wsrf-bf:ErrorCode dialect="urn:c">1</wsrf-bf:ErrorCode>
        <wsrf-bf:Description xml:lang="en">no</wsrf-bf:Description>
        <wsrf-bf:FaultCause>{fault("wsnt:TopicNotSupportedFault")}</wsrf-bf:FaultCause>
      </wsnt:SubscribeCreationFailedFault>""")


def _check_unique() -> None:
    names = [case.name for case in CASES]
    duplicates = {name for name in names if names.count(name) > 1}
    if duplicates:
        raise AssertionError(f"duplicate case names: {sorted(duplicates)}")


_check_unique()

# Strings for the topic-expression simple types of WS-Topics, whose patterns we wrote
# ourselves; the test compares ours and the standard's verdict on each one.
TOPIC_EXPRESSION_SAMPLES = [
    "a", "api:a", "a/b", "api:a/b", "api:a/api:b", "api:a/b/c/d", "a/*", "a//b", "//a", "api://a",
    "*", "api:*", "a/.", "a/./b", "a|b", "api:a/b|api:c//*", "a|", "|a", "a||b", "a/", "/a", "a///b",
    "a:b:c", "1a", "a b", " a/b ", "a/ b", "a/b:*", "a/*:b", ".", "a/..", "a.b/c-d/_e", "é/ü",
    "api:a//.", "a|//b/*", "", "a/b|c/d|e", "a:", ":a", "a/:b",
]
