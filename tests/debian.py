"""Debian packages a test needs and the project's own setup installs where missing.

``ensure_package`` installs a package with apt-get when the test runs as root on Debian (the
development machine and CI) and otherwise returns the reason it cannot, for the test to skip
with. It never downloads anything but Debian's own packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Callable


def ensure_package(package: str, present: Callable[[], bool], what: str) -> str | None:
    """None once ``present()`` holds (installing ``package`` if needed), else why not."""
    if present():
        return None
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return "%s is missing and cannot be installed here (needs root and apt-get: " \
               "apt-get install %s)" % (what, package)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in ([apt, "install", "-y", "-q", package],
                [apt, "update", "-q"], [apt, "install", "-y", "-q", package]):
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=900, check=False)
        if present():
            return None
    return "apt-get install %s did not provide %s" % (package, what)
