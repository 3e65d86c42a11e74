"""A real Prometheus (Debian's ``prometheus`` package) for the tests: installed where missing
(tests/debian.py), run on a free loopback port with its own configuration and storage in a
temporary folder, asked through its HTTP API, and stopped by its pid."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.debian import ensure_package


def _binaries() -> bool:
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


def promtool() -> str:
    why = ensure_package("prometheus", _binaries, "Prometheus (prometheus, promtool)")
    if why:
        pytest.skip(why)
    return shutil.which("promtool")


class Prometheus:
    """Scrapes ``target`` (host:port) every ``interval`` seconds, with a bearer ``token``."""

    def __init__(self, folder: Path, target: str, token: str | None = None, interval: float = 1.0):
        promtool()
        self.folder = folder
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        auth = ""
        if token:
            (folder / "token").write_text(token)
            (folder / "token").chmod(0o600)
            auth = "    authorization:\n      credentials_file: %s\n" % (folder / "token")
        (folder / "prometheus.yml").write_text(
            "global:\n  scrape_interval: %gs\n  evaluation_interval: %gs\n"
            "scrape_configs:\n  - job_name: cddlm\n    metrics_path: /metrics\n%s"
            "    static_configs:\n      - targets: ['%s']\n" % (interval, interval, auth, target))
        self.log = open(folder / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [shutil.which("prometheus"), "--config.file=%s" % (folder / "prometheus.yml"),
             "--storage.tsdb.path=%s" % (folder / "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=folder)
        deadline = time.monotonic() + 60
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("Prometheus did not start: %s" % (folder / "prometheus.log").read_text()[-2000:])
            time.sleep(0.1)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, expression: str) -> list[dict]:
        """The result of an instant query (a vector's samples)."""
        with urllib.request.urlopen(self.url + "/api/v1/query?" + urllib.parse.urlencode(
                {"query": expression}), timeout=10) as r:
            answer = json.loads(r.read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def wait_for(self, expression: str, timeout: float = 30.0) -> list[dict]:
        """Ask until ``expression`` has a result (the scrapes after an event come in their
        time), or fail saying what was asked."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.query(expression)
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError("Prometheus has no %s after %g s" % (expression, timeout))
            time.sleep(0.25)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
