"""What Linux's /proc says about a process: identity (pid + start time), liveness, ports.

A pid alone is not an identity: it is reused. The start time (clock ticks since boot, field 22
of /proc/PID/stat) is fixed for the life of a process, so (pid, start time) names one process
across portal restarts.
"""

from __future__ import annotations

import os


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


def listening_ports(pid: int) -> list[int]:
    """TCP ports the process (or its group) listens on, from its socket inodes."""
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
        return []
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if len(parts) > 9 and parts[3] == "0A" and parts[9] in inodes:  # 0A = LISTEN
                        port = int(parts[1].rsplit(":", 1)[1], 16)
                        if port not in ports:
                            ports.append(port)
        except OSError:
            continue
    return sorted(ports)
