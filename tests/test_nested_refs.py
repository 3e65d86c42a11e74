"""References into nested values (``w/env/KEY``, ``w/argv/0``) on one live portal: a HOT
``get_attr: [w, env, KEY]`` and a native ``<ref path="w/env/KEY" lazy="true"/>`` give the
component that holds them the value (read in its environment), ``cddlm resolve`` and the SOAP
``resolve`` answer them (a secret one hidden), and a key that is not there is a clear error:
from resolve, and at initialize for a reference to a key a value the descriptor gives lacks
(which changes nothing)."""

from __future__ import annotations

import sqlite3

import pytest

from cddlm import ns
from cddlm.client import Portal, PortalFault
from tests.cli.helpers import cddlm
from tests.multihost.test_delegation import environ

SECRET = "Zq9nestedSecret61"

HOT = """heat_template_version: 2015-04-30
parameters:
  pw: {type: string, hidden: true}
resources:
  w:
    type: CDDLM::Process
    properties:
      argv: [sleep, '600']
      env: {KEY: value-1, OTHER: value-2, PGPASSWORD: {get_param: pw}}
  x:
    type: CDDLM::Process
    properties:
      argv: [sleep, '601']
      env:
        GOT: {get_attr: [w, env, KEY]}
        PW: {get_attr: [w, env, PGPASSWORD]}
        FIRST: {get_attr: [w, argv, 0]}
"""

NATIVE = """<application xmlns="urn:cddlm:lang:components:1">
  <component name="w" type="process">
    <attribute name="argv"><item>sleep</item><item>602</item></attribute>
    <attribute name="env"><item name="KEY">native-1</item><item name="OTHER">native-2</item></attribute>
  </component>
  <component name="x" type="process">
    <attribute name="argv"><item>sleep</item><item>603</item></attribute>
    <attribute name="env">
      <item name="GOT"><ref path="w/env/KEY" lazy="true"/></item>
      <item name="SECOND"><ref path="w/argv/1" lazy="true"/></item>
      <item name="COPY"><ref path="x/env/GOT" lazy="true"/></item>
    </attribute>
  </component>
</application>"""

MISSING = NATIVE.replace('path="w/env/KEY"', 'path="w/env/NOPE"')


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    from tests.conftest import LivePortal, kill_leftovers
    root = tmp_path_factory.mktemp("nested")
    (root / "state").mkdir()
    lp = LivePortal(root / "state").start()
    yield lp
    lp.stop()
    kill_leftovers(root)


def deployed(live, tmp_path, name: str, text: str, suffix: str, *more: str):
    path = tmp_path / (name + suffix)
    path.write_text(text)
    cddlm("deploy", str(path), "--name", name, "--settle", "0", *more, portal=live.url)
    return Portal(live.url, failover=False).lookup(name)


def pids(app) -> dict[str, int]:
    return {c["path"]: c["pid"] for c in app.components()}


def resolved(live, name: str, path: str) -> str:
    return cddlm("resolve", name, path, portal=live.url).stdout.strip()


def test_a_hot_get_attr_into_a_map_and_a_list_reaches_the_process(live, tmp_path):
    app = deployed(live, tmp_path, "nested-hot", HOT, ".yaml", "-p", "pw=" + SECRET)
    try:
        env = environ(pids(app)["x"])
        assert (env[b"GOT"], env[b"PW"], env[b"FIRST"]) == (b"value-1", SECRET.encode(), b"sleep")
        # what a person or a program reads: the values, the secret one hidden
        assert resolved(live, "nested-hot", "w/env/KEY") == "value-1"
        assert resolved(live, "nested-hot", "x/env/GOT") == "value-1"
        assert resolved(live, "nested-hot", "w/argv/1") == "600"
        assert app.resolve("w/env/OTHER") == "value-2"             # SOAP resolve
        # a secret is answered hidden (no text), the values beside it as they are
        for path in ("w/env/PGPASSWORD", "x/env/PW", "w/env", "x"):
            assert SECRET not in resolved(live, "nested-hot", path), path
        assert app.resolve("w/env/PGPASSWORD") == app.resolve("x/env/PW") == ""
        assert app.resolve("x")["env"] == {"GOT": "value-1", "PW": "", "FIRST": "sleep"}
    finally:
        cddlm("terminate", "nested-hot", portal=live.url, check=False)


