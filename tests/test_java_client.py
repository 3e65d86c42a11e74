"""The served WSDL in a Java stack: JAX-WS RI's wsimport generates a client from
``…/cddlm/portal?wsdl``, javac compiles it with ``tests/java/CddlmClient.java``, and the
program drives a live portal: create, lookup, a resource property, the application's
operations through its EPR (reference parameters as headers), a fault as a typed exception,
terminate and destroy.

Needs java, javac and the JAX-WS RI jars (Debian's ``libjaxws-java``, which the test installs
with apt-get where it runs as root, puts them in /usr/share/java; elsewhere set ``CDDLM_JAXWS_JARS`` to the folder holding
jaxws-tools.jar, jaxws-rt.jar and their dependencies). Skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.debian import ensure_package

JARS = Path(os.environ.get("CDDLM_JAXWS_JARS", "/usr/share/java"))
CLIENT = Path(__file__).parent / "java" / "CddlmClient.java"
GENERATED = Path("org/gridforum/cddlm/deployapi/_2005/_02/wsdl")


def _toolchain() -> str:
    """The classpath of the JAX-WS tools and runtime, or skip."""
    missing = [tool for tool in ("java", "javac") if shutil.which(tool) is None]
    if missing:
        pytest.skip("%s not found: a JDK (17 or newer) is needed" % " and ".join(missing))
    needed = ("jaxws-tools.jar", "jaxws-rt.jar", "jaxb-api.jar")
    present = lambda: all((JARS / j).is_file() for j in needed)
    reason = None if "CDDLM_JAXWS_JARS" in os.environ and present() else \
        ensure_package("libjaxws-java", present, "the JAX-WS RI jars (%s) in %s"
                       % (", ".join(needed), JARS))
    if reason:
        pytest.skip(reason + " (or set CDDLM_JAXWS_JARS)")
    return str(JARS / "*")


def run(cmd: list[str], cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=timeout)
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 0, "%s failed:\n%s" % (cmd[:4], output[-4000:])
    return output


def test_a_wsimport_client_drives_the_portal(live_portal, tmp_path):
    classpath = _toolchain()
    lp = live_portal()
    wsdl = lp.url + "?wsdl"
    src, classes = tmp_path / "src", tmp_path / "classes"
    src.mkdir()
    classes.mkdir()
    out = run(["java", "-cp", classpath, "com.sun.tools.ws.WsImport", "-keep", "-Xnocompile",
               "-d", str(classes), "-s", str(src), wsdl], tmp_path)
    assert "[ERROR]" not in out and "[WARNING]" not in out, out
    application = (src / GENERATED / "Application.java").read_text()
    # one method per operation: destroy (the spec's) and destroyView (wsrf-rl:Destroy)
    assert len(re.findall(r"public \w+ destroy\(", application)) == 1
    assert len(re.findall(r"public \w+ destroyView\(", application)) == 1
    shutil.copy(CLIENT, src / CLIENT.name)
    run(["javac", "-nowarn", "-cp", classpath, "-d", str(classes)]
        + [str(p) for p in src.rglob("*.java")], tmp_path)
    lines = run(["java", "-cp", "%s%s%s" % (classes, os.pathsep, classpath), "CddlmClient", wsdl,
                 "java-app"], tmp_path, timeout=120).splitlines()
    steps = [line.split(" ", 1) for line in lines if re.match(r"^[a-z-]+( |$)", line)]
    assert [s[0] for s in steps] == ["created", "lookup", "state", "static-info",
                                     "destroy-while-live", "state", "destroyed", "lookup-after"]
    rid, address = steps[0][1].split()
    assert rid.startswith("urn:uuid:")
    assert address.startswith(lp.url.rsplit("/cddlm/", 1)[0] + "/cddlm/applications/")
    assert [s[1] for s in steps[1:6]] == [
        address, "instantiated", "cddlm " + lp.url, "WrongStateFault instantiated destroy",
        "terminated"]
    assert steps[7][1] == "NoSuchApplicationFault"
