"""Every namespace URI the portal uses, written once.

The prefixes are the conventional ones of CONTRACT.md section 1; ``NSMAP`` is the map
used wherever the portal writes XML, so every message declares the same prefixes.
"""

API = "http://www.gridforum.org/cddlm/deployapi/2005/02"
API_WSDL = "http://www.gridforum.org/cddlm/deployapi/2005/02/wsdl"
CDL = "http://www.gridforum.org/namespaces/2005/02/cddlm/CDL-1.0"
CMP = "http://www.gridforum.org/cddlm/components/2005/02"
NATIVE = "urn:cddlm:lang:components:1"
EXT = "urn:cddlm:ext:1"                  # the portal's extensions (operations, properties)
HOT = "urn:cddlm:lang:hot:1"             # HOT templates with policy groups
LIBRARY_PREFIX = "urn:cddlm:library:"    # the component library: urn:cddlm:library:components.cdl

SOAP11_ENV = "http://schemas.xmlsoap.org/soap/envelope/"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XML = "http://www.w3.org/XML/1998/namespace"

WSA = "http://www.w3.org/2005/08/addressing"
WSA_2004 = "http://schemas.xmlsoap.org/ws/2004/08/addressing"
WSA_2003 = "http://schemas.xmlsoap.org/ws/2003/03/addressing"
WSAM = "http://www.w3.org/2007/05/addressing/metadata"
WSSE = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
WSU = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"

WSRF_RP = "http://docs.oasis-open.org/wsrf/rp-2"
# the 2004/06 draft of WS-ResourceProperties, which the 2005/02 CDDLM wire format used; only
# its GetResourceProperty is accepted (xsd/rp-draft.xsd)
WSRF_RP_DRAFT = "http://docs.oasis-open.org/wsrf/2004/06/wsrf-WS-ResourceProperties-1.2-draft-01.xsd"
WSRF_RL = "http://docs.oasis-open.org/wsrf/rl-2"
WSRF_RLW = "http://docs.oasis-open.org/wsrf/rlw-2"
WSRF_R = "http://docs.oasis-open.org/wsrf/r-2"
WSRF_BF = "http://docs.oasis-open.org/wsrf/bf-2"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
WSNTW = "http://docs.oasis-open.org/wsn/bw-2"
WSTOP = "http://docs.oasis-open.org/wsn/t-1"

XPATH_DIALECT = "http://www.w3.org/TR/1999/REC-xpath-19991116"
TOPIC_SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"
TOPIC_CONCRETE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete"
TOPIC_FULL = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Full"

# the topics the portal publishes (CONTRACT section 8), in Clark notation
LIFECYCLE_TOPIC = "{%s}Lifecycle" % API
CREATED_TOPIC = "{%s}ApplicationCreated" % API

WSRF_FAULT_ACTION = "http://docs.oasis-open.org/wsrf/fault"
WSN_FAULT_ACTION = "http://docs.oasis-open.org/wsn/fault"

NSMAP = {
    "soapenv": SOAP11_ENV,
    "api": API,
    "wsa": WSA,
    "wsrf-rp": WSRF_RP,
    "wsrf-rl": WSRF_RL,
    "wsrf-r": WSRF_R,
    "wsrf-bf": WSRF_BF,
    "wsnt": WSNT,
    "wstop": WSTOP,
}


def qname(namespace: str, local: str) -> str:
    """Clark notation, the form lxml uses for tags: ``{namespace}local``."""
    return "{%s}%s" % (namespace, local)

# Below a portal's base URL (CONTRACT section 2): its endpoints' paths; and the producer name
# the portal's own events (ApplicationCreated) carry in the outbox.
PORTAL_PATH = "/cddlm/portal"
APP_PATH = "/cddlm/applications/"
MANAGER_PATH = "/cddlm/subscriptions/"
PORTAL_PRODUCER = "portal"


def app_address(portal: str, view_id: str) -> str:
    """The address of application view ``view_id`` through the portal at base URL ``portal``."""
    return portal.rstrip("/") + APP_PATH + view_id