def test_a_native_lazy_reference_into_a_map_and_a_list_reaches_the_process(live, tmp_path):
    app = deployed(live, tmp_path, "nested-native", NATIVE, ".xml")
    try:
        env = environ(pids(app)["x"])
        assert (env[b"GOT"], env[b"SECOND"], env[b"COPY"]) == (b"native-1", b"602", b"native-1")
        assert resolved(live, "nested-native", "x/env/COPY") == "native-1"
        assert app.resolve("x/env/SECOND") == "602"
        assert app.resolve("w/env") == {"KEY": "native-1", "OTHER": "native-2"}
    finally:
        cddlm("terminate", "nested-native", portal=live.url, check=False)


def test_a_key_that_is_not_there_is_a_clear_resolution_fault(live, tmp_path):
    app = deployed(live, tmp_path, "nested-keys", NATIVE, ".xml")
    try:
        says = "w/env/NOPE does not exist: w/env has no key NOPE (keys: KEY, OTHER)"
        r = cddlm("resolve", "nested-keys", "w/env/NOPE", portal=live.url, check=False)
        assert r.returncode != 0 and says in r.stderr, r.stderr
        with pytest.raises(PortalFault) as e:
            app.resolve("w/env/NOPE")
        assert says in str(e.value) and e.value.fault == "ResolutionFault"
        with pytest.raises(PortalFault) as e:
            app.resolve("w/argv/7")
        assert "w/argv is a list of 2 items: it has no item 7" in str(e.value)
        with pytest.raises(PortalFault) as e:
            app.resolve("w/env/KEY/deeper")
        assert "w/env/KEY is a single value, not a map or a list" in str(e.value)
        assert app.ping()["state"] == "running"     # nothing changed
    finally:
        cddlm("terminate", "nested-keys", portal=live.url, check=False)


def rows_of(live, app_id: str) -> int:
    """The component rows the portal's store holds for the application (its SQLite file)."""
    with sqlite3.connect("file:%s?mode=ro" % (live.state_dir / "portal.db"), uri=True) as db:
        return db.execute("SELECT count(*) FROM components WHERE app_id = ?", (app_id,)).fetchone()[0]


@pytest.mark.parametrize("language, text, says", [
    (ns.NATIVE, MISSING, "x/env/GOT: w/env/NOPE does not exist: w/env has no key NOPE (keys: KEY, OTHER)"),
    (ns.HOT, HOT.replace("[w, env, KEY]", "[w, env, NOPE]"),
     "x/env/GOT: w/env/NOPE does not exist: w/env has no key NOPE (keys: KEY, OTHER, PGPASSWORD)"),
])
def test_initialize_refuses_a_lazy_reference_to_a_key_a_given_value_lacks(live, language, text, says):
    app = Portal(live.url, failover=False).create()
    try:
        with pytest.raises(PortalFault) as e:
            app.initialize(language, text=text, properties={"pw": SECRET})
        assert e.value.fault == "ResolutionFault", e.value
        assert says in str(e.value) and SECRET not in str(e.value)
        assert e.value.detail.findtext("{%s}kind" % ns.API) == "dangling-reference"
        assert e.value.detail.findtext("{%s}path" % ns.API) == "x/env/GOT"
        # nothing changed: still instantiated, no component recorded, and a right descriptor
        # is taken after it
        assert app.ping()["state"] == "instantiated"
        assert app.components() == [] and rows_of(live, app.reference.resource_id) == 0
        app.initialize(language, text=text.replace("NOPE", "OTHER"), properties={"pw": SECRET})
        assert app.wait_for("initialized", timeout=30) == "initialized"
    finally:
        app.terminate()


def test_cddlm_lang_resolve_and_deploy_refuse_it_before_asking_a_portal(live, tmp_path):
    path = tmp_path / "missing.xml"
    path.write_text(MISSING)
    for argv in (("lang", "resolve", str(path)), ("deploy", str(path), "--name", "nested-missing")):
        r = cddlm(*argv, portal=live.url, check=False)
        assert r.returncode == 1, r
        assert "x/env/GOT: w/env/NOPE does not exist: w/env has no key NOPE (keys: KEY, OTHER)" \
            in r.stderr, r.stderr
    with pytest.raises(PortalFault):
        Portal(live.url, failover=False).lookup("nested-missing")      # never created
