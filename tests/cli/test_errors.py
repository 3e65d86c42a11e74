"""The one error boundary (issue 13): every failure is one line on stderr with a hint and a
documented exit code, ``--debug`` shows the traceback, a closed pipe ends quietly; and
``--portal`` takes a base URL, host:port or the endpoint."""

from __future__ import annotations

import argparse
import http.server
import socket
import threading

import pytest

from cddlm.cli import build_parser
from tests.cli.helpers import TRACEBACK, cddlm, popen
from tests.conftest import free_port


def test_portal_accepts_a_base_url_host_port_or_the_endpoint(shared_portal):
    endpoint = shared_portal.url                       # http://127.0.0.1:P/cddlm/portal
    base = endpoint[:-len("/cddlm/portal")]
    for form in (endpoint, base, base + "/", base[len("http://"):], endpoint + "?wsdl"):
        r = cddlm("ls", "--portal", form)
        assert r.stdout.startswith(("NAME", "no applications")), (form, r.stdout)
    # before the command too, as docs/cli.md writes it, and $CDDLM_PORTAL in any form
    assert cddlm("--portal", base + "/", "ls").returncode == 0
    assert cddlm("ls", portal=base[len("http://"):]).returncode == 0


def test_no_portal_answers_is_one_line_with_a_hint_and_exit_3():
    port = free_port()
    r = cddlm("ls", "--portal", "127.0.0.1:%d" % port, check=False)
    assert r.returncode == 3
    assert r.stderr == ("cddlm: no portal answers at http://127.0.0.1:%d/cddlm/portal "
                        "(is `cddlm portal serve` running? Another portal: --portal URL or "
                        "$CDDLM_PORTAL)\n" % port)
    r = cddlm("status", "x", check=False, portal="http://127.0.0.1:%d/" % port)
    assert r.returncode == 3 and r.stderr.count("\n") == 1 and "no portal answers" in r.stderr


def test_a_port_that_closes_without_answering_is_one_short_line():
    """A wrong port (PostgreSQL's, say) takes the request and closes: the line says so once,
    not the URL three times and requests' tuple."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)

        def close_each():
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                conn.recv(65536)
                conn.close()
        threading.Thread(target=close_each, daemon=True).start()
        port = listener.getsockname()[1]
        r = cddlm("ls", "--portal", "127.0.0.1:%d" % port, check=False)
    assert r.returncode == 3
    assert r.stderr == ("cddlm: the portal at http://127.0.0.1:%d/cddlm/portal did not answer as "
                        "a portal: Remote end closed connection without response (is it running, "
                        "and is the scheme right: http or https?)\n" % port)


def test_something_else_answering_is_not_taken_for_a_portal(tmp_path):
    (tmp_path / "index.html").write_text("<html><body>not a portal</body></html>")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(tmp_path), **k)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        r = cddlm("ls", "--portal", "127.0.0.1:%d" % server.server_address[1], check=False)
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == 3 and r.stderr.count("\n") == 1
    assert "/cddlm/portal is not a CDDLM portal: 501" in r.stderr     # (its answer to a POST)


def test_debug_shows_the_traceback_and_faults_keep_their_names(shared_portal):
    r = cddlm("status", "no-such-app", portal=shared_portal.url, check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "no application named 'no-such-app'" in r.stderr and "`cddlm ls`" in r.stderr
    p = popen("--debug", "ls", "--portal", "127.0.0.1:%d" % free_port())
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3 and TRACEBACK in err and err.rstrip().endswith("or $CDDLM_PORTAL)")


def test_a_closed_pipe_ends_quietly(shared_portal):
    cddlm("deploy", "examples/hello.xml", "--name", "piped", portal=shared_portal.url)
    try:
        # the reader is gone before the command writes (`cddlm status piped | head -0`)
        p = popen("status", "piped", portal=shared_portal.url)
        p.stdout.close()
        err = p.stderr.read()
        assert p.wait(60) == 141 and err == ""
        p = popen("ls", "--json", portal=shared_portal.url)
        p.stdout.close()
        assert p.wait(60) == 141 and p.stderr.read() == ""
    finally:
        cddlm("terminate", "piped", portal=shared_portal.url)


def test_usage_errors_exit_2_and_version():
    assert cddlm("frobnicate", check=False).returncode == 2
    r = cddlm("logs", "x", "-n", "0", check=False)
    assert r.returncode == 2 and "between 1 and 1000" in r.stderr
    assert cddlm("--version").stdout.strip().startswith("cddlm 0.")
    assert "deploy" in cddlm("--help").stdout


def _arguments(parser: argparse.ArgumentParser, path=("cddlm",)):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _arguments(child, path + (name,))
        else:
            yield " ".join(path), action


def test_every_argument_of_every_command_says_what_it_is():
    missing = ["%s %s" % (path, "/".join(a.option_strings) or a.dest)
               for path, a in _arguments(build_parser()) if not a.help]
    assert not missing, missing


@pytest.mark.parametrize("args", [["status"], ["deploy"], ["logs"], ["resolve", "x"]])
def test_missing_arguments_are_usage_errors(args):
    r = cddlm(*args, check=False)
    assert r.returncode == 2 and "usage: cddlm" in r.stderr
