"""``make ssh-cluster`` and ``make slurm-cluster``: a portal on the engine's test hosts, as a
user would run it, until Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Callable


def serve(options: list[str], close: Callable[[], None], env: dict | None = None) -> int:
    """Run ``cddlm portal serve OPTIONS`` until it stops or Ctrl-C (or SIGTERM) stops it, then
    ``close()`` the hosts."""
    portal = subprocess.Popen([sys.executable, "-m", "cddlm.cli", "portal", "serve", *options],
                              env=env)

    def interrupted(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupted)       # (a background job inherits it ignored)
    signal.signal(signal.SIGTERM, interrupted)
    try:
        portal.wait()
    except KeyboardInterrupt:
        portal.send_signal(signal.SIGINT)
        portal.wait(30)
    finally:
        close()
    return 0
