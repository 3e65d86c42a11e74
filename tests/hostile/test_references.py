"""Attacks on references into nested values (``Deployment.split_target``, ``RefTarget.select``)
through a live portal's SOAP ``resolve`` and ``ext:logs``: another spelling of a secret's path
(``w//grace``) answers it hidden, as its own spelling does; what a secret map holds (its
keys) is never said; a list index of thousands of digits is a clear fault, not an internal
error (tests/hostile/test_numbers.py); and a megabyte of path is answered with a
fault of a few kilobytes.

Tried and found sound: ``..``, ``.``, NUL (not XML: refused), U+10FFFF and bidi marks, keys
that look like XML (escaped; markup in ``path`` is refused by the schema), deep paths of
150,000 segments (answered in milliseconds), another tenant's application (answered as a
missing one: tests/security/test_tenancy.py)."""

from __future__ import annotations

from xml.sax.saxutils import escape

import pytest

from cddlm.errors import MAX_TEXT
from tests.hostile.conftest import HOT, SLEEPER, NATIVE, Portal

NUMBER = "4425"     # a hidden number: a text that holds it is masked, a number is not a text
HIDDEN_NUMBER = ("heat_template_version: 2015-04-30\n"
                 "parameters:\n  n: {type: number, hidden: true}\n"
                 "resources:\n  w:\n    type: CDDLM::Process\n    properties:\n"
                 "      argv: [sleep, '600']\n      grace: {get_param: n}\n"
                 "      readiness: {file: ready, timeout: {get_param: n}}\n")


@pytest.fixture
def sleeper(portal):
    """A running application of one process, ``w`` (sleep 3600), ended after the test."""
    app = portal.deploy(SLEEPER, NATIVE)
    yield app
    portal.terminate(app)


def resolve(p: Portal, app: str, path: str):
    return p.post(app, "<api:resolveRequest><api:path>%s</api:path></api:resolveRequest>" % escape(path))


def test_every_spelling_of_a_secret_path_answers_it_hidden(portal):
    p = portal
    app = p.create()
    assert p.initialize(app, HOT, text=HIDDEN_NUMBER, properties={"n": NUMBER}).fault() is None
    try:
        for path in ("w/grace", "w//grace", "/w//grace/", "w/readiness/timeout", "w//readiness//timeout",
                     "//w/readiness", "w//readiness"):
            a = resolve(p, app, path)
            assert a.fault() is None, (path, a.data[:500])
            assert NUMBER.encode() not in a.data, (path, a.data)
        # the spellings answer alike: the hidden mark, in the place of the value
        assert resolve(p, app, "w//grace").text("//api:value/@*[local-name()='hidden']") == "true"
        assert resolve(p, app, "w/argv//1").text("//api:value") == "600"
        assert resolve(p, app, "w//argv/1").text("//api:value") == "600"
    finally:
        p.terminate(app)


def test_a_megabyte_of_path_is_answered_with_a_short_fault(portal, sleeper):
    p, app = portal, sleeper
    for path in ("w/argv/" + "x" * 300_000, "w/" + "a/" * 150_000, "/".join(["w"] * 150_000)):
        a = resolve(p, app, path)
        assert a.fault() == "ResolutionFault", a.data[:500]
        assert len(a.data) < 3 * MAX_TEXT, len(a.data)
        assert len(a.description()) < 1000, a.description()
        assert a.text("//api:path").endswith("characters more)"), a.text("//api:path")[-100:]
        assert a.elapsed < 5, a.elapsed


KEY = "alice_Kq7secretKey"      # a key of a secret map: secret as its value is
SECRET_MAP = ('<application xmlns="%s"><component name="w" type="process">'
              '<attribute name="argv"><item>sleep</item><item>600</item></attribute>'
              '<attribute name="env" secret="true"><item name="%s">pw1</item></attribute></component>'
              '%%s</application>' % (NATIVE, KEY))
HIDDEN_MAP = ("heat_template_version: 2015-04-30\n"
              "parameters:\n  m: {type: json, hidden: true}\n"
              "resources:\n  w:\n    type: CDDLM::Process\n    properties:\n"
              "      argv: [sleep, '600']\n      env: {get_param: m}\n")


def test_what_a_secret_map_holds_is_never_said(portal):
    """A secret map (a native ``secret`` attribute, a HOT hidden json parameter) resolves
    hidden whole, and so does every path into it, there or not: an error listing its keys, or
    a key there answering otherwise than one that is not, would tell what it holds."""
    p = portal
    native, hot = p.create(), p.create()
    assert p.initialize(native, NATIVE, body=SECRET_MAP % "").fault() is None
    assert p.initialize(hot, HOT, text=HIDDEN_MAP, properties={"m": '{"%s": "pw1"}' % KEY}).fault() is None
    try:
        for app in (native, hot):
            answers = set()
            for path in ("w/env", "w/env/NOPE", "w/env/%s" % KEY, "w/env/%s/x" % KEY, "w/env/NOPE/x"):
                a = resolve(p, app, path)
                assert a.fault() is None and KEY.encode() not in a.data, (path, a.data[:800])
                answers.add(a.text("//api:value/@*[local-name()='hidden']"))
            assert answers == {"true"}
        # a lazy reference to a key it lacks is refused at initialize without naming its keys
        other = p.create()
        x = ('<component name="x" type="process"><attribute name="argv"><item>sleep</item>'
             '<item>1</item></attribute><attribute name="env"><item name="G">'
             '<ref path="w/env/NOPE" lazy="true"/></item></attribute></component>')
        a = p.initialize(other, NATIVE, body=SECRET_MAP % x)
        assert a.fault() == "ResolutionFault", a.data[:800]
        assert "w/env/NOPE does not exist: w/env is secret: what it holds is not said" in a.description()
        assert KEY.encode() not in a.data
    finally:
        for app in (native, hot):
            p.terminate(app)
