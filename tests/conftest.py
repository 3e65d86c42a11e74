"""Fixtures shared by the whole suite: real portals (in process and as a subprocess on a real
port), PostgreSQL when it runs, and the location of ``../shared`` when it exists."""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.web.browser import browser  # noqa: F401  (one real browser a session, for every test)

ROOT = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("CDDLM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def shared_dir() -> Path | None:
    for candidate in (ROOT.parent / "shared", Path("/work/shared")):
        if candidate.is_dir():
            return candidate
    return None


def require_shared(sub: str) -> Path:
    base = shared_dir()
    if base is None or not (base / sub).exists():
        pytest.skip("../shared/%s is not on this machine (it ships with the project's workspace, "
                    "not with a clone)" % sub)
    return base / sub


# -- which tests run in parallel -------------------------------------------------------------------
# `make test` runs the suite in two parts: every test not marked ``serial`` in parallel workers
# (pytest-xdist, ``WORKERS``), then the ``serial`` ones one at a time in each of two lanes (below).
# A test is serial when tests running beside it would make it wrong or flaky, for the reason
# given (a folder, a file or one test: the start of its node id); a test can also say so itself
# with ``@pytest.mark.serial``.
SERIAL = {
    "tests/multihost/": "network namespaces of host portals, ten portals at a time",
    "tests/engines/": "an sshd or a Slurm cluster in network namespaces",
    "tests/test_netns.py": "network namespaces",
    "tests/hostile/": "floods, and a bystander's answer timed within a second",
    "tests/test_scale.py": "thousands of processes, and curves of their times",
    "tests/test_crash.py": "SIGKILL and restart under time budgets",
    "tests/property/": "many processes per example, each step within its deadline",
    "tests/ops/": "Prometheus scraping on its schedule, make serve in a terminal, timed health",
    "tests/test_httpserver.py": "slow clients, a good request answered within 0.5-1 s",
    "tests/test_rows_held.py": "another portal's change seen within 0.1 s",
    "tests/notify/test_outbound.py": "deadlines of outbound posts within 0.1 s",
    "tests/unit/test_component_logs.py": "the log capper's schedule, timed to a second",
    "tests/lang/test_secrets_and_bounds.py::test_templates_are_bounded_before_anything_is_built":
        "2 s of CPU at most, on the edge beside other work",
    "tests/notify/test_delivery.py::test_a_full_lifecycle_reaches_a_consumer_promptly":
        "each event delivered within a second",
    "tests/security/test_delivery_shares.py::test_one_tenant_cannot_take_every_notification_sender":
        "each of bob's events within a second, for 15 s, while alice's consumers hold senders",
    "tests/cli/test_deploy.py::test_a_timeout_says": "the command's end timed to the second",
    "tests/cli/test_deploy.py::test_terminate_and_destroy_force": "the command's end timed",
    "tests/test_conversations.py::test_conversation[conformance/view-termination-time.yaml]":
        "a view's termination time a second away, raced by the expiry on a busy machine",
    "tests/web/test_browser.py": "a browser watching a host go down within its wait",
}


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "serial: runs alone, after the parallel part of make test "
                                       "(tests/conftest.py SERIAL says why)")
    _enough_inotify()


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if item.nodeid.startswith(tuple(SERIAL)):
            item.add_marker(pytest.mark.serial)


# With ``--lanes`` (make test's serial part, in two pytest-xdist workers) the tests run in two
# lanes side by side, one test at a time in each: the tests of test hosts in network namespaces,
# which spend their time waiting on leases, heartbeats and restarts (one lane: their bridges'
# subnets are drawn at random and their host portals share a port) with the CLI's tests, and
# all the others: about half the time each (one at a time, the namespaced hosts took 13 of the
# serial part's 29 minutes and the CLI's tests 1; side by side, their lane the longer).
HOSTS_LANE = ("tests/multihost/", "tests/engines/", "tests/test_netns.py", "tests/cli/")


def pytest_addoption(parser) -> None:
    parser.addoption("--lanes", action="store_true",
                     help="with -n 2: the tests of HOSTS_LANE (tests/conftest.py) in one worker, "
                          "the others in the other")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if not config.getoption("lanes"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        # xdist's own --dist loadgroup reads the groups from node ids that pytest 9 no longer
        # lets a plugin change: the lane is told from the node id here instead
        def _split_scope(self, nodeid: str) -> str:
            return "hosts" if nodeid.startswith(HOSTS_LANE) else "alone"

    return Lanes(config, log)


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")


def _enough_inotify(wanted: int = 1024) -> None:
    """Every portal watches its components' logs through an inotify instance of its own, and
    the kernel allows an account 128 by default: parallel workers (and other users' tests) use
    them up, and portals fall back to looking on a schedule. As root, the limit is raised."""
    try:
        if os.geteuid() == 0 and int(INOTIFY_INSTANCES.read_text()) < wanted:
            INOTIFY_INSTANCES.write_text(str(wanted))
    except (OSError, ValueError):
        pass


def postgres_available() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=0.5):
            pass
    except OSError:
        return False
    try:
        import psycopg
        with psycopg.connect(PG_URL.replace("postgresql://", "postgresql://", 1), connect_timeout=2):
            return True
    except Exception:
        return False


