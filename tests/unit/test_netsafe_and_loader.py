"""The outbound policy (cddlm/netsafe.py) and the descriptor loader that uses it."""

from __future__ import annotations

import os
import time

import pytest

from cddlm import netsafe
from cddlm.application.loader import Loader
from cddlm.errors import ResolutionError
from tests.notify.helpers import black_hole, unreachable, wsgi_server

LOOPBACK = ("127.0.0.0/8",)


def app(routes: dict):
    def serve(environ, start_response):
        status, headers, body = routes.get(environ["PATH_INFO"], ("404 Not Found", [], b""))
        if callable(body):
            body = body()
        start_response(status, headers + [("Content-Length", str(len(body)))])
        return [body]
    return serve


def resolver(*addresses):
    return lambda host, port: list(addresses)


@pytest.mark.parametrize("url,networks,public,why", [
    ("http://10.0.0.1/", LOOPBACK, False, "not in a network"),
    ("http://169.254.169.254/latest/meta-data/", LOOPBACK, True, "not in a network"),  # not public
    ("http://127.0.0.1/", (), True, "not in a network"),
    ("ftp://example.com/", LOOPBACK, True, "only http and https"),
    ("http://u:p@127.0.0.1/", LOOPBACK, False, "credentials"),
])
def test_the_policy_refuses(url, networks, public, why):
    with pytest.raises(netsafe.Refused) as e:
        netsafe.vet(url, networks, public=public)
    assert why in str(e.value)


def test_a_name_is_allowed_only_when_every_address_is():
    assert netsafe.vet("http://docs.example/x", (), public=True, resolver=resolver("93.184.216.34")).addresses
    with pytest.raises(netsafe.Refused):           # one of its addresses is the portal's own
        netsafe.vet("http://docs.example/x", (), public=True, resolver=resolver("93.184.216.34", "127.0.0.1"))


def test_get_follows_no_redirect_caps_the_size_and_keeps_its_deadline():
    routes = {"/ok": ("200 OK", [], b"<a/>"), "/moved": ("302 Found", [("Location", "/ok")], b""),
              "/big": ("200 OK", [], b"x" * 5000), "/gone": ("404 Not Found", [], b"secret page")}
    with wsgi_server(app(routes)) as url:
        assert netsafe.get(url + "/ok", LOOPBACK, max_bytes=100) == b"<a/>"
        for path, why in (("/moved", "redirects are not followed"), ("/big", "larger than 100"),
                          ("/gone", "HTTP 404")):
            with pytest.raises(netsafe.Unreachable) as e:
                netsafe.get(url + path, LOOPBACK, max_bytes=100)
            assert why in str(e.value) and "secret page" not in str(e.value)
    with black_hole() as hole:
        started = time.monotonic()
        with pytest.raises(netsafe.Unreachable) as silent:
            netsafe.get(hole, LOOPBACK, max_bytes=100, timeout=0.5)
        assert time.monotonic() - started < 2
    with pytest.raises(netsafe.Unreachable) as closed:
        netsafe.get(unreachable(), LOOPBACK, max_bytes=100)
    assert str(closed.value).split(": ", 1)[-1] == str(silent.value).split(": ", 1)[-1]


def test_the_loader_reads_only_what_the_operator_allowed(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "ok.cdl").write_text("<x/>")
    (tmp_path / "outside.cdl").write_text("<x/>")
    os.symlink(tmp_path / "outside.cdl", allowed / "link.cdl")
    os.mkfifo(allowed / "fifo.cdl")
    loader = Loader(allowed_dirs=(str(allowed),))
    assert loader((allowed / "ok.cdl").as_uri()) == b"<x/>"
    assert loader(str(allowed / "ok.cdl")) == b"<x/>"
    for location, why in ((tmp_path / "outside.cdl").as_uri(), "not below a folder"), \
            ((allowed / "link.cdl").as_uri(), "not below a folder"), \
            (str(allowed / "fifo.cdl"), "not a regular file"), \
            ("file:///proc/self/fd/0", "not below a folder"), \
            ("http://127.0.0.1:9/x.cdl", "not under a URL prefix"), \
            ("gopher://example/", "only file:"):
        started = time.monotonic()
        with pytest.raises(ResolutionError) as e:
            loader(location)
        assert why in e.value.message and time.monotonic() - started < 1, location
    with pytest.raises(ResolutionError) as e:          # nothing at all by default
        Loader()((allowed / "ok.cdl").as_uri())
    assert "none: see --allow-descriptor-dir" in e.value.message


def test_the_loader_fetches_under_an_allowed_prefix_only():
    routes = {"/lib/l.cdl": ("200 OK", [], b"<l/>"), "/other/o.cdl": ("200 OK", [], b"<o/>")}
    with wsgi_server(app(routes)) as url:
        loader = Loader(allowed_urls=(url + "/lib/",))       # a literal address allows itself
        assert loader(url + "/lib/l.cdl") == b"<l/>"
        with pytest.raises(ResolutionError):
            loader(url + "/other/o.cdl")
        # a prefix is a place, not the first characters of a string: neither another host
        # whose name begins like the allowed one's, nor a sibling folder, nor a way up
        loose = Loader(allowed_urls=("http://lib.example",), resolver=resolver("93.184.216.34"))
        for elsewhere in ("http://lib.example.evil/l.cdl", "http://lib.examplex/l.cdl",
                          "http://lib.example@evil/l.cdl"):
            with pytest.raises(ResolutionError) as e:
                loose(elsewhere)
            assert "not under a URL prefix" in e.value.message, elsewhere
        for sideways in (url + "/library/l.cdl", url + "/lib/../other/o.cdl"):
            with pytest.raises(ResolutionError) as e:
                loader(sideways)
            assert "not under a URL prefix" in e.value.message, sideways
        with pytest.raises(ResolutionError) as e:         # a name resolving to loopback: refused
            Loader(allowed_urls=("http://lib.example/",), resolver=resolver("127.0.0.1"))(
                "http://lib.example/l.cdl")
        assert "not in a network" in e.value.message
