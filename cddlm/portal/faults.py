"""The one place where errors become SOAP faults (CONTRACT section 7).

``FAULTS`` maps each domain exception to its fault element, SOAP faultcode and wsa:Action;
the most specific class wins. Every detail element extends ``wsrf-bf:BaseFaultType``
(Timestamp, Description, and the fault's own children), and an error the portal did not
expect becomes a ``soapenv:Server`` fault whose text hides the internals. Every text a fault
carries is at most ``errors.MAX_TEXT`` characters (``errors.clip``): an error quoting a
caller's megabyte of path answers a few kilobytes (a relayed cause is bounded by ``relay``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from lxml import etree
from spyne.model.fault import Fault

from cddlm import errors, ns
from cddlm.errors import clip
from cddlm.xsdtypes import format_datetime

log = logging.getLogger(__name__)
API, BF, RP, RL, R, WSNT = ns.API, ns.WSRF_BF, ns.WSRF_RP, ns.WSRF_RL, ns.WSRF_R, ns.WSNT


@dataclass(frozen=True)
class FaultKind:
    element: str            # Clark name of the detail element
    code: str               # Client | Server
    action: str = ns.WSRF_FAULT_ACTION
    extra: Callable[[errors.CddlmError, etree._Element], None] | None = None


def _sub(parent: etree._Element, tag: str, text: object) -> None:
    if text is not None and text != "":
        etree.SubElement(parent, tag).text = clip(str(text))


def _located(e, el) -> None:
    for name in ("kind", "file", "line", "path"):
        value = getattr(e, name, None)
        if name == "line" and not value:
            continue
        _sub(el, "{%s}%s" % (API, name), value)


def _wrong_state(e, el) -> None:
    _sub(el, "{%s}state" % API, e.state)
    _sub(el, "{%s}operation" % API, e.operation)


def _conflicts(e, el) -> None:
    for c in e.conflicts:
        _sub(el, "{%s}conflict" % API, c)


def _remote(e, el) -> None:
    if e.cause:
        from cddlm import xmlsafe
        try:
            cause = xmlsafe.parse(e.cause.encode("utf-8"))
        except errors.BadArgument:
            return
        holder = el.find("{%s}FaultCause" % BF)
        if holder is None:
            holder = etree.Element("{%s}FaultCause" % BF)
            el.find("{%s}Description" % BF).addnext(holder)
        holder.append(cause)


# order matters only through inheritance: lookup walks the exception's MRO
FAULTS: dict[type, FaultKind] = {
    errors.BadArgument: FaultKind("{%s}BadArgumentFault" % API, "Client"),
    errors.NotUnderstood: FaultKind("{%s}NotUnderstoodFault" % API, "Client",
                                    extra=lambda e, el: _sub(el, "{%s}option" % API, e.option)),
    errors.UnsupportedLanguage: FaultKind("{%s}UnsupportedLanguageFault" % API, "Client",
                                          extra=lambda e, el: _sub(el, "{%s}language" % API, e.language)),
    errors.DescriptorError: FaultKind("{%s}DescriptorFault" % API, "Client", extra=_located),
    errors.ResolutionError: FaultKind("{%s}ResolutionFault" % API, "Client", extra=_located),
    errors.PlacementError: FaultKind("{%s}PlacementFault" % API, "Client", extra=_conflicts),
    errors.WrongState: FaultKind("{%s}WrongStateFault" % API, "Client", extra=_wrong_state),
    errors.NoSuchApplication: FaultKind("{%s}NoSuchApplicationFault" % API, "Client"),
    errors.ResourceUnknown: FaultKind("{%s}ResourceUnknownFault" % R, "Client"),
    errors.InvalidPropertyQName: FaultKind("{%s}InvalidResourcePropertyQNameFault" % RP, "Client"),
    errors.UnknownQueryDialect: FaultKind("{%s}UnknownQueryExpressionDialectFault" % RP, "Client"),
    errors.InvalidQueryExpression: FaultKind("{%s}InvalidQueryExpressionFault" % RP, "Client"),
    errors.QueryEvaluationError: FaultKind("{%s}QueryEvaluationErrorFault" % RP, "Client"),
    errors.UnableToSetTerminationTime: FaultKind("{%s}UnableToSetTerminationTimeFault" % RL, "Client"),
    errors.TerminationTimeChangeRejected: FaultKind("{%s}TerminationTimeChangeRejectedFault" % RL,
                                                    "Client"),
    errors.ResourceNotDestroyed: FaultKind("{%s}ResourceNotDestroyedFault" % RL, "Client"),
    errors.QuotaExceeded: FaultKind("{%s}QuotaExceededFault" % ns.EXT, "Client", extra=lambda e, el: (
        _sub(el, "{%s}quota" % ns.EXT, e.quota), _sub(el, "{%s}limit" % ns.EXT, e.limit))),
    errors.DeploymentFailed: FaultKind("{%s}DeploymentFault" % API, "Server"),
    errors.RemoteFault: FaultKind("{%s}RemoteFault" % API, "Server", extra=_remote),
    errors.HostUnreachable: FaultKind("{%s}ResourceUnavailableFault" % R, "Server"),
    errors.StoreUnavailable: FaultKind("{%s}ResourceUnavailableFault" % R, "Server"),
    errors.Busy: FaultKind("{%s}ResourceUnavailableFault" % R, "Server"),
    errors.ServerError: FaultKind("{%s}BaseFault" % BF, "Server"),
    errors.CddlmError: FaultKind("{%s}BaseFault" % BF, "Server"),
}


def kind_of(exc: errors.CddlmError) -> FaultKind:
    if isinstance(exc, errors.NotificationError):
        return FaultKind("{%s}%s" % (WSNT, exc.fault), "Client", ns.WSN_FAULT_ACTION,
                         extra=_wsn_extra)
    for cls in type(exc).__mro__:
        if cls in FAULTS:
            return FAULTS[cls]
    return FAULTS[errors.CddlmError]


def _wsn_extra(e, el) -> None:
    """A wsnt fault's own children; a ``{namespace}local`` value is a QName (its prefix is
    declared on the element), as UnknownFilter and UnsupportedPolicy are."""
    for tag, value in getattr(e, "children", ()):
        if value.startswith("{"):
            etree.SubElement(el, tag).text = etree.QName(value)
        else:
            _sub(el, tag, value)


def detail(exc: errors.CddlmError, now: float | None = None) -> etree._Element:
    """The WS-BaseFault detail element for an error."""
    kind = kind_of(exc)
    el = etree.Element(kind.element, nsmap={"wsrf-bf": BF, "api": API})
    etree.SubElement(el, "{%s}Timestamp" % BF).text = format_datetime(now or time.time())
    etree.SubElement(el, "{%s}Description" % BF).text = clip(exc.message)
    if kind.extra is not None:
        kind.extra(exc, el)
    return el


class SoapFault(Fault):
    """A spyne Fault that remembers its wsa:Action (read by the envelope writer), and the
    HTTP status and headers to answer with (500 and none, but for authentication)."""

    def __init__(self, code: str, message: str, detail_el: etree._Element | None, action: str,
                 status: str = "500 Internal Server Error", headers: dict | None = None):
        super().__init__(faultcode=code, faultstring=message, detail=detail_el)
        self.action = action
        self.status = status
        self.headers = headers or {}
        self.more_detail: list[etree._Element] = []   # detail elements after the first


HTTP_STATUS = {401: "401 Unauthorized", 403: "403 Forbidden", 429: "429 Too Many Requests"}


def to_fault(exc: BaseException) -> SoapFault:
    if isinstance(exc, errors.AuthenticationFailed):
        # WS-Security 1.0 (SOAP Message Security, section 12): the fault code is the QName,
        # with no detail; HTTP 401 with a Basic challenge, 403 for a known user who may not,
        # 429 with Retry-After for an address that failed too often
        headers = {}
        if exc.challenge and exc.status in (401, 429):
            headers["WWW-Authenticate"] = exc.challenge
        if exc.retry_after:
            headers["Retry-After"] = str(exc.retry_after)
        return SoapFault("{%s}FailedAuthentication" % ns.WSSE, exc.message, None,
                         ns.WSA + "/soap/fault", HTTP_STATUS.get(exc.status, "401 Unauthorized"),
                         headers)
    if isinstance(exc, errors.AddressingError):
        # WS-Addressing 1.0 SOAP binding over SOAP 1.1 (section 6): the fault code is the
        # subcode (wsa:InvalidAddressingHeader for every header fault); SOAP 1.1 has no place
        # for the more specific subsubcode (wsa:OnlyAnonymousAddressSupported, ...), so the
        # detail carries it after the problem header. No BaseFault: the fault is WS-Addressing's
        holder = None
        if exc.header:
            holder = etree.Element("{%s}ProblemHeaderQName" % ns.WSA, nsmap={"wsa": ns.WSA})
            holder.text = etree.QName(exc.header)
        fault = SoapFault("{%s}InvalidAddressingHeader" % ns.WSA, exc.message, holder,
                          ns.WSA + "/fault")
        sub = etree.Element("{%s}faultSubcode" % ns.EXT, nsmap={"ext": ns.EXT, "wsa": ns.WSA})
        sub.text = etree.QName(ns.WSA, exc.subcode)
        fault.more_detail = [sub]
        return fault
    if isinstance(exc, errors.CddlmError):
        kind = kind_of(exc)
        return SoapFault(kind.code, clip(str(exc)), detail(exc), kind.action)
    log.exception("unexpected error while handling a request", exc_info=exc)
    internal = errors.ServerError("internal error in the portal (%s); the portal log has the details"
                                  % type(exc).__name__)
    return SoapFault("Server", internal.message, detail(internal), ns.WSRF_FAULT_ACTION)


def soap_fault(code: str, message: str) -> SoapFault:
    """A SOAP-level fault without a BaseFault detail (MustUnderstand, VersionMismatch)."""
    return SoapFault(code, message, None, ns.WSA + "/soap/fault")
