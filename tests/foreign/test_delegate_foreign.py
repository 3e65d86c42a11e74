"""A ``delegate`` component handed to a portal that is not cddlm (the foreign test portal on
node-soap, which ignores the client-token option, serves no WSDL and answers plain faults):
created once, even across a SIGKILL of the front portal between asking and hearing; initialized
with the descriptor's language and version; running; its refusals relayed at initialize as an
``api:RemoteFault`` wrapping the original fault; terminated and destroyed, nothing left behind.
On SQLite and on PostgreSQL (issue 29, items 1, 2, 4 and 5)."""

from __future__ import annotations

import signal
import threading
import pytest
from lxml import etree

from cddlm import ns
from cddlm.client import Portal, PortalFault
from tests.conftest import LivePortal
from tests.foreign.test_foreign_portal import addressing, assert_addressed
from tests.multihost.test_delegate_type import outer as delegating

LANGUAGE = "urn:foreign:lang"
BF, EXT = "{%s}" % ns.WSRF_BF, "{%s}" % ns.EXT


def outer(url: str, words: str, version: str | None = "2.1") -> str:
    """The front's descriptor: a delegate handing a two-line descriptor in the foreign
    portal's language (its text says how the foreign portal behaves)."""
    return delegating(url, "job: %s\nlines: 2\n" % words, LANGUAGE, version)


class Front:
    """The front portal, restartable on the same store (``--db``) and state folder."""

    def __init__(self, tmp_path, db_url: str, foreign_url: str):
        self.state = tmp_path / "front"
        self.state.mkdir()
        self.extra = ["--allow-delegate-url", foreign_url, "--agent-timeout", "20",
                      "--liveness-interval", "0.5"]
        self.db = db_url
        self.lp: LivePortal | None = None

    def start(self) -> Portal:
        self.lp = LivePortal(self.state, db=self.db, extra=self.extra).start()
        return Portal(self.lp.url, failover=False)

    def kill(self) -> None:
        self.lp.stop(sig=signal.SIGKILL)

    def stop(self) -> None:
        if self.lp is not None:
            self.lp.stop()


@pytest.fixture
def front(tmp_path, db_url, foreign):
    f = Front(tmp_path, db_url, foreign.url)
    yield f
    f.stop()


def creates(foreign) -> int:
    return sum(1 for e in foreign.log() if addressing(e)["body"] == "createRequest")


def test_a_delegate_on_a_foreign_portal_is_created_once_across_front_sigkills(front, foreign):
    portal = front.start()
    app = portal.create(name="outer")
    # the foreign portal holds its answer to the create: the front is killed between asking
    # and hearing, and the sub-application exists there all the same
    foreign.mode("hold-create")
    asked = threading.Thread(target=lambda: pytest.raises(Exception, app.initialize, ns.NATIVE,
                                                          text=outer(foreign.url, "hello")))
    asked.start()
    foreign.wait_for(lambda: creates(foreign) == 1, what="the front's create")
    front.kill()
    asked.join(30)
    foreign.mode("ok")
    foreign.wait_for(lambda: len(foreign.apps()) == 1)
    # restarted, the front finds it again by what it recorded, and creates nothing more
    portal = front.start()
    app = portal.lookup("outer")
    assert app.state() == "instantiated"
    app.initialize(ns.NATIVE, text=outer(foreign.url, "hello"))
    (sub,) = foreign.apps()
    assert creates(foreign) == 1
    assert sub["state"] == "initialized" and sub["language"] == LANGUAGE and sub["version"] == "2.1"
    app.run()
    assert app.wait_for("running", timeout=60) == "running", app.ping()
    assert foreign.apps()[0]["state"] == "running"
    ref = app.resolve("there")
    assert ref.resource_id == sub["id"]
    # killed again while running: the restarted front still ends what it delegated
    front.kill()
    portal = front.start()
    app = portal.lookup("outer")
    assert app.wait_for("running", timeout=30) == "running"
    app.terminate("done")
    assert app.wait_for("terminated", timeout=60) == "terminated", app.ping()
    foreign.wait_for(lambda: foreign.apps() == [] or None, what="nothing left behind")
    assert creates(foreign) == 1
    # it spoke the protocol from its own WSDL (no ?wsdl: every request a POST to the endpoint),
    # every message with SOAPAction and WS-Addressing (issue 29 item 3)
    log = foreign.log()
    assert all(e["method"] == "POST" and "?" not in e["path"] for e in log)
    assert_addressed(log)
    assert {addressing(e)["body"] for e in log} >= {"createRequest", "lookupRequest",
                                                    "initializeRequest", "runRequest",
                                                    "pingRequest", "terminateRequest",
                                                    "destroyRequest"}


@pytest.mark.parametrize("words, expect", [
    ("refuse-plain", {"faultcode": "soap:Client", "faultstring": "the descriptor is refused",
                      "detail": "{urn:foreign:1}Problem"}),
    ("refuse-bare", {"faultcode": "soap:Client", "faultstring": "the descriptor is refused, bare"}),
    ("refuse-503", {"httpStatus": "503", "contentType": "text/html"}),
])
def test_a_foreign_refusal_is_a_remote_fault_wrapping_the_original(front, foreign, words, expect):
    portal = front.start()
    app = portal.create()
    with pytest.raises(PortalFault) as caught:
        app.initialize(ns.NATIVE, text=outer(foreign.url, words))
    assert caught.value.fault == "RemoteFault" and "there" in str(caught.value)
    cause = caught.value.detail.find(BF + "FaultCause")
    assert cause is not None
    (wrapped,) = cause
    assert wrapped.tag == EXT + "WrappedFault"      # a BaseFault derivative (spec 7.1.3)
    assert wrapped.find(BF + "Timestamp") is not None
    for name, value in expect.items():
        el = wrapped.find(EXT + name)
        assert el is not None, etree.tostring(wrapped)
        assert (el[0].tag if name == "detail" else el.text) == value
    if "httpStatus" in expect:
        assert "Service Unavailable" in wrapped.findtext(EXT + "page")
    else:
        assert wrapped.find(EXT + "httpStatus") is None
    # nothing changed here, nothing left there
    assert app.state() == "instantiated"
    foreign.wait_for(lambda: foreign.apps() == [] or None, what="nothing left behind")