@contextlib.contextmanager
def pg_schema_url():
    """A database URL whose search_path is a fresh schema, dropped afterwards."""
    import psycopg
    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "%s"' % schema)
    try:
        yield PG_URL + "?options=-csearch_path%%3D%s" % schema
    finally:
        # a portal the test left running may still hold a table of the schema while it waits
        # for another: PostgreSQL then ends one of the two as a deadlock, perhaps the DROP
        for attempt in range(5):
            try:
                with psycopg.connect(PG_URL, autocommit=True) as conn:
                    conn.execute('DROP SCHEMA "%s" CASCADE' % schema)
                break
            except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable):
                if attempt == 4:
                    raise
                time.sleep(0.2)


@contextlib.contextmanager
def pg_database_url():
    """The URL of a fresh database, dropped afterwards. A schema of ``pg_schema_url`` shares
    its database's notices (LISTEN and NOTIFY are per database) with every portal on it, other
    tests' too: a test that counts notices, or what they make a portal read again, needs a
    database of its own."""
    import psycopg
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "%s"' % name)
    try:
        yield PG_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute('DROP DATABASE "%s" WITH (FORCE)' % name)


@contextlib.contextmanager
def schema_at(url: str, revision: str):
    """A store whose schema stops at an older ``revision``: yields (the store, a connection in
    a write transaction) to put rows of that schema in; migrate it afterwards."""
    from alembic import command
    from alembic.config import Config
    from cddlm.application.store import MIGRATIONS, Store
    store = Store(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store.write() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        yield store, conn


def db_urls(request, tmp_path, postgresql=pg_schema_url):
    """``db_url``'s values: a SQLite file, or a ``postgresql()`` (skipped with a reason if no
    PostgreSQL runs)."""
    if request.param == "sqlite":
        yield "sqlite:///%s" % (tmp_path / "portal.db")
        return
    if not postgres_available():
        pytest.skip("no PostgreSQL answers on 127.0.0.1:5432 (database test, trust auth)")
    with postgresql() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """Each store test runs on SQLite and on PostgreSQL (a schema of its own)."""
    yield from db_urls(request, tmp_path)


# -- in-process portal ----------------------------------------------------------------------------
class WsgiClient:
    """Calls the portal's real WSGI application without a socket."""

    def __init__(self, app):
        self.app = app

    def request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None,
                query: str = "") -> tuple[int, dict, bytes]:
        environ = {
            "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8080", "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr,
            "wsgi.version": (1, 0), "wsgi.multithread": True, "wsgi.multiprocess": False,
            "wsgi.run_once": False, "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": "text/xml; charset=utf-8", "SCRIPT_NAME": "",
        }
        for k, v in (headers or {}).items():
            environ["HTTP_" + k.upper().replace("-", "_")] = v
        captured = {}

        def start_response(status, response_headers, exc_info=None):
            captured["status"] = int(status.split()[0])
            captured["headers"] = dict(response_headers)

        chunks = self.app(environ, start_response)
        data = b"".join(chunks)
        if hasattr(chunks, "close"):
            chunks.close()
        return captured["status"], captured["headers"], data

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        status, _, data = self.request("POST", path, body)
        return status, data


def make_portal(tmp_path: Path, **settings):
    from cddlm.app import Portal
    from cddlm.config import Settings
    defaults = dict(state_dir=str(tmp_path / "state"), port=8080, liveness_interval=0.5)
    defaults.update(settings)
    portal = Portal(Settings(**defaults))
    portal.start()
    return portal


def wait_state(portal, app_id: str, state: str, timeout: float = 20.0) -> None:
    """Until the in-process ``portal``'s application ``app_id`` is ``state``."""
    deadline = time.monotonic() + timeout
    while portal.service.get(app_id).state != state:
        assert time.monotonic() < deadline, portal.service.get(app_id).state
        time.sleep(0.02)


@pytest.fixture
def portal(tmp_path):
    p = make_portal(tmp_path)
    yield p
    _terminate_all(p)
    p.stop()


