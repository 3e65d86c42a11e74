"""Files the portal reads as root for a caller (issue 27, item 2): ``urn:cddlm:library:NAME``
names one of the library's own documents and nothing else, and every reference (library,
``classpath:``, ``file:``, a CDL import, a delegate's descriptor) is read by one reader: a
regular file only, never through a link, a FIFO or device refused at once, no more than the
size cap read."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from tests.hostile.conftest import CDL, NATIVE

MiB = 1024                      # /proc/PID/status figures are in kB
MARK = "ROOT-ONLY-MARK-7f3c"
LIB = "urn:cddlm:library:"


def _secret(tmp_path) -> str:
    """A root-only (0600) file outside every folder the portal allows, holding a valid
    descriptor: read, it would deploy and be served back by the dashboard."""
    path = tmp_path / "secret.xml"
    path.write_text('<application xmlns="%s"><component name="%s" type="process">'
                    '<attribute name="argv"><item>true</item></attribute></component>'
                    '</application>' % (NATIVE, MARK.lower()))
    os.chmod(path, 0o600)
    return str(path)


def _served(live, app: str) -> str:
    """What the dashboard serves of the application's descriptor (its API and its page)."""
    resource_id = live.prop(app, "api:id").text("//api:id")
    served = ""
    for path in ("/api/v1/applications/%s/descriptor", "/applications/%s"):
        page = requests.get(live.base + path % resource_id, timeout=10)
        assert page.status_code == 200, page.text[:300]
        served += page.text
    return served


def test_library_names_are_the_librarys_own_documents_only(live, tmp_path):
    secret = _secret(tmp_path)
    up = "../" * 20
    app = live.create()
    for location in (LIB + secret, LIB + up + secret.lstrip("/"), LIB + "/etc/passwd",
                     LIB + up + "etc/passwd", LIB + "/proc/self/environ", LIB + "library/components.cdl",
                     LIB + "./components.cdl", LIB + "", LIB + "components.cdl/", LIB + ".."):
        answer = live.initialize(app, NATIVE, reference=location)
        assert answer.fault() == "ResolutionFault", (location, answer.data[:600])
        assert "no such library document" in answer.description(), answer.description()
        assert MARK.lower().encode() not in answer.data and b"root:" not in answer.data
    # nor through an import of a CDL document, relative to the library or not
    for location in (LIB + secret, "../" * 8 + secret.lstrip("/")):
        body = ('<cdl:cdl xmlns:cdl="%s"><cdl:import location="%s"/><cdl:import location="%s"/>'
                '<cdl:system/></cdl:cdl>' % (CDL, LIB + "components.cdl", location))
        answer = live.initialize(app, CDL, body=body)
        assert answer.fault() == "ResolutionFault", (location, answer.data[:600])
        assert MARK.lower().encode() not in answer.data
    assert live.state_of(app) == "instantiated"
    served = _served(live, app)
    assert MARK.lower() not in served and "root:" not in served
    # the library's own documents still are what they were
    body = ('<cdl:cdl xmlns:cdl="%s" xmlns:cmp="http://www.gridforum.org/cddlm/components/2005/02">'
            '<cdl:import location="%scomponents.cdl"/><cdl:system><w cdl:extends="cmp:process">'
            '<argv><item>sleep</item><item>60</item></argv></w></cdl:system></cdl:cdl>' % (CDL, LIB))
    answer = live.initialize(app, CDL, body=body)
    assert answer.fault() is None, answer.data[:800]
    assert live.terminate(app).fault() is None
    live.after()


def test_a_400_mb_file_is_refused_without_being_read(live, tmp_path):
    big = tmp_path / "big.xml"
    with open(big, "wb") as f:                     # sparse: no disk used
        f.truncate(400 * 1024 * 1024)
    inside = live.allowed / "big.xml"
    os.symlink(big, inside)                        # a link in an allowed folder, to outside
    real = live.allowed / "real-big.xml"
    with open(real, "wb") as f:
        f.truncate(400 * 1024 * 1024)
    peak = live.status("VmHWM")
    app = live.create()
    for location in (LIB + str(big), LIB + "../" * 20 + str(big).lstrip("/"), "file://" + str(real),
                     str(real), "file://" + str(inside)):
        started = time.monotonic()
        answer = live.initialize(app, NATIVE, reference=location)
        assert answer.fault() == "ResolutionFault", (location, answer.data[:500])
        assert time.monotonic() - started < 2, location
    grown = live.status("VmHWM") - peak
    assert grown < 100 * MiB, "the portal grew by %d MiB" % (grown // MiB)
    assert live.state_of(app) == "instantiated"
    os.unlink(real)
    os.unlink(inside)
    live.after()


def test_a_fifo_named_eight_times_is_refused_at_once(live, tmp_path):
    """A tenant's component makes a FIFO; eight initializes name it (the portal has eight
    server threads): each is refused at once, and a bystander is answered within a second."""
    body = ('<application xmlns="%s"><component name="f" type="process"><attribute name="argv">'
            '<item>sh</item><item>-c</item><item>mkfifo "$CDDLM_WORKDIR/pipe" &amp;&amp; exec sleep 600'
            '</item></attribute></component></application>' % NATIVE)
    maker = live.create()
    assert live.initialize(maker, NATIVE, body=body).fault() is None
    live.run(maker)
    live.wait_state(maker, "running")
    fifo = live.app_dir(maker) / "f" / "pipe"
    deadline = time.monotonic() + 10
    while not fifo.exists():
        assert time.monotonic() < deadline, "the component made no FIFO"
        time.sleep(0.05)
    allowed = live.allowed / "pipe"
    os.mkfifo(allowed)
    locations = [LIB + str(fifo), LIB + "../" * 20 + str(fifo).lstrip("/")] * 4
    for location in ("file://" + str(allowed), str(allowed), "classpath:/../" + str(allowed)):
        answer = live.initialize(live.create(), NATIVE, reference=location, timeout=5)
        # at once (2 s for a loaded machine): one held by the FIFO would wait out its 5 s timeout
        assert answer.fault() == "ResolutionFault" and answer.elapsed < 2, (location, answer.data[:500])
    apps = [live.create() for _ in locations]
    released = threading.Event()

    def release() -> None:
        """Whatever a FIFO held (on the code before the fix): opened for writing, it lets go,
        from 3 s on (so that an answer it held is told from a prompt one on a slow machine)."""
        if released.wait(3.0):
            return
        while not released.wait(0.5):
            for path in (fifo, allowed):
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass

    with ThreadPoolExecutor(len(locations)) as pool:
        answers = pool.map(lambda pair: live.initialize(pair[0], NATIVE, reference=pair[1], timeout=20),
                           zip(apps, locations))
        time.sleep(0.3)
        try:
            witnessed = live.prop(live.victim, "api:state", timeout=5).elapsed
        except requests.Timeout:
            witnessed = 5.0
        threading.Thread(target=release, daemon=True).start()
        try:
            answers = list(answers)
        finally:
            released.set()
    assert witnessed < 1, "a bystander waited %.2fs" % witnessed
    for location, answer in zip(locations, answers):
        assert answer.fault() == "ResolutionFault", (location, answer.data[:500])
        # at once (2 s for eight side by side on a loaded machine): one the FIFO held would
        # wait for the release, 3 s on
        assert answer.elapsed < 2, (location, answer.elapsed)
    os.unlink(allowed)
    assert live.terminate(maker).fault() is None
    live.after()
