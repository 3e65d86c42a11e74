"""A real browser for the dashboard's tests: Debian's chromium driven by Playwright.

Never downloads a browser: it uses ``/usr/bin/chromium`` (``CDDLM_CHROMIUM`` overrides), which
``ensure_chromium`` installs with apt where the test runs as root on Debian, and skips with the
reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

CHROMIUM = os.environ.get("CDDLM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def ensure_chromium() -> str | None:
    """The reason the browser cannot run here, or None once ``CHROMIUM`` is there."""
    if os.path.exists(CHROMIUM):
        return None
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return "%s is missing and cannot be installed here (needs root and apt-get: " \
               "apt-get install chromium)" % CHROMIUM
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in ([apt, "install", "-y", "-q", "chromium"],
                [apt, "update", "-q"], [apt, "install", "-y", "-q", "chromium"]):
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=900, check=False)
        if os.path.exists(CHROMIUM):
            return None
    return "apt-get install chromium did not provide %s" % CHROMIUM


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    reason = ensure_chromium()
    if reason:
        pytest.skip(reason)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()
