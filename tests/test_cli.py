"""The ``cddlm`` command against a live portal: the README's tour."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cddlm(*args, portal=None, check=True):
    env = dict(os.environ)
    if portal:
        env["CDDLM_PORTAL"] = portal
    r = subprocess.run([sys.executable, "-m", "cddlm.cli", *args], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_tour(live_portal, tmp_path):
    lp = live_portal()
    r = cddlm("deploy", "examples/hello.xml", "--name", "hello", portal=lp.url)
    assert "hello is running" in r.stdout and "running" in r.stdout
    r = cddlm("ls", portal=lp.url)
    assert "hello" in r.stdout and "running" in r.stdout
    r = cddlm("status", "hello", portal=lp.url)
    assert "state:      running" in r.stdout and "web" in r.stdout and "worker" in r.stdout
    r = cddlm("destroy", "hello", portal=lp.url, check=False)
    assert r.returncode == 1 and "WrongStateFault" in r.stderr
    r = cddlm("terminate", "hello", "--reason", "tour over", portal=lp.url)
    assert "hello is terminated" in r.stdout
    r = cddlm("status", "hello", portal=lp.url)
    assert "tour over" in r.stdout
    cddlm("destroy", "hello", portal=lp.url)
    assert "no applications" in cddlm("ls", portal=lp.url).stdout


def test_deploy_failure_and_bad_descriptor(live_portal, tmp_path):
    lp = live_portal()
    failing = tmp_path / "fails.xml"
    failing.write_text('<application xmlns="urn:cddlm:lang:components:1"><component name="x" '
                       'type="process"><attribute name="argv"><item>sh</item><item>-c</item>'
                       '<item>echo broken >&amp;2; exit 7</item></attribute></component></application>')
    r = cddlm("deploy", str(failing), "--name", "f", portal=lp.url, check=False)
    assert r.returncode == 1 and "failed" in r.stderr and "broken" in r.stderr
    bad = tmp_path / "bad.xml"
    bad.write_text('<application xmlns="urn:cddlm:lang:components:1"><component name="x" type="nope"/></application>')
    r = cddlm("deploy", str(bad), portal=lp.url, check=False)
    assert r.returncode == 1 and "DescriptorFault" in r.stderr
    r = cddlm("deploy", str(tmp_path / "missing.xml"), portal=lp.url, check=False)
    assert r.returncode == 1
    r = cddlm("deploy", "examples/hello.xml", "-p", "novalue", portal=lp.url, check=False)
    assert r.returncode == 2


def test_usage_errors_and_unreachable_portal():
    assert cddlm("frobnicate", check=False).returncode == 2
    r = cddlm("ls", "--portal", "http://127.0.0.1:1/cddlm/portal", check=False)
    assert r.returncode == 1 and "cannot reach" in r.stderr
    assert "deploy" in cddlm("--help").stdout


def test_cdl_and_hot_descriptors_deploy(live_portal, tmp_path):
    lp = live_portal()
    r = cddlm("deploy", "examples/webapp.cdl", "--name", "cdl", "-p", "db.port=6000", portal=lp.url)
    assert "cdl is running" in r.stdout
    r = cddlm("status", "cdl", portal=lp.url)
    assert "site/web1" in r.stdout and "site/web2" in r.stdout and "db " in r.stdout
    r = cddlm("deploy", "examples/cluster.yaml", "--name", "hot", portal=lp.url)
    assert "hot is running" in r.stdout
    audit = cddlm("audit", "hot", portal=lp.url).stdout
    assert "soft anti-collocation at host: VIOLATED" in audit   # one host: the soft policy gives
    hard = tmp_path / "hard.yaml"
    hard.write_text((ROOT / "examples" / "cluster.yaml").read_text().replace("hard: false", "hard: true"))
    r = cddlm("deploy", str(hard), "--name", "hard", portal=lp.url, check=False)
    assert r.returncode == 1 and "PlacementFault" in r.stderr and "anti-collocation" in r.stderr
    for name in ("cdl", "hot"):
        cddlm("terminate", name, portal=lp.url)


def test_lazy_reference_waits_for_its_value(live_portal, tmp_path):
    lp = live_portal()
    doc = tmp_path / "wait.xml"
    doc.write_text('<application xmlns="urn:cddlm:lang:components:1">'
                   '<component name="late" type="process"><attribute name="argv"><item>sh</item>'
                   '<item>-c</item><item>sleep 1; exec python3 -u -m http.server 0</item></attribute>'
                   '<attribute name="readiness"><item name="log">Serving</item></attribute></component>'
                   '<component name="user" type="process"><attribute name="argv"><item>sleep</item>'
                   '<item>300</item></attribute><attribute name="env"><item name="PORT">'
                   '<ref path="late/port" lazy="true"/></item></attribute></component></application>')
    r = cddlm("deploy", str(doc), "--name", "waits", portal=lp.url)
    assert "waits is running" in r.stdout
    from cddlm.client import Portal
    app = Portal(lp.url).lookup("waits")
    port = app.resolve("late/port")
    assert int(port) > 0 and app.resolve("user/env") == {"PORT": port}
    app.terminate()
