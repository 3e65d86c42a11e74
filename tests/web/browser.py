"""A real browser for the dashboard's tests: Debian's chromium driven by Playwright.

Never downloads a browser: it uses ``/usr/bin/chromium`` (``CDDLM_CHROMIUM`` overrides), which
``ensure_chromium`` installs with apt where the test runs as root on Debian, and skips with the
reason otherwise.
"""

from __future__ import annotations

import os

import pytest

from tests.debian import ensure_package

CHROMIUM = os.environ.get("CDDLM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def ensure_chromium() -> str | None:
    """The reason the browser cannot run here, or None once ``CHROMIUM`` is there."""
    return ensure_package("chromium", lambda: os.path.exists(CHROMIUM), CHROMIUM)


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
