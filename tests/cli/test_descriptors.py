"""Each descriptor language through ``cddlm deploy``, and a lazy reference that waits."""

from __future__ import annotations

import json

from tests.cli.helpers import ROOT, cddlm


def test_cdl_and_hot_descriptors_deploy(live_portal, tmp_path):
    lp = live_portal()
    r = cddlm("deploy", "examples/webapp.cdl", "--name", "cdl", "-p", "db.port=6000", portal=lp.url)
    assert "cdl is running" in r.stdout
    r = cddlm("status", "cdl", portal=lp.url)
    assert "site/web1 " in r.stdout and "site/web2 " in r.stdout and "\ndb " in r.stdout
    r = cddlm("deploy", "examples/cluster.yaml", "--name", "hot", portal=lp.url)
    assert "hot is running" in r.stdout
    audit = cddlm("audit", "hot", portal=lp.url).stdout
    assert "soft anti-collocation at host: VIOLATED" in audit   # one host: the soft policy gives
    policy = json.loads(cddlm("audit", "hot", "--json", portal=lp.url).stdout)["policies"][0]
    assert policy["type"] == "anti-collocation" and policy["hard"] is False and not policy["met"]
    assert set(policy["members"]) == {"worker1", "worker2", "worker3"}
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
