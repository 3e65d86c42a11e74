"""What every command shares: the portal to talk to, finding an application, parsing
arguments, and the errors commands raise for ``main`` (the one error boundary) to print."""

from __future__ import annotations

import argparse
import re
import sys
import urllib.parse

from cddlm import ns
from cddlm.config import DEFAULT_PORTAL, Limits

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
ID_PREFIX = re.compile(r"^[0-9a-f][0-9a-f-]{3,}$", re.I)     # at least 4 characters, as git

# exit codes (docs/cli.md "Exit codes"; CONTRACT section 9)
OK, FAILED, USAGE, UNREACHABLE, TIMEOUT, INTERRUPTED, BROKEN_PIPE = 0, 1, 2, 3, 4, 130, 141


class CliError(Exception):
    """A failure the command explains: one line on stderr (``hint`` in parentheses after
    it), and its exit code."""

    def __init__(self, message: str, hint: str | None = None, code: int = FAILED):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code


class UsageError(CliError):
    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message, hint, USAGE)


def endpoint(value: str) -> str:
    """The portal endpoint a ``--portal`` value means: a base URL (``http://host:port/``,
    with or without a path prefix), ``host:port``, or the endpoint itself (``…/cddlm/portal``,
    ``?wsdl`` allowed)."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError("--portal expects a URL, host:port or the portal endpoint, not %r" % value)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise UsageError("--portal %r: the port must be a number from 1 to 65535" % value)
    path = parts.path.rstrip("/")
    if not path.endswith(ns.PORTAL_PATH):
        path += ns.PORTAL_PATH
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def portal(args: argparse.Namespace):
    """The portal the command talks to, with the caller's credentials and TLS settings: from
    the options, the environment, then the config file (``cddlm.client.ClientConfig``); a
    user without password or token is asked for the password on a terminal. The address may
    be given as a base URL, ``host:port`` or the endpoint (``endpoint``)."""
    import getpass
    from cddlm.client import ClientConfig, Credentials, Portal
    config = ClientConfig.load(getattr(args, "portal", None), getattr(args, "user", None),
                               getattr(args, "ca_file", None), getattr(args, "client_cert", None),
                               getattr(args, "client_key", None))
    url = endpoint(config.portal)
    args.portal_url = url       # for the error boundary's message
    credentials = config.credentials
    if credentials.user and credentials.password is None and not credentials.token \
            and sys.stdin.isatty():
        credentials = Credentials(credentials.user,
                                  getpass.getpass("password for %s: " % credentials.user))
    args.credentials = credentials      # for the boundary, to say what a refusal means
    try:
        return Portal(url, credentials=credentials, tls=config.tls)
    except Exception as e:
        import requests
        from cddlm.client import Unreachable
        if isinstance(e, Unreachable) and isinstance(e.__cause__, requests.exceptions.SSLError):
            if "WRONG_VERSION_NUMBER" in str(e.__cause__):      # it answered, but not in TLS
                http = "http" + url[len("https"):]
                raise CliError("%s does not speak TLS: what answers there is plain HTTP" % url,
                               "is it a portal without --tls-cert? then %s" % http, UNREACHABLE) from e
            raise CliError(e.message) from e    # it answers, but is not trusted: not exit 3
        if isinstance(e, Unreachable) and not isinstance(e.__cause__, requests.HTTPError):
            raise               # nothing answered (or not in time): the boundary says so
        from cddlm.errors import CddlmError
        if isinstance(e, CddlmError) and not isinstance(e, Unreachable):
            raise
        # something else answers there (a web page, a 404): zeep's own errors, or HTTP's
        detail = e.__cause__ if isinstance(e, Unreachable) else e
        raise CliError("%s is not a CDDLM portal: %s" % (
            url, str(detail).split(" for url:")[0][:120] or type(detail).__name__),
            "give the portal's base URL, host:port or its endpoint …/cddlm/portal",
            UNREACHABLE) from e


CONFIG_FILE = "the config file, $CDDLM_CONFIG or ~/.config/cddlm/client.toml"


def login_error(fault: str, url: str, credentials) -> tuple[str, str] | None:
    """What a portal's refusal to authenticate means at the command line (the portal's own
    words describe the wire: a UsernameToken, Basic, Bearer): (the line, its hint) naming the
    options, variables and file the credentials come from. None: the portal's line says it."""
    if "authentication required" in fault:            # the request carried no credentials
        if credentials is not None and credentials.user:
            return ("no password for %s, and no terminal to ask for it on" % credentials.user,
                    "set $CDDLM_PASSWORD, give a token in $CDDLM_TOKEN, or put either in %s"
                    % CONFIG_FILE)
        return ("the portal at %s wants to know who you are" % url,
                "give --user NAME with its password in $CDDLM_PASSWORD or at a terminal's "
                "prompt, or a token in $CDDLM_TOKEN, or put them in %s" % CONFIG_FILE)
    sent_password = credentials is not None and credentials.user and credentials.password is not None
    if "too many failed sign-ins" in fault and sent_password:
        return (fault, "check --user %s and its password: $CDDLM_PASSWORD, the prompt, or %s"
                % (credentials.user, CONFIG_FILE))
    if "authentication failed" not in fault:
        return None                 # too many tries, or an administrator's operation
    if sent_password:
        return (fault, "check --user %s and its password: $CDDLM_PASSWORD, the prompt, or %s"
                % (credentials.user, CONFIG_FILE))
    return (fault, "`cddlm token create NAME --users FILE` issues a new token; this one came "
            "from $CDDLM_TOKEN or %s" % CONFIG_FILE)


