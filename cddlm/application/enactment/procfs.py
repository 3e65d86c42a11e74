"""What Linux's /proc says about a process: identity (pid + start time), liveness, ports.

A pid alone is not an identity: it is reused. The start time (clock ticks since boot, field 22
of /proc/PID/stat) is fixed for the life of a process, so (pid, start time) names one process
across portal restarts.
"""

from __future__ import annotations

import os
from typing import Callable


def stat_fields(pid: int) -> list[str] | None:
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    # the command name (field 2) is in parentheses and may contain spaces
    end = data.rfind(")")
    return [data[: data.find(" ")], data[data.find("(") + 1: end]] + data[end + 2:].split()


def start_time(pid: int) -> str | None:
    fields = stat_fields(pid)
    return fields[21] if fields and len(fields) > 21 else None


def alive(pid: int | None, started: str | None) -> bool:
    """The process (pid, start time) exists and is not a zombie."""
    if not pid:
        return False
    fields = stat_fields(pid)
    if not fields or len(fields) < 22:
        return False
    if fields[2] in ("Z", "X", "x"):
        return False
    return started is None or fields[21] == started


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds (none: it cannot listen)."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def listening_table() -> dict[str, int]:
    """Socket inode -> port of every listening TCP socket of this network namespace: one read
    of /proc/net/tcp and tcp6, which list every socket of the namespace (a portal's own
    connections too), so that a pass over many processes reads them once, not once each."""
    table: dict[str, int] = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if len(parts) > 9 and parts[3] == "0A":     # 0A = LISTEN
                        table[parts[9]] = int(parts[1].rsplit(":", 1)[1], 16)
        except (OSError, StopIteration):
            continue
    return table


def listening_ports(pid: int, table: Callable[[], dict[str, int]] = listening_table) -> list[int]:
    """TCP ports the process (or its group) listens on, from its socket inodes; ``table``
    gives the namespace's listening sockets (``listening_table``, or one read shared by a
    pass), asked only of a process holding a socket."""
    inodes = socket_inodes(pid)
    if not inodes:
        return []
    listening = table()
    return sorted({listening[i] for i in inodes if i in listening})
