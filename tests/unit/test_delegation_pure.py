"""The pure parts of delegation: start groups, client tokens, a host's share, and the native
writer (what a front portal sends a host portal parses back to the same components)."""

from __future__ import annotations

from lxml import etree

from cddlm import ns
from cddlm.application import secrets
from cddlm.application.enactment.remote import foreign_refs, share, start_groups, token_for
from cddlm.lang import native, registry
from cddlm.lang.model import Component, Deployment, Lazy
from cddlm.lang.registry import ResolveRequest


def proc(name: str, **attrs) -> Component:
    return Component(name, "process", {"argv": ["sleep", "1"], **attrs})


TREE = Deployment([
    Component("steps", "sequence", {}, [proc("a", host="h1"), Component("mid", "compound", {}, [
        proc("b", host="h2"), proc("b2", host="h1")]), proc("c", host="h1")]),
    proc("free", host="h1"),
])


def test_start_groups_separate_what_a_sequence_orders_and_nothing_else():
    groups = start_groups(TREE)
    assert groups == {"steps/a": "0", "steps/mid/b": "1", "steps/mid/b2": "1", "steps/c": "2",
                      "free": "0"}


def test_a_token_depends_on_every_input_and_on_nothing_else():
    t = token_for("urn:uuid:1", 2, "h1", "0")
    assert t == token_for("urn:uuid:1", 2, "h1", "0") and t.startswith("cddlm-")
    assert len({t, token_for("urn:uuid:1", 3, "h1", "0"), token_for("urn:uuid:1", 2, "h2", "0"),
                token_for("urn:uuid:1", 2, "h1", "1"), token_for("urn:uuid:2", 2, "h1", "0")}) == 5


def test_a_share_keeps_paths_and_drops_the_host_pin():
    part = Deployment(share(TREE, {"steps/mid/b2", "free"}))
    assert [p for p, _ in part.walk()] == ["steps", "steps/mid", "steps/mid/b2", "free"]
    assert part.find("steps").type == "compound"       # the order is the front's business
    assert "host" not in part.find("free").attributes


def test_a_reference_into_a_nested_value_is_foreign_by_its_component_only():
    # w/env/X is a value of w: lazy for the host portal whose share holds w, else the front's
    refs = {"OWN": Lazy("ref", "s/w/env/X"), "OWN_ITEM": Lazy("ref", "s/w/argv/0"),
            "OTHER": Lazy("ref", "s/v/env/X"), "PLAIN": Lazy("ref", "s/v/pid"),
            "NONE": Lazy("ref", "nope/env/X"), "PROP": Lazy("property", "s/v/env/X")}
    tree = Deployment([Component("s", "compound", {}, [
        Component("w", "process", {"argv": ["sleep", "9"], "env": {"X": "1"}}),
        Component("v", "process", {"argv": ["sleep", "9"], "env": {"X": "2"}}),
        Component("u", "process", {"argv": ["sleep", "9"], "env": refs})])])
    mine = {"s/w", "s/u"}
    assert foreign_refs(tree, share(tree, mine), mine) == {"s/v/env/X", "s/v/pid", "nope/env/X"}


def test_the_native_writer_round_trips_values_and_lazy_references():
    comp = Component("web", "process", {
        "argv": ["python3", "-m", "http.server", 0], "env": {"DB": Lazy("ref", "db/port"),
                                                             "N": Lazy("property", "n", "3", True)},
        "optional": True, "empty": {}})
    el = native.to_xml([comp])
    again = registry.get(ns.NATIVE).resolve(ResolveRequest(el, properties={})).deployment.find("web")
    assert again.attributes["argv"] == ["python3", "-m", "http.server", "0"]
    assert again.attributes["env"] == {"DB": Lazy("ref", "db/port"), "N": Lazy("property", "n", "3", True)}
    assert again.attributes["optional"] in ("true", True)
    assert "empty" not in again.attributes


def test_the_native_writer_marks_every_secret_so_the_reader_keeps_it_secret():
    # what a front portal keeps secret, as a share carries it: a map item, a whole attribute,
    # a list (secret as a whole), a lazy property read inside a secret, a value put in the
    # place of a reference to a secret elsewhere
    web = Component("web", "process", {
        "argv": ["run", "--token", "Tk1list"], "cwd": "plain",
        "env": {"PASS": "Pw1item", "HOME": "/h", "KEY": Lazy("property", "key"), "DB": "Db1copied"}})
    tree = Deployment([Component("grp", "compound", {}, [web])],
                      secrets={"grp/web/argv", "grp/web/env/PASS", "grp/web/env/KEY", "grp/web/env/DB"})
    el = native.to_xml(tree.components, tree.secrets)
    again = registry.get(ns.NATIVE).resolve(ResolveRequest(el, properties={})).deployment
    assert again.secrets == tree.secrets
    assert again.secret_properties == {"key"}
    assert {"Tk1list", "Pw1item", "Db1copied"} <= again.secret_strings()
    assert again.find("grp/web").attributes == web.attributes      # the values themselves go
    shown = secrets.redact_descriptor(ns.NATIVE, etree.tostring(el, encoding="unicode"))
    assert not any(s in shown for s in ("Tk1list", "Pw1item", "Db1copied")) and "/h" in shown
    # without the paths (the code before): nothing was marked, the host portal returned it all
    assert native.to_xml(tree.components).find(".//{%s}item[@secret]" % ns.NATIVE) is None
