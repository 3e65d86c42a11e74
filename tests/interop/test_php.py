"""PHP's SoapClient (Debian ``php-cli`` and ``php-soap``, installed with apt-get where the test
runs as root) drives a live portal from its served WSDL: ``client.php``. Skips, saying so,
where PHP or its soap extension is missing and cannot be installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.debian import ensure_package
from tests.interop import DESCRIPTOR, HERE, check_session, run_client


def _php() -> str:
    def present() -> bool:
        php = shutil.which("php")
        return bool(php) and subprocess.run([php, "-r", "exit(class_exists('SoapClient') ? 0 : 1);"],
                                            capture_output=True).returncode == 0
    for package in ("php-cli", "php-soap"):
        reason = ensure_package(package, present, "PHP with its soap extension (SoapClient)")
        if reason is None:
            break
    if reason:
        pytest.skip(reason)
    return shutil.which("php")


def test_a_php_soapclient_runs_a_session(live_portal):
    php = _php()
    url = live_portal().url
    check_session(run_client([php, str(HERE / "client.php"), url, "php-app", DESCRIPTOR]),
                  url, "php-app")
