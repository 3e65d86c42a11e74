"""Hints that lead somewhere (issue 31): https against a plain-HTTP portal is not a certificate
problem; a port that is no number is a usage error, said once; resolving what a component does
not have says it does not exist; a placement fault lists levels as words; and a deploy whose
initialize is refused says the application was removed again."""

from __future__ import annotations

from tests.cli.helpers import cddlm


def test_https_against_a_plain_http_portal_says_so(shared_portal):
    base = shared_portal.url.rsplit("/cddlm/", 1)[0]
    r = cddlm("ls", "--portal", base.replace("http://", "https://"), check=False)
    assert r.returncode == 3
    line = r.stderr.strip()
    assert "does not speak TLS: what answers there is plain HTTP" in line, line
    assert "then %s/cddlm/portal" % base in line and "certificate" not in line, line


def test_a_port_that_is_no_number_is_one_usage_error():
    for value in ("127.0.0.1:notaport", "http://127.0.0.1:99999/", "localhost:0"):
        r = cddlm("ls", "--portal", value, check=False)
        assert r.returncode == 2, (value, r.stderr)
        assert r.stderr.strip() == "cddlm: --portal %r: the port must be a number from 1 to " \
            "65535" % value, r.stderr


def test_resolving_what_a_component_does_not_have_says_it_does_not_exist(shared_portal):
    cddlm("deploy", "examples/hello.xml", "--name", "hints-hello", portal=shared_portal.url)
    try:
        r = cddlm("resolve", "hints-hello", "web/nonexistent", portal=shared_portal.url, check=False)
        assert r.returncode == 1
        assert "web/nonexistent does not exist: web has no attribute or runtime value of that " \
            "name (attributes: argv," in r.stderr and "runtime values: pid, host," in r.stderr
        assert "no value yet" not in r.stderr and "lang resolve" not in r.stderr, r.stderr
        assert "`cddlm resolve APP COMPONENT` prints what a component has" in r.stderr
        r = cddlm("resolve", "hints-hello", "web", portal=shared_portal.url)    # as the hint says
        assert '"argv"' in r.stdout and '"pid"' in r.stdout
    finally:
        cddlm("destroy", "hints-hello", "--force", portal=shared_portal.url)


def test_a_refused_deploy_names_the_levels_and_says_the_application_was_removed(shared_portal):
    r = cddlm("deploy", "examples/multihost/spread.xml", portal=shared_portal.url, check=False)
    assert r.returncode == 1
    assert r.stdout.startswith("created spread (urn:uuid:")
    line = r.stderr.strip()
    assert line.startswith("cddlm: PlacementFault: ") and "(levels are host)" in line, line
    assert "['" not in line and "; spread was removed" in line, line
    assert "spread" not in cddlm("ls", "-q", portal=shared_portal.url).stdout.split()
