"""procfs.listening_ports: a process's listening TCP ports from its socket inodes, the
namespace's table of listening sockets read once for a pass over many processes, and not at
all for a process holding no socket (a real process, real sockets on loopback)."""

from __future__ import annotations

import os
import socket
import subprocess

from cddlm.application.enactment import procfs


def test_a_listening_socket_is_found_and_a_connected_one_is_not():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname())
    try:
        ports = procfs.listening_ports(os.getpid())
        assert server.getsockname()[1] in ports
        assert client.getsockname()[1] not in ports
    finally:
        client.close()
        port = server.getsockname()[1]
        server.close()
    assert port not in procfs.listening_ports(os.getpid())     # closed: no longer listed


def test_the_table_is_read_only_for_a_process_holding_a_socket():
    reads = []

    def table() -> dict[str, int]:
        reads.append(1)
        return procfs.listening_table()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        assert procfs.listening_ports(sleeper.pid, table) == []
        assert reads == []          # no socket: /proc/net/tcp is not read at all
    finally:
        sleeper.kill()
        sleeper.wait()


def test_one_table_answers_for_many_processes():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        table = procfs.listening_table()
        assert port in table.values()
        # the same table, passed in, answers as a fresh read does
        shared = procfs.listening_ports(os.getpid(), lambda: table)
        assert shared == procfs.listening_ports(os.getpid())
    finally:
        server.close()