def add_portal_option(parser: argparse.ArgumentParser) -> None:
    """--portal and the credentials, on the top-level parser and on each command's (so they
    may come before or after the command: unset ones do not hide the other's)."""
    parser.add_argument("--portal", metavar="URL", default=argparse.SUPPRESS,
                        help="the portal: its base URL, host:port, or its endpoint (default "
                             "$CDDLM_PORTAL, the config file, then %s)" % DEFAULT_PORTAL)
    parser.add_argument("--user", metavar="NAME", default=argparse.SUPPRESS,
                        help="authenticate as NAME (default $CDDLM_USER or the config file); the "
                             "password comes from $CDDLM_PASSWORD, the config file or a prompt, "
                             "a token from $CDDLM_TOKEN")
    parser.add_argument("--ca-file", metavar="PEM", default=argparse.SUPPRESS,
                        help="CA certificates that sign the portal's (default $CDDLM_CA_FILE, "
                             "the config file, then the system's)")
    parser.add_argument("--client-cert", metavar="PEM", default=argparse.SUPPRESS,
                        help="present this certificate (mutual TLS; with --client-key)")
    parser.add_argument("--client-key", metavar="PEM", default=argparse.SUPPRESS,
                        help="the client certificate's key")


def prose(docstring_paragraph: str) -> str:
    """A paragraph of a module's docstring as a command's --help shows it: one line, without
    the reST markup of literals (``cddlm ls``)."""
    return re.sub(r"``([^`]+)``", r"\1", " ".join(docstring_paragraph.split()))


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON, for scripts")


def add_app_argument(parser: argparse.ArgumentParser, **kwargs) -> None:
    parser.add_argument("app", metavar="APP", help="the application: its name, its urn:uuid: id, "
                        "the bare UUID or an unambiguous prefix of it", **kwargs)


def application(args: argparse.Namespace):
    """The application a command's APP names, on the portal its --portal names."""
    return lookup(portal(args), args.app)


def lookup(portal, app: str):
    """The application ``app`` names: by name first, then by id (with or without
    ``urn:uuid:``), then by an unambiguous prefix of its id."""
    from cddlm.client import PortalFault
    text = app.strip()
    bare = text[len("urn:uuid:"):] if text.startswith("urn:uuid:") else text
    try:
        return portal.lookup(text)
    except PortalFault as e:
        if e.fault != "NoSuchApplicationFault":
            raise
    if UUID.match(bare):
        try:
            return portal.lookup("urn:uuid:" + bare.lower())
        except PortalFault as e:
            if e.fault != "NoSuchApplicationFault":
                raise
    elif ID_PREFIX.match(bare):
        found = [a["id"] for a in portal.each_application(Limits.max_list_page)
                 if a["id"].lower().startswith("urn:uuid:" + bare.lower())]
        if len(found) == 1:
            return portal.lookup(found[0])
        if found:
            raise CliError("%r is the beginning of %d application ids (%s)" % (
                app, len(found), ", ".join(sorted(found)[:5])),
                "give more of the id, or the name")
    raise CliError("no application named %r or with that id" % app, "`cddlm ls` lists them")


def properties(pairs: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError("-p expects KEY=VALUE, got %r" % pair)
        out[key] = value
    return out


def option_pairs(pairs: list[str] | None) -> dict:
    """``--option URI=VALUE`` pairs: ``true``/``false`` are booleans, digits integers. An
    option name is a URI: one without a scheme is a mistake the portal would silently ignore
    (unknown options are), so it is refused here."""
    from cddlm.application import options as opts
    out: dict = {}
    for pair in pairs or []:
        uri, sep, value = pair.partition("=")
        if not sep or not uri:
            raise UsageError("--option expects URI=VALUE, got %r" % pair)
        if not re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:", uri):
            known = opts.PREFIX + uri
            raise UsageError("option name %r is not a URI" % uri,
                             "did you mean %s?" % known if known in opts.ALL else
                             "options the portal understands: %s" % ", ".join(opts.ALL))
        if uri in out:
            raise UsageError("option %s given twice" % uri)
        if value in ("true", "false"):
            out[uri] = value == "true"
        elif value.lstrip("-").isdigit():
            out[uri] = int(value)
        else:
            out[uri] = value
    return out


def label(app, name: str | None = None) -> str:
    """How messages name an application: its name, else its id."""
    return name or app.id
