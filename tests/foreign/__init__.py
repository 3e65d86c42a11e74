"""A foreign CDDLM portal (``portal.js``, on node-soap's server) for the delegation tests:
another implementation of the spec, so that delegation is proven against something that is not
cddlm. node-soap is installed from npm into a cache folder outside the work tree the first time
(``$CDDLM_NODE_CACHE``, else ``~/.cache/cddlm-tests/node``); without node or npm the tests that
need it skip, saying so."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SOAP_VERSION = "1.13.0"      # npm `soap`, the version notes/wsdl-interop.md measured


def node_modules() -> Path:
    """node-soap's folder, installed once (under a lock: tests may run side by side)."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("the foreign test portal runs on node and node-soap: node or npm is missing")
    cache = Path(os.environ.get("CDDLM_NODE_CACHE") or Path.home() / ".cache" / "cddlm-tests" / "node")
    cache.mkdir(parents=True, exist_ok=True)
    modules = cache / "node_modules"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = modules / "soap" / "package.json"
        if not stamp.exists() or json.loads(stamp.read_text()).get("version") != SOAP_VERSION:
            done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent",
                                   "--prefix", str(cache), "soap@" + SOAP_VERSION],
                                  capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                pytest.skip("npm could not install soap@%s: %s" % (SOAP_VERSION, done.stderr[-500:]))
    return modules


@dataclass
class ForeignPortal:
    """The running foreign portal: ``url`` its endpoint, and its control surface."""
    proc: subprocess.Popen
    url: str

    @property
    def base(self) -> str:
        return self.url.split("/foreign/", 1)[0]

    def _get(self, what: str):
        with urllib.request.urlopen(self.base + "/control/" + what, timeout=10) as r:
            return json.loads(r.read())

    def mode(self, mode: str) -> None:
        """``ok``, ``503`` (every SOAP request answers an HTML 503 page) or ``hold-create``."""
        req = urllib.request.Request(self.base + "/control/mode", data=mode.encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    def log(self) -> list[dict]:
        """Every request it received: method, path, soapaction, xml."""
        return self._get("log")

    def apps(self) -> list[dict]:
        return self._get("apps")

    def wait_for(self, check, timeout: float = 30.0, what: str = "the foreign portal"):
        """Poll its control surface until ``check()`` is true (its answer), else fail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.05)
        raise AssertionError("%s: not within %gs (apps %s)" % (what, timeout, self.apps()))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


def start(log_dir: Path, timeout: float = 30.0) -> ForeignPortal:
    modules = node_modules()
    log = open(log_dir / ("foreign-%d.log" % time.time_ns()), "wb")
    proc = subprocess.Popen(["node", str(HERE / "portal.js"), "0"], stdout=subprocess.PIPE,
                            stderr=log, env=dict(os.environ, NODE_PATH=str(modules)))
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        if line.startswith("foreign portal ready at "):
            return ForeignPortal(proc, line.split(" at ", 1)[1].strip())
        if not line and proc.poll() is not None:
            break
    proc.kill()
    proc.wait()
    raise RuntimeError("the foreign portal did not start (see %s)" % log.name)
