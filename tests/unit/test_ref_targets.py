"""How a reference's target is read (``Deployment.split_target``) and how its keys select a part
of the value it names (``RefTarget.select``): pure, no portal."""

import pytest

from cddlm.errors import ResolutionError
from cddlm.lang import library, native
from cddlm.lang.model import Component, Deployment, Lazy, RefTarget, ResolveRequest, strings_of


def tree() -> Deployment:
    return Deployment([
        Component("w", "process", {"env": {"A": "1", "B": "2"}, "argv": ["run", "x"], "port": 80},
                  [Component("child", "process", {"port": 81})]),
        Component("site", "compound", {}, [Component("web", "process", {"port": 8080})]),
    ])


@pytest.mark.parametrize("target, split", [
    # every target that worked before: the last segment names the value
    ("w/port", ("w", "port", ())),
    ("w/pid", ("w", "pid", ())),
    ("site/web/port", ("site/web", "port", ())),
    ("w/child/port", ("w/child", "port", ())),
    ("/w/port/", ("w", "port", ())),
    # nested: the longest run of component names, then the value, then its keys
    ("w/env/A", ("w", "env", ("A",))),
    ("w/argv/1", ("w", "argv", ("1",))),
    ("site/web/env/X/Y", ("site/web", "env", ("X", "Y"))),
    ("w/child/env/PGPASSWORD", ("w/child", "env", ("PGPASSWORD",))),
    # a name that is both a child and the last segment still names the value (as before)
    ("w/child", ("w", "child", ())),
])
def test_a_target_splits_into_component_value_and_keys(target, split):
    at = tree().split_target(target)
    assert (at.component, at.name, at.keys) == split
    assert at.target == target


@pytest.mark.parametrize("target", ["", "w", "nope/port", "nope/env/A", "/"])
def test_a_target_that_names_no_component_is_a_resolution_error(target):
    with pytest.raises(ResolutionError) as e:
        tree().split_target(target)
    assert e.value.kind == "dangling-reference"
    assert "names no component" in e.value.message


def test_keys_select_a_maps_key_and_a_lists_index():
    t = tree()
    w = t.find("w")
    assert t.split_target("w/env/B").select(w.attributes["env"]) == "2"
    assert t.split_target("w/argv/0").select(w.attributes["argv"]) == "run"
    assert t.split_target("w/env").select(w.attributes["env"]) == {"A": "1", "B": "2"}
    deep = {"a": [{"b": "c"}]}
    assert RefTarget("w/m/a/0/b", "w", "m", ("a", "0", "b")).select(deep) == "c"


@pytest.mark.parametrize("target, value, says", [
    ("w/env/NOPE", {"A": "vA1", "B": "vB2"}, "w/env/NOPE does not exist: w/env has no key NOPE (keys: A, B)"),
    ("w/env/X", {}, "w/env has no key X (keys: none)"),
    ("w/argv/2", ["runQ", "xQ"], "w/argv is a list of 2 items: it has no item 2"),
    ("w/argv/first", ["runQ", "xQ"], "it has no item first"),
    ("w/argv/-1", ["runQ", "xQ"], "it has no item -1"),
    ("w/argv/\u00b2", ["runQ", "xQ"], "it has no item \u00b2"),
    ("w/port/x", 8080, "w/port is a single value, not a map or a list: it has no key x"),
    ("w/env/A/B", {"A": "vA1"}, "w/env/A is a single value"),
])
def test_a_key_that_is_not_there_says_what_is(target, value, says):
    at = tree().split_target(target)
    with pytest.raises(ResolutionError) as e:
        at.select(value)
    assert says in e.value.message
    assert e.value.kind == "dangling-reference" and e.value.path == target
    assert not any(v in e.value.message for v in strings_of(value))     # never a value


def test_many_keys_are_listed_only_in_part():
    value = {"K%03d" % i: i for i in range(50)}
    with pytest.raises(ResolutionError) as e:
        RefTarget("w/env/NOPE", "w", "env", ("NOPE",)).select(value)
    assert "K019, ..." in e.value.message and "K020" not in e.value.message


def test_a_lazy_value_on_the_way_is_resolved_first_or_refused():
    at = RefTarget("w/env/A", "w", "env", ("A",))
    env = Lazy("ref", "v/env")
    asked = []
    assert at.select(env, lambda v: asked.append(v) or {"A": "from v"}) == "from v"
    assert asked == [env]
    with pytest.raises(ResolutionError) as e:
        at.select(env)
    assert e.value.kind == "lazy-value" and "only known on its host" in e.value.message
    # the part selected may itself be lazy: it is returned as it is, for the caller to resolve
    assert at.select({"A": Lazy("property", "p")}) == Lazy("property", "p")


def resolve_native(body: str) -> Deployment:
    text = '<application xmlns="urn:cddlm:lang:components:1">%s</application>' % body
    return library.check(native.LANGUAGE.resolve(ResolveRequest(text.encode())).deployment)


W = ('<component name="w" type="process"><attribute name="argv"><item>sleep</item><item>9</item>'
     '</attribute><attribute name="env"><item name="KEY" secret="true">s3cret</item>'
     '<item name="OTHER">plain</item></attribute></component>')


def reader(name: str, attr: str, ref: str) -> str:
    return ('<component name="%s" type="process"><attribute name="argv"><item>sleep</item>'
            '<item>9</item></attribute>\n<attribute name="%s">%s</attribute></component>' % (name, attr, ref))


