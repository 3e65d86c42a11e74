"""The test hosts of tests/netns.py: a portal per namespace answers on its own address, its
processes run in that namespace, a partition cuts it off and healing restores it, and nothing
is left behind."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

from tests.conftest import ROOT
from tests.netns import Cluster, leftover_namespaces, wait_until


TINY_SERVER = """
import socket, sys
s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
while True:
    c, _ = s.accept(); c.recv(4096); c.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok"); c.close()
"""


def answers(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def test_portals_in_namespaces_partition_and_cleanup(tmp_path):
    with Cluster(2) as cluster:
        portals = []
        for host in cluster.hosts:
            state = tmp_path / host.name
            state.mkdir()
            proc = host.popen([sys.executable, "-m", "cddlm.cli", "portal", "serve", "--host",
                               "127.0.0.1", "--port", "0", "--state-dir", str(state)],
                              cwd=ROOT, stdout=subprocess.PIPE)
            line = proc.stdout.readline().decode()
            assert line.startswith("portal ready at "), line
            portals.append(proc)
            assert host.runs_here(proc.pid)
            assert not cluster.hosts[1 - cluster.hosts.index(host)].runs_here(proc.pid)
        # a tiny HTTP server on each host's own address, reachable from the root namespace
        # (not http.server: it asks DNS for the host's name, and a namespace has no DNS)
        servers = [h.popen([sys.executable, "-c", TINY_SERVER, h.address, "18765"])
                   for h in cluster.hosts]
        h1, h2 = cluster.hosts
        url1, url2 = "http://%s:18765/" % h1.address, "http://%s:18765/" % h2.address
        assert wait_until(lambda: answers(url1) and answers(url2), 30)     # (two Pythons starting)
        h1.partition()
        assert not answers(url1, timeout=0.5)
        assert answers(url2, timeout=10)     # (a second is plenty, but for a loaded machine)
        h1.heal()
        assert wait_until(lambda: answers(url1), 30)
        pids = h1.pids()
        assert servers[0].pid in pids and portals[0].pid in pids
    assert not [n for n in leftover_namespaces() if cluster.tag in n]
