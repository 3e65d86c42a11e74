"""Other SOAP stacks drive a live portal from its served WSDL (``URL?wsdl``) alone: node-soap
(``client.js``), PHP's SoapClient (``client.php``) and suds (``test_suds.py``), beside zeep
(tests/docs/test_zeep.py) and JAX-WS (tests/test_java_client.py). Each client runs one session
and prints one line per step; ``check_session`` holds every stack to the same lines and then
looks at the portal itself with cddlm's own client."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cddlm.client import Portal, PortalFault

HERE = Path(__file__).resolve().parent

# a component that runs `sleep`: long enough to outlive the session, which terminates it
DESCRIPTOR = ('<application xmlns="urn:cddlm:lang:components:1"><component name="nap" type="process">'
              '<attribute name="argv"><item>sleep</item><item>600</item></attribute>'
              '</component></application>')


def run_client(cmd: list[str], env: dict | None = None, timeout: float = 120) -> list[str]:
    """The lines a client script printed; its whole output in the failure when it fails."""
    done = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 0, "%s failed:\n%s" % (cmd[:2], output[-4000:])
    return done.stdout.decode().splitlines()


def check_session(lines: list[str], url: str, name: str) -> None:
    """The client's session went as it should, and the portal agrees."""
    steps = [line.split(" ", 1) + [""] for line in lines if re.match(r"^[a-z]+ ", line + " ")]
    assert [s[0] for s in steps] == ["created", "state", "state", "resolved", "state",
                                     "destroyed", "fault"], lines
    rid, address = steps[0][1].split()
    assert rid.startswith("urn:uuid:"), lines
    assert address.startswith(url.rsplit("/cddlm/", 1)[0] + "/cddlm/applications/")
    assert [s[1] for s in steps[1:5]] == ["initialized", "running", "running", "terminated"], lines
    # the fault is read by type: its detail element and its reason, naming the bad component type
    assert steps[6][1].startswith("DescriptorFault ") and "no-such-type" in steps[6][1], lines
    portal = Portal(url, failover=False)
    with pytest.raises(PortalFault) as gone:
        portal.lookup(name)
    assert gone.value.fault == "NoSuchApplicationFault"
    # the broken descriptor changed nothing: that application is still instantiated
    assert portal.lookup(name + "-bad").ping()["state"] == "instantiated"