def test_an_eager_native_reference_copies_a_nested_value_and_its_secrecy():
    d = resolve_native(W + reader("x", "description", '<ref path="w/env/KEY"/>')
                       + reader("y", "description", '<ref path="w/env/OTHER"/>')
                       + reader("z", "cwd", '<ref path="w/argv/0"/>'))
    assert [d.find(c).attributes[a] for c, a in (("x", "description"), ("y", "description"),
                                                   ("z", "cwd"))] == ["s3cret", "plain", "sleep"]
    assert d.is_secret("x/description") and not d.is_secret("y/description")


def test_an_eager_native_reference_to_a_missing_key_says_so_with_its_line():
    with pytest.raises(ResolutionError) as e:
        resolve_native(W + reader("x", "description", '<ref path="w/env/NOPE"/>'))
    assert "w/env has no key NOPE (keys: KEY, OTHER)" in e.value.message
    assert e.value.line == 2


def test_a_lazy_reference_to_a_nested_secret_is_a_secret():
    d = resolve_native(W + '<component name="x" type="process"><attribute name="argv">'
                       '<item>sleep</item><item>9</item></attribute><attribute name="env">'
                       '<item name="P"><ref path="w/env/KEY" lazy="true"/></item>'
                       '<item name="O"><ref path="w/env/OTHER" lazy="true"/></item></attribute></component>')
    assert d.is_secret("x/env/P") and not d.is_secret("x/env/O")
    assert d.is_secret("w/env/KEY") and not d.is_secret("w/env/OTHER")


# -- as a component's host reads them (HostValues, with no store: the rows are given) ----------
def host_values(env: dict, rows: dict | None = None):
    from types import SimpleNamespace

    from cddlm.application.enactment.values import HostValues
    t = Deployment([Component("x", "process", {"argv": ["sleep", "9"], "env": env}),
                    Component("w", "process", {"argv": ["sleep", "9"]})])
    app = SimpleNamespace(id="urn:uuid:0", name="a", properties={})
    return HostValues(app, t, rows or {}, "localhost", "x", lambda path: "/nowhere")


def test_a_nested_reference_resolves_only_the_part_it_names():
    # B's reference is waited for only by who reads B; A reads a sibling, and a chain of them
    hv = host_values({"A": Lazy("ref", "x/env/C"), "B": Lazy("ref", "w/pid"), "C": "c",
                      "D": Lazy("ref", "x/env/A")})
    assert hv.reference("x/env/A") == hv.reference("x/env/D") == "c"
    with pytest.raises(ResolutionError) as e:
        hv.reference("x/env/B")
    assert e.value.kind == "unresolved-reference" and "w/pid has no value yet" in e.value.message
    with pytest.raises(ResolutionError) as e:
        hv.reference("x/env")                  # the whole map needs B too
    assert e.value.kind == "unresolved-reference"


def test_a_nested_reference_loop_and_a_missing_key_are_clear_errors():
    hv = host_values({"A": Lazy("ref", "x/env/B"), "B": Lazy("ref", "x/env/A"),
                      "S": Lazy("ref", "x/env")})
    with pytest.raises(ResolutionError) as e:
        hv.reference("x/env/A")
    assert e.value.kind == "reference-loop"
    with pytest.raises(ResolutionError) as e:
        hv.reference("x/env/S")               # a part of the map that holds it
    assert e.value.kind == "reference-loop"
    with pytest.raises(ResolutionError) as e:
        hv.reference("x/env/NOPE")
    assert e.value.kind == "dangling-reference"
    assert e.value.message == "x/env/NOPE does not exist: x/env has no key NOPE (keys: A, B, S)"
    with pytest.raises(ResolutionError) as e:
        hv.reference("nope/env/A")
    assert e.value.kind == "dangling-reference" and "names no component" in e.value.message


def test_a_part_of_a_runtime_value_not_there_yet_is_waited_for():
    from types import SimpleNamespace
    row = SimpleNamespace(host="", runtime={"ports": [8080]}, pid=None, pid_start=None)
    hv = host_values({}, {"w": row})
    assert hv.reference("w/ports/0") == 8080
    with pytest.raises(ResolutionError) as e:
        hv.reference("w/ports/1")              # a second port, not open yet: asked again
    assert e.value.kind == "unresolved-reference"
    assert "w/ports is a list of 1 item: it has no item 1" in e.value.message


def test_an_eager_reference_in_an_item_fills_that_item_only():
    d = resolve_native(W + reader("x", "env", '<item name="A">a</item><item name="GOT"><ref path="w/env/KEY"/>'
                                  '</item><item name="O"><ref path="w/env/OTHER"/></item>')
                       + reader("y", "traits", '<item>t</item><item><ref path="w/argv/1"/></item>')
                       + reader("z", "env", '<item name="ALL"><ref path="x/env/O"/></item>'))
    assert d.find("x").attributes["env"] == {"A": "a", "GOT": "s3cret", "O": "plain"}
    assert d.find("y").attributes["traits"] == ["t", "9"]
    assert d.find("z").attributes["env"] == {"ALL": "plain"}      # a chain through an item
    # the copy of a secret is secret where it stands (the item), and only there
    assert d.is_secret("x/env/GOT") and not d.is_secret("x/env/O") and not d.is_secret("x/env/A")


def test_an_eager_reference_to_the_map_that_holds_it_is_a_loop():
    with pytest.raises(ResolutionError) as e:
        resolve_native(W + reader("x", "env", '<item name="A">a</item><item name="ME"><ref path="x/env"/></item>'))
    assert e.value.kind == "reference-loop"
    # a sibling of the same map is no loop
    d = resolve_native(W + reader("x", "env", '<item name="A"><ref path="x/env/B"/></item>'
                                  '<item name="B"><ref path="w/env/OTHER"/></item>'))
    assert d.find("x").attributes["env"] == {"A": "plain", "B": "plain"}