def _terminate_all(p) -> None:
    """Stop every component a test left running, so no process outlives the test."""
    from cddlm.application.tables import applications
    from sqlalchemy import select
    with p.store.read() as conn:
        ids = [r[0] for r in conn.execute(select(applications.c.id))]
    for app_id in ids:
        with contextlib.suppress(Exception):
            p.service.terminate(app_id, "test teardown")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with p.store.read() as conn:
            states = [r[0] for r in conn.execute(select(applications.c.state))]
        if all(s == "terminated" for s in states):
            break
        time.sleep(0.05)


@pytest.fixture
def client(portal):
    return WsgiClient(portal.wsgi)


def closed_by_peer(socks: list[socket.socket], deadline: float) -> int:
    """How many of ``socks`` the other side has closed (after whatever it answered, a 408
    say) by ``deadline`` (``time.monotonic()``): awaited together, so that a slow machine's
    late closes are still seen, and one already closed is counted at once."""
    closed = 0
    for s in socks:
        try:
            while True:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                if not s.recv(4096):
                    closed += 1
                    break
        except ConnectionError:      # reset: closed too
            closed += 1
        except OSError:              # the deadline passed with it still open
            pass
    return closed


# -- a portal as a subprocess on a real port -------------------------------------------------------
_PORT_DRAW = random.SystemRandom()     # not the module's generator: tests (Hypothesis) seed that


def free_port() -> int:
    """A port nothing is bound to on 127.0.0.1 now, for a server a test starts there later (or
    for an address where nothing listens). Drawn below the kernel's ephemeral range: a port
    of that range, free a moment ago, may be handed to another worker's port-0 server or
    outgoing connection before the test binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    for _ in range(100):
        port = _PORT_DRAW.randrange(10000, max(10001, ephemeral))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:       # (none free there: the kernel's choice)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ready_url(proc: subprocess.Popen, timeout: float = 30.0) -> str:
    """The URL a starting ``cddlm portal serve`` prints once it answers (RuntimeError if it
    does not within ``timeout``)."""
    deadline = time.monotonic() + timeout
    line = b""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(b"portal ready at "):
            return line.decode().split("portal ready at ", 1)[1].strip()
        if not line and proc.poll() is not None:
            break
    raise RuntimeError("the portal did not become ready (last line %r)" % line)


class LivePortal:
    """``cddlm portal serve`` as a subprocess; ``stdin_pipe``: its stdin is a pipe (as under a
    supervisor), else it inherits the tests' own."""

    def __init__(self, state_dir: Path, port: int = 0, db: str | None = None, extra: list[str] | None = None,
                 stdin_pipe: bool = False):
        self.state_dir = state_dir
        self.port = port
        self.db = db
        self.extra = extra or []
        self.stdin_pipe = stdin_pipe
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 30.0) -> "LivePortal":
        cmd = [sys.executable, "-m", "cddlm.cli", "portal", "serve", "--port", str(self.port),
               "--state-dir", str(self.state_dir)] + self.extra
        if self.db:
            cmd += ["--db", self.db]
        self.log_path = self.state_dir.parent / ("portal-%d.log" % time.time_ns())
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, cwd=ROOT,
                                     stdin=subprocess.PIPE if self.stdin_pipe else None)
        try:
            self.url = ready_url(self.proc, timeout)
        except RuntimeError:
            self.stop()
            raise
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.log.close()
        self.proc = None


@pytest.fixture
def live_portal(tmp_path):
    started: list[LivePortal] = []

    def factory(**kwargs) -> LivePortal:
        state = kwargs.pop("state_dir", tmp_path / ("state-%d" % len(started)))
        state.mkdir(parents=True, exist_ok=True)
        lp = LivePortal(state, **kwargs).start()
        started.append(lp)
        return lp

    yield factory
    for lp in started:
        lp.stop()
        # pytest shows a test's captured output only when it fails: then the portal's last words
        for path in (lp.log_path, lp.state_dir / "portal.log"):
            with contextlib.suppress(OSError), open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4000))
                sys.stderr.write("--- %s (last lines):\n%s\n" % (
                    path, f.read().decode("utf-8", "replace")))
    kill_leftovers(tmp_path)


def kill_leftovers(root: Path) -> list[int]:
    """Kill component processes started under ``root`` (their environment names their
    component; their working directory is under the state dir)."""
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            cwd = os.readlink("/proc/%d/cwd" % pid)
            environ = open("/proc/%d/environ" % pid, "rb").read()
        except OSError:
            continue
        if cwd.startswith(str(root)) and b"CDDLM_COMPONENT=" in environ:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            killed.append(pid)
    return killed
