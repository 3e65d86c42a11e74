"""systemd's readiness protocol (sd_notify(3)), for a unit of ``Type=notify``: a datagram of
``NAME=VALUE`` lines to the unix socket named by ``$NOTIFY_SOCKET`` (a path, or ``@name`` in
the abstract namespace). Outside systemd the variable is unset and nothing is sent."""

from __future__ import annotations

import os
import socket


def notify(*lines: str, environ: dict | None = None) -> bool:
    """Send ``lines`` (``READY=1``, ``STOPPING=1``, ``STATUS=...``); whether anyone listens."""
    address = (environ if environ is not None else os.environ).get("NOTIFY_SOCKET", "")
    if address.startswith("@"):
        address = "\0" + address[1:]
    elif not address.startswith("/"):
        return False        # unset, or a kind of socket this does not speak (vsock)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(address)
            s.sendall("\n".join(lines).encode("utf-8"))
        return True
    except OSError:
        return False
