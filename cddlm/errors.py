"""The portal's exception tree. Domain code raises these; only ``portal/faults.py`` turns them
into SOAP faults and only ``cli.py`` into exit codes. Foreign exceptions (lxml, SQLAlchemy,
zeep, OSError) are translated where they are caught and never leak upward.

    CddlmError
    ├── ClientError                      the caller's mistake (soapenv:Client)
    │   ├── BadArgument                  malformed, missing, contradictory, duplicate input
    │   │   └── RequestTooLarge          a body over the configured limit
    │   ├── NotUnderstood                a mustUnderstand option not understood
    │   ├── UnsupportedLanguage          unknown language URI or version
    │   ├── DescriptorError              a descriptor that does not parse or validate
    │   ├── ResolutionError              a reference or property that cannot be resolved
    │   ├── PlacementError               no placement satisfies the hard policies
    │   ├── WrongState                   operation not allowed in the current state
    │   ├── NoSuchApplication            lookup / rebind of an unknown application
    │   ├── ResourceUnknown              an EPR that names no live resource
    │   ├── InvalidPropertyQName         unknown or unresolvable resource property QName
    │   ├── QueryError                   WS-RP QueryResourceProperties problems
    │   │   ├── UnknownQueryDialect
    │   │   ├── InvalidQueryExpression
    │   │   └── QueryEvaluationError
    │   ├── UnableToSetTerminationTime
    │   ├── TerminationTimeChangeRejected a resource that refuses a new termination time
    │   ├── ResourceNotDestroyed         a resource that cannot be destroyed (the portal)
    │   ├── AddressingError              a WS-Addressing header the portal cannot honour
    │   ├── NotificationError            WS-BaseNotification faults (``fault`` names the wsnt element)
    │   ├── AuthenticationFailed         no credentials, wrong ones, a replayed or stale token
    │   │   └── NotAuthorized            authenticated, but the operation is for administrators
    │   └── QuotaExceeded                the caller's quota (applications, components ...) is used up
    ├── ConfigurationError               a portal that must not start as configured (not a fault)
    └── ServerError                      the portal's own failure (soapenv:Server)
        ├── DeploymentFailed             enactment failed synchronously
        ├── RemoteFault                  a fault relayed from a delegate portal
        ├── HostUnreachable              the portal serving a host does not answer (``host`` names it)
        ├── StoreUnavailable             the database cannot be reached or is locked
        └── Busy                         a bounded resource (large parses, query helpers) is taken
"""

from __future__ import annotations

MAX_TEXT = 4096     # characters of one text of a fault the portal answers or relays
# digits of the longest number a caller may give (int64: a count, an offset, a list index, a
# part of a duration); a longer one is refused unparsed (int() refuses 4,300 digits itself,
# with an error that is no caller's fault)
MAX_DIGITS = 18


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were: the bound on
    every text of a fault (one quoting a caller's megabyte of path, or relaying a peer's
    megabyte of message)."""
    if len(text) <= limit:
        return text
    more = " ... (%d characters more)" % (len(text) - limit)
    return text[:max(0, limit - len(more))] + more


class CddlmError(Exception):
    """Base of every error the portal raises on purpose."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ClientError(CddlmError):
    """The request was wrong; repeating it unchanged fails again."""


class ConfigurationError(CddlmError):
    """The portal's settings are unsafe or contradictory; it refuses to start."""


class ServerError(CddlmError):
    """The portal failed; the request may succeed later."""


class BadArgument(ClientError):
    pass


class RequestTooLarge(BadArgument):
    def __init__(self, size: int | None, limit: int):
        what = "of %d bytes " % size if size is not None else ""
        super().__init__("request body %sexceeds the limit of %d bytes" % (what, limit))
        self.size = size
        self.limit = limit


class NotUnderstood(ClientError):
    def __init__(self, option: str):
        super().__init__("option %s is marked mustUnderstand but is not understood" % option)
        self.option = option


class UnsupportedLanguage(ClientError):
    def __init__(self, language: str, detail: str = ""):
        super().__init__(detail or "unsupported descriptor language %r" % language)
        self.language = language


