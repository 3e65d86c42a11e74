"""``make ssh-cluster`` and ``make slurm-cluster``: a portal on the engine's test hosts, as a
user would run it, until Ctrl-C. A portal killed by a signal (``kill -9`` in the tour) is
started again on the same state, as a supervisor would, so that its banner shows what it
re-adopted; the hosts stay meanwhile."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Callable


def serve(options: list[str], close: Callable[[], None], env: dict | None = None) -> int:
    """Run ``cddlm portal serve OPTIONS`` until it stops or Ctrl-C (or SIGTERM) stops it, then
    ``close()`` the hosts; one killed by a signal is started again. The portal's exit status."""
    def interrupted(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupted)       # (a background job inherits it ignored)
    signal.signal(signal.SIGTERM, interrupted)
    portal = None
    try:
        while True:
            portal = subprocess.Popen([sys.executable, "-m", "cddlm.cli", "portal", "serve",
                                       *options], env=env)
            code = portal.wait()
            if code >= 0:       # it stopped by itself (an error it said, or a stop asked)
                return code
            print("the portal was killed (%s): starting it again, as a supervisor would; the "
                  "hosts stay (Ctrl-C stops everything)" % signal.Signals(-code).name,
                  file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        if portal is not None and portal.poll() is None:
            portal.send_signal(signal.SIGINT)
            portal.wait(30)
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)     # a second Ctrl-C: the hosts go all the same
        print("removing the test hosts, and what runs on them", file=sys.stderr, flush=True)
        close()
