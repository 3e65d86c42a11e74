"""Running the ``cddlm`` command as a user does: a real subprocess against a live portal on
loopback, with stdout not a terminal (or, with ``tty=True``, a pseudo-terminal)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parents[2]
NATIVE = "urn:cddlm:lang:components:1"
TRACEBACK = "Traceback (most recent call last)"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def env_for(portal: str | None) -> dict:
    env = dict(os.environ)
    env.pop("CDDLM_PORTAL", None)
    if portal:
        env["CDDLM_PORTAL"] = portal
    return env


def cddlm(*args: str, portal: str | None = None, check: bool = True, timeout: float = 120,
          cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    """The command, stdin not a terminal; ``env`` adds to (or, with None values, removes from)
    the environment."""
    environ = env_for(portal)
    for key, value in (env or {}).items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    r = subprocess.run([sys.executable, "-m", "cddlm.cli", *args], capture_output=True, text=True,
                       env=environ, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)
    assert TRACEBACK not in r.stderr, r.stderr
    if check:
        assert r.returncode == 0, r.stderr
    return r


def popen(*args: str, portal: str | None = None, **kwargs) -> subprocess.Popen:
    """The command in the background, with Ctrl-C (SIGINT) delivered as a terminal would,
    even when the test runs in a background job (which ignores SIGINT, and passes that on)."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "cddlm.cli", *args], env=env_for(portal),
                            cwd=ROOT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            **kwargs)


def reader(proc: subprocess.Popen, lines: list[str]) -> threading.Thread:
    """A thread appending each line ``proc`` prints on stdout to ``lines`` as it comes (to
    await a line without blocking the test on a read that may never end)."""
    def read():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def process(name: str, argv: list[str], readiness: dict | None = None, extra: str = "") -> str:
    """One native ``process`` component."""
    items = "".join("<item>%s</item>" % escape(a) for a in argv)
    ready = ""
    if readiness:
        ready = '<attribute name="readiness">%s</attribute>' % "".join(
            '<item name="%s">%s</item>' % (k, escape(v)) for k, v in readiness.items())
    return ('<component name="%s" type="process"><attribute name="argv">%s</attribute>%s%s'
            '</component>' % (name, items, ready, extra))


def descriptor(path: Path, *components: str) -> Path:
    path.write_text('<application xmlns="%s">\n%s\n</application>\n' % (NATIVE, "\n".join(components)))
    return path


def pid_alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def banner(live_portal) -> list[str]:
    """What a live portal printed on stderr before it said it was ready (its banner)."""
    return live_portal.log_path.read_text().splitlines()


def shape(lines: list[str], paths: bool = False) -> list[str]:
    """Lines as compared: ids, times, numbers (and with ``paths``, absolute paths) replaced,
    blanks collapsed (column widths follow the values). Every line counts: a quick wait's
    progress is one line on a pipe too, as on a terminal."""
    out: list[str] = []
    for line in lines:
        line = TIME.sub("<time>", UUID.sub("<uuid>", line))
        if paths:
            line = re.sub(r"/[^\s)]+", "<path>", line)
        out.append(" ".join(re.sub(r"\d+", "<n>", line).split()))
    return out