class _Located(ClientError):
    """An error at a place in a descriptor: file, line and a path (element or reference path)."""

    def __init__(self, message: str, *, kind: str = "", file: str | None = None,
                 line: int | None = None, path: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.file = file
        self.line = line
        self.path = path

    def located(self) -> str:
        """``kind: file:line: path: message`` with the parts that are known."""
        where = ""
        if self.file:
            where = self.file + (":%d" % self.line if self.line else "")
        elif self.line:
            where = "line %d" % self.line
        parts = [p for p in (self.kind, where, self.path) if p]
        return ": ".join(parts + [self.message])

    def __str__(self) -> str:
        return self.located()


class DescriptorError(_Located):
    pass


class ResolutionError(_Located):
    pass


class PlacementError(ClientError):
    def __init__(self, message: str, conflicts: list[str] | None = None):
        super().__init__(message)
        self.conflicts = list(conflicts or [])


class WrongState(ClientError):
    def __init__(self, state: str, operation: str):
        super().__init__("operation %s is not allowed in state %s" % (operation, state))
        self.state = state
        self.operation = operation


class NoSuchApplication(ClientError):
    pass


class ResourceUnknown(ClientError):
    pass


class InvalidPropertyQName(ClientError):
    pass


class QueryError(ClientError):
    pass


class UnknownQueryDialect(QueryError):
    pass


class InvalidQueryExpression(QueryError):
    pass


class QueryEvaluationError(QueryError):
    pass


class UnableToSetTerminationTime(ClientError):
    pass


class TerminationTimeChangeRejected(ClientError):
    pass


class ResourceNotDestroyed(ClientError):
    pass


class AddressingError(ClientError):
    """A WS-Addressing 1.0 fault (SOAP binding, section 6): ``subcode`` is its local name
    (e.g. ``OnlyAnonymousAddressSupported``) and ``header`` the Clark name of the header
    at fault, reported as ``wsa:ProblemHeaderQName``."""

    def __init__(self, subcode: str, message: str, header: str | None = None):
        super().__init__(message)
        self.subcode = subcode
        self.header = header


class NotificationError(ClientError):
    """A WS-BaseNotification fault; ``fault`` is the local name of the wsnt fault element and
    ``children`` its own child elements after the BaseFault ones: (Clark name, value) pairs,
    where a value of the form ``{namespace}local`` is written as a QName."""

    def __init__(self, fault: str, message: str, children: tuple[tuple[str, str], ...] = ()):
        super().__init__(message)
        self.fault = fault
        self.children = tuple(children)


class AuthenticationFailed(ClientError):
    """The request is not authenticated (``wsse:FailedAuthentication``): ``status`` is the HTTP
    status to answer with (401; 429 while the caller's address is rate-limited), ``challenge``
    the ``WWW-Authenticate`` value and ``retry_after`` the seconds to announce in ``Retry-After``."""

    def __init__(self, message: str, *, status: int = 401, challenge: str | None = None,
                 retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.challenge = challenge
        self.retry_after = retry_after


class NotAuthorized(AuthenticationFailed):
    """The caller is known but may not do this (administrators only): HTTP 403."""

    def __init__(self, message: str):
        super().__init__(message, status=403)


class QuotaExceeded(ClientError):
    """A per-owner quota would be exceeded; ``quota`` names it, ``limit`` is its value."""

    def __init__(self, quota: str, limit: int, message: str):
        super().__init__(message)
        self.quota = quota
        self.limit = limit


class DeploymentFailed(ServerError):
    pass


class RemoteFault(ServerError):
    """A fault relayed from another portal; ``cause`` is the original fault detail (XML text)."""

    def __init__(self, message: str, cause: str | None = None):
        super().__init__(message)
        self.cause = cause


class HostUnreachable(ServerError):
    """The portal that serves host ``host`` gave no answer (refused, silent, garbage): what
    it alone can tell (a component's logs, its runtime values) cannot be had now."""

    def __init__(self, host: str, message: str):
        super().__init__(message)
        self.host = host


class StoreUnavailable(ServerError):
    pass


class Busy(ServerError):
    """The portal bounds how many of some costly things run at once and all are taken: the
    request may succeed if sent again later."""
