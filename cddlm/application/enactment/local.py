"""The local runner: enacts components on this machine, for every host whose agent is ``local``.

Each host has its own directory (``STATE/hosts/HOST``); an application's files live under
``apps/<id>/`` there and each component has its own working directory below that (its path),
with ``stdout.log`` and ``stderr.log``.

Logs are capped and rotated, and readiness follows them incrementally (``logs``); probes and
readiness checks connect only where the outbound policy allows (``cddlm.netsafe``,
``Settings.probe_networks``); a readiness ``log`` pattern is matched by RE2.

Processes start in their own session (``setsid``), so stopping the portal stops none of them.
They are launched through ``/bin/sh -c 'echo $$ > pidfile; exec "$@"'``: the pid file is
written before the program runs, so a portal killed between the spawn and the database
commit finds the process again (``adopt``) instead of starting a second one. A process is
identified by (pid, start time); exit codes are known for this portal's own children and
reported as unknown for processes adopted after a restart.

A component whose ``Target.user`` names an account (``--run-as``) runs as that account, with
no supplementary groups and umask 077; its directories are that account's, mode 0700, and the
portal reaches into them only through ``confine`` (no links followed, no FIFOs opened).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from cddlm import netsafe
from cddlm.application.enactment import confine, logs, procfs
from cddlm.application.enactment.confine import Account, Escape
from cddlm.budget import PatternError, user_regex
from cddlm.config import Settings

STDERR_TAIL_LINES = 20
READINESS_TIMEOUT = 30.0    # seconds a readiness condition may take when it does not say
WRAPPER = 'echo $$ > "$0" && exec "$@"'
PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "SHELL",
            "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")


@dataclass
class Target:
    """One component as the runner sees it: attributes with lazy values already resolved."""
    app_id: str
    path: str
    type: str
    attributes: dict[str, Any]
    host: str
    values: Callable[[str], Any] = lambda name: None   # property lookup for ${name} substitution
    user: str | None = None                            # the OS account it runs as (None: ours)


@dataclass
class Outcome:
    event: str                      # deployed | running | completed | failed | stopped
    info: str | None = None
    pid: int | None = None
    pid_start: str | None = None
    exit_code: int | None = None
    exit_signal: str | None = None
    runtime: dict[str, Any] = field(default_factory=dict)


class Lost(Exception):
    """The worker lost its lease while waiting: stop, another worker owns the item now."""


class Later(Exception):
    """A runner cannot finish the action yet (a remote host is busy or silent): the engine
    asks again after ``delay`` seconds, holding no worker meanwhile."""

    def __init__(self, delay: float, why: str = ""):
        super().__init__(why)
        self.delay = delay


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return str(num)


class LocalRunner:
    def __init__(self, host: str, root: str, settings: Settings | None = None):
        self.host = host
        self.root = os.path.abspath(root)
        self.settings = settings or Settings()
        self._children: dict[int, subprocess.Popen] = {}   # pid -> Popen, this process's children
        self._lock = threading.Lock()

    # -- places ------------------------------------------------------------------------------
    def app_dir(self, app_id: str) -> str:
        return os.path.join(self.root, "apps", app_id.rsplit(":", 1)[-1])

    def component_dir(self, app_id: str, path: str) -> str:
        return os.path.join(self.app_dir(app_id), *path.split("/"))

    @staticmethod
    def account(t: Target) -> Account | None:
        """The account ``t`` runs as (LookupError: there is no such account, or it is root)."""
        return Account.named(t.user) if t.user else None

    def _make_dirs(self, t: Target, account: Account | None) -> str:
        """The application's and the component's directories, the account's (0700)."""
        app_dir = confine.make_app_dir(os.path.join(self.root, "apps"),
                                       os.path.basename(self.app_dir(t.app_id)), account)
        os.close(confine.open_dir(app_dir, t.path.split("/"), True, account))
        return self.component_dir(t.app_id, t.path)

    def remove_app(self, app_id: str) -> None:
        logs.CAPPER.forget_below(self.app_dir(app_id))
        shutil.rmtree(self.app_dir(app_id), ignore_errors=True)   # never follows links

    def stderr_tail(self, app_id: str, path: str, lines: int = STDERR_TAIL_LINES) -> str:
        return "\n".join(self.log_tail(app_id, path, "stderr", lines))

    def log_tail(self, app_id: str, path: str, stream: str, lines: int,
                 max_bytes: int = 8192) -> list[str]:
        """The last ``lines`` lines of a component's ``stdout`` or ``stderr`` log, reading at
        most ``max_bytes`` of its end (a partial first line is dropped)."""
        return self.log_read(app_id, path, stream, lines=lines, max_bytes=max_bytes)[0]

    def log_read(self, app_id: str, path: str, stream: str, *, lines: int = 0,
                 offset: int | None = None, max_bytes: int = 8192) -> tuple[list[str], int]:
        """Lines of a component's ``stdout`` or ``stderr`` log, reading at most ``max_bytes``:
        without ``offset`` the last ``lines`` lines of its end (a partial first line is
        dropped); with one, the complete lines after byte ``offset`` (from the start when the
        file is now shorter: it was replaced). Returns them and the offset to read on from.
        Only a regular file below the application's directory is read, never through a link
        (``confine``): the component owns its directory and could put anything there."""
        if stream not in ("stdout", "stderr"):
            raise ValueError(stream)
        try:
            data, start = confine.read_tail(self.app_dir(app_id), path + "/" + stream + ".log",
                                            max_bytes, offset)
        except (OSError, Escape):
            return [], offset or 0
        if offset is not None:
            # complete lines only, so that the next read goes on where a line begins (a line
            # longer than max_bytes comes in pieces)
            cut = data.rfind(b"\n") + 1 or (len(data) if len(data) >= max_bytes else 0)
            return data[:cut].decode("utf-8", "replace").splitlines(), start + cut
        found = data.decode("utf-8", "replace").splitlines()
        if start > 0 and found:
            found = found[1:]
        return (found[-lines:] if lines > 0 else []), start + len(data)

    # -- deploy ------------------------------------------------------------------------------
    def deploy(self, t: Target) -> Outcome:
        workdir = self.component_dir(t.app_id, t.path)
        try:
            account = self.account(t)
            self._make_dirs(t, account)
        except LookupError as e:
            return Outcome("failed", "cannot run as %s: %s" % (t.user, e.args[0]))
        except Escape as e:
            return Outcome("failed", "cannot create %s: %s" % (workdir, e))
        except OSError as e:
            return Outcome("failed", "cannot create %s: %s" % (workdir, e.strerror))
        runtime = {"workdir": workdir, "host": self.host}
        if t.type == "process":
            argv = t.attributes["argv"]
            env = self._env(t, workdir, account)
            exe = argv[0]
            try:
                cwd = self._cwd(t, workdir)
            except Escape as e:
                return Outcome("failed", "cwd: %s" % e, runtime=runtime)
            if os.sep in exe:
                found = exe if os.path.isabs(exe) else os.path.join(cwd, exe)
                ok = os.path.isfile(found) and os.access(found, os.X_OK)
            else:
                found = shutil.which(exe, path=env.get("PATH"))
                ok = found is not None
            if not ok:
                return Outcome("failed", "executable not found: %s" % exe, runtime=runtime)
            runtime["executable"] = found
        elif t.type == "file":
            return self._write_file(t, runtime)
        return Outcome("deployed", runtime=runtime)

    def _file_path(self, t: Target) -> str | None:
        rel = str(t.attributes["path"])
        base = self.app_dir(t.app_id)
        try:
            names = confine.inside(base, rel)
        except Escape:
            return None
        return os.path.join(base, *names) if names else None

    def _write_file(self, t: Target, runtime: dict) -> Outcome:
        full = self._file_path(t)
        if full is None:
            return Outcome("failed", "file path %r must stay inside the application directory"
                           % t.attributes["path"], runtime=runtime)
        content = str(t.attributes.get("content") or "")
        if t.attributes.get("substitute", True):
            content = _substitute(content, t.values)
        try:
            mode = int(str(t.attributes.get("mode") or "0644"), 8) & 0o7777
        except ValueError:
            return Outcome("failed", "mode %r is not an octal number" % t.attributes.get("mode"))
        try:
            confine.write_file(self.app_dir(t.app_id), str(t.attributes["path"]),
                               content.encode("utf-8"), mode, self.account(t))
        except (Escape, LookupError) as e:
            return Outcome("failed", "cannot write %s: %s" % (full, e), runtime=runtime)
        except OSError as e:
            return Outcome("failed", "cannot write %s: %s" % (full, e.strerror), runtime=runtime)
        runtime["location"] = full
        return Outcome("deployed", runtime=runtime)

    # -- start -------------------------------------------------------------------------------
    def start(self, t: Target, known_pid: int | None, known_start: str | None,
              keep_lease: Callable[[], None]) -> Outcome:
        if t.type == "process":
            return self._start_process(t, known_pid, known_start, keep_lease)
        if t.type == "file":
            full = self._file_path(t)
            if full is None or not confine.exists(self.app_dir(t.app_id), str(t.attributes["path"])):
                return Outcome("failed", "file %s is missing" % t.attributes.get("path"))
            return Outcome("running", runtime={"location": full, "host": self.host})
        if t.type == "probe":
            deadline = time.monotonic() + max(5.0, 5 * float(t.attributes.get("timeout") or 2))
            while True:
                try:
                    problem = probe(t.attributes, self.settings.probe_networks)
                except netsafe.Refused as e:     # the policy will not change: fail at once
                    return Outcome("failed", "probe refused: %s" % e)
                if problem is None:
                    return Outcome("running", runtime={"host": self.host})
                if time.monotonic() > deadline:
                    return Outcome("failed", problem)
                keep_lease()
                time.sleep(0.2)
        return Outcome("running")

    def adopt(self, t: Target) -> tuple[int, str] | None:
        """A live process left by an interrupted start (its pid file), if any."""
        pidfile = os.path.join(self.component_dir(t.app_id, t.path), "pid")
        try:
            with open(pidfile) as f:
                pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            return None
        started = procfs.start_time(pid)
        if pid and started and procfs.alive(pid, started) and self._ours(pid, t):
            return pid, started
        return None

    def _ours(self, pid: int, t: Target) -> bool:
        """The process runs in the component's session and was started from its directory."""
        try:
            env = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
        except OSError:
            return False
        return ("CDDLM_COMPONENT=%s %s" % (t.app_id, t.path)).encode() in env

    def _env(self, t: Target, workdir: str, account: Account | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in PASS_ENV}
        if account is not None:
            env.update(HOME=account.home, USER=account.name, LOGNAME=account.name)
        env.update({str(k): str(v) for k, v in (t.attributes.get("env") or {}).items()})
        env.update(CDDLM_APP_ID=t.app_id, CDDLM_HOST=self.host, CDDLM_WORKDIR=workdir,
                   CDDLM_COMPONENT="%s %s" % (t.app_id, t.path))
        return env

    def _cwd(self, t: Target, workdir: str) -> str:
        """The process's working directory: ``cwd`` relative to its component's directory,
        inside the application's directory (``Escape`` otherwise, links resolved)."""
        cwd = t.attributes.get("cwd")
        if not cwd:
            return workdir
        base = self.app_dir(t.app_id)
        full = os.path.join(base, *confine.inside(base, os.path.join(t.path, str(cwd))))
        real, real_base = os.path.realpath(full), os.path.realpath(base)
        if real != real_base and not real.startswith(real_base + os.sep):
            raise Escape("%r leads out of the application's directory" % cwd)
        return full

    def _start_process(self, t: Target, known_pid, known_start, keep_lease) -> Outcome:
        workdir = self.component_dir(t.app_id, t.path)
        if known_pid and procfs.alive(known_pid, known_start):
            pid, started = known_pid, known_start
        else:
            adopted = self.adopt(t)
            if adopted:
                pid, started = adopted
            else:
                spawned = self._spawn(t, workdir)
                if isinstance(spawned, Outcome):
                    return spawned
                pid, started = spawned
        logs.CAPPER.watch(workdir, self.settings.limits.max_log_bytes)
        base = dict(pid=pid, pid_start=started,
                    runtime={"pid": pid, "host": self.host, "workdir": workdir})
        ready = t.attributes.get("readiness")
        if ready and not t.attributes.get("run_to_completion"):
            return self._await_ready(t, pid, started, ready, keep_lease, base)
        return Outcome("running", **base)

    def _spawn(self, t: Target, workdir: str):
        pidfile = os.path.join(workdir, "pid")
        try:
            account = self.account(t)
            self._make_dirs(t, account)
            cwd = self._cwd(t, workdir)
            logs = [confine.open_log(self.app_dir(t.app_id), t.path + "/" + name, account)
                    for name in ("stdout.log", "stderr.log")]
        except (LookupError, Escape) as e:
            return Outcome("failed", "cannot start %s: %s" % (t.attributes["argv"][0], e))
        except OSError as e:
            return Outcome("failed", "cannot start %s: %s" % (t.attributes["argv"][0], e.strerror))
        try:
            os.unlink(pidfile)
        except FileNotFoundError:
            pass
        as_account = {} if account is None else dict(user=account.uid, group=account.gid,
                                                      extra_groups=[], umask=0o077)
        try:
            with open(logs[0], "ab") as out, open(logs[1], "ab") as err:
                proc = subprocess.Popen(["/bin/sh", "-c", WRAPPER, pidfile] + list(t.attributes["argv"]),
                                        cwd=cwd, env=self._env(t, workdir, account),
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        start_new_session=True, close_fds=True, **as_account)
        except OSError as e:
            return Outcome("failed", "cannot start %s: %s" % (t.attributes["argv"][0], e.strerror))
        with self._lock:
            self._children[proc.pid] = proc
        started = procfs.start_time(proc.pid) or ""
        return proc.pid, started

    def _await_ready(self, t, pid, started, ready, keep_lease, base) -> Outcome:
        timeout = float(ready.get("timeout") or READINESS_TIMEOUT)
        interval = float(ready.get("interval") or 0.1)
        deadline = time.monotonic() + timeout
        workdir = self.component_dir(t.app_id, t.path)
        follower = None
        if "log" in ready:
            try:
                # ^ and $ are the ends of a line, as in a log they are meant
                follower = logs.Follower(workdir, user_regex(
                    "(?m)" + str(ready["log"]), self.settings.limits.max_pattern_chars + 4))
            except PatternError as e:
                # a pattern recorded before patterns were checked (or a lazy one): the
                # component fails with the reason, the portal goes on
                self.stop_process(pid, started, "TERM", 2.0)
                return Outcome("failed", "readiness log pattern: %s" % e, **base)
        while True:
            gone = self.check_process(pid, started)
            if gone is not None:
                return self._failure(gone, base, "exited before it was ready: ")
            try:
                problem = readiness(ready, workdir, self.settings.probe_networks, follower)
            except netsafe.Refused as e:
                self.stop_process(pid, started, "TERM", 2.0)
                return Outcome("failed", "readiness check refused: %s" % e, **base)
            if problem is None:
                return Outcome("running", **base)
            if time.monotonic() > deadline:
                self.stop_process(pid, started, "TERM", 2.0)
                return Outcome("failed", "not ready after %gs: %s" % (timeout, problem), **base)
            keep_lease()
            time.sleep(interval)

    @staticmethod
    def _failure(gone: Outcome, base: dict, prefix: str = "") -> Outcome:
        base = dict(base)
        base.update(exit_code=gone.exit_code, exit_signal=gone.exit_signal)
        return Outcome("failed", prefix + (gone.info or "exited"), **base)

    # -- check -------------------------------------------------------------------------------
    def check_process(self, pid: int | None, started: str | None) -> Outcome | None:
        """None while the process lives; otherwise how it ended (as far as known)."""
        if not pid:
            return Outcome("failed", "no process recorded")
        with self._lock:
            proc = self._children.get(pid)
        if proc is not None:
            rc = proc.poll()
            if rc is None:
                return None
            with self._lock:
                self._children.pop(pid, None)
            if rc < 0:
                return Outcome("failed", "killed by signal %s" % _signal_name(-rc),
                               exit_signal=_signal_name(-rc))
            return Outcome("failed", "exited with status %d" % rc, exit_code=rc)
        if procfs.alive(pid, started):
            return None
        return Outcome("failed", "process %d ended (exit status unknown: it was adopted after a "
                                 "portal restart)" % pid)

    def check(self, t: Target, pid: int | None, started: str | None) -> Outcome | None:
        if t.type == "process":
            ended = self.check_process(pid, started)
            if ended is None:   # running (perhaps adopted after a restart): cap its logs
                logs.CAPPER.watch(self.component_dir(t.app_id, t.path),
                                  self.settings.limits.max_log_bytes)
            return ended
        if t.type == "file":
            full = self._file_path(t)
            return None if full and confine.exists(self.app_dir(t.app_id), str(t.attributes["path"])) \
                else Outcome("failed", "file was removed")
        if t.type == "probe":
            try:
                problem = probe(t.attributes, self.settings.probe_networks)
            except netsafe.Refused as e:
                problem = "probe refused: %s" % e
            return None if problem is None else Outcome("failed", problem)
        return None

    # -- stop --------------------------------------------------------------------------------
    def stop(self, t: Target, pid: int | None, started: str | None, keep_lease) -> Outcome:
        if t.type == "process":
            if not pid:
                adopted = self.adopt(t)
                pid, started = adopted if adopted else (None, None)
            sig = str(t.attributes.get("stop_signal") or "TERM")
            grace = float(t.attributes.get("grace") if t.attributes.get("grace") is not None else 5)
            result = self.stop_process(pid, started, sig, grace, keep_lease) if pid else None
            logs.CAPPER.forget(self.component_dir(t.app_id, t.path))
            out = Outcome("stopped", pid=pid, pid_start=started)
            if result is not None:
                out.exit_code, out.exit_signal = result.exit_code, result.exit_signal
            return out
        if t.type == "file" and not t.attributes.get("keep"):
            full = self._file_path(t)
            if full:
                try:
                    confine.remove_file(self.app_dir(t.app_id), str(t.attributes["path"]))
                except (FileNotFoundError, Escape):
                    pass
                except OSError as e:
                    # still stopped (a failure is no way out of stopping): say what was left
                    return Outcome("stopped", "cannot remove %s: %s" % (full, e.strerror))
        return Outcome("stopped")

    def stop_process(self, pid: int, started: str | None, sig: str, grace: float,
                     keep_lease: Callable[[], None] | None = None) -> Outcome | None:
        """Signal the process group, wait ``grace`` seconds, then KILL it. Idempotent."""
        if self.check_process(pid, started) is not None:
            return self._reap(pid)
        number = getattr(signal, "SIG" + sig, signal.SIGTERM)
        self._killpg(pid, number)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            ended = self.check_process(pid, started)
            if ended is not None:
                self._killpg(pid, signal.SIGKILL)   # leftovers in its group
                return ended
            if keep_lease:
                keep_lease()
            time.sleep(0.02)
        self._killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            ended = self.check_process(pid, started)
            if ended is not None:
                return ended
            time.sleep(0.02)
        return None

    def _reap(self, pid: int) -> Outcome | None:
        with self._lock:
            proc = self._children.pop(pid, None)
        if proc is not None and proc.returncode is not None:
            rc = proc.returncode
            return Outcome("failed", exit_code=rc if rc >= 0 else None,
                           exit_signal=_signal_name(-rc) if rc < 0 else None)
        return None

    @staticmethod
    def _killpg(pid: int, number: int) -> None:
        try:
            os.killpg(pid, number)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, number)
            except (ProcessLookupError, PermissionError):
                pass


_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_.\-]+)\}")


def _substitute(text: str, values: Callable[[str], Any]) -> str:
    def repl(m: re.Match) -> str:
        value = values(m.group(1))
        return m.group(0) if value is None else str(value)
    return _PLACEHOLDER.sub(repl, text)


def _tcp(spec: str, timeout: float, networks: tuple[str, ...]) -> str | None:
    """None when HOST:PORT accepts a connection, else why not; ``netsafe.Refused`` when the
    policy forbids connecting there."""
    host, _, port = str(spec).rpartition(":")
    try:
        netsafe.tcp_check(host.strip("[]") or "127.0.0.1", int(port), networks, timeout=timeout)
        return None
    except ValueError:
        return "tcp %s: not HOST:PORT" % spec
    except netsafe.Unreachable as e:
        return "tcp %s: %s" % (spec, e)


def _http(url: str, timeout: float, networks: tuple[str, ...]) -> str | None:
    try:
        status = netsafe.http_status(url, networks, timeout=timeout)
    except netsafe.Unreachable as e:
        return "http %s: %s" % (url, e)
    return None if status < 400 else "http %s: status %d" % (url, status)


def readiness(ready: dict, workdir: str, networks: tuple[str, ...],
              follower: logs.Follower | None = None) -> str | None:
    """None when the readiness condition holds, else what is missing. A ``log`` condition
    needs the ``follower`` that remembers how far the logs were read."""
    if "tcp" in ready:
        spec = str(ready["tcp"])
        return _tcp(spec if ":" in spec else "127.0.0.1:" + spec, 0.5, networks)
    if "http" in ready:
        return _http(str(ready["http"]), 1.0, networks)
    if "file" in ready:
        return None if confine.exists(workdir, str(ready["file"])) \
            else "file %s does not exist" % ready["file"]
    if "log" in ready:
        if follower is not None and follower.seen():
            return None
        return "log line /%s/ not seen" % ready["log"]
    return None


def waiting(ready: dict, since: float, now: float) -> dict:
    """What a component that awaits its readiness waits for, in words (``log /Serving
    HTTP/``), for how long it has (``waited`` seconds) and may (``timeout``)."""
    def show(value: Any) -> str:
        target = getattr(value, "target", None)      # a lazy value, resolved on the host
        return "${%s}" % target if target is not None else str(value)

    what = next(("%s %s" % (kind, show(ready[kind])) for kind in ("tcp", "http", "file")
                 if kind in ready), None)
    if what is None:
        what = "log /%s/" % show(ready["log"]) if "log" in ready else "readiness"
    try:
        timeout = float(ready.get("timeout") or READINESS_TIMEOUT)
    except (TypeError, ValueError):
        timeout = READINESS_TIMEOUT
    return {"waitingFor": what, "waited": max(0.0, now - since), "timeout": timeout}


def probe(attrs: dict, networks: tuple[str, ...]) -> str | None:
    timeout = float(attrs.get("timeout") or 2.0)
    if attrs.get("tcp"):
        return _tcp(str(attrs["tcp"]), timeout, networks)
    if attrs.get("http"):
        return _http(str(attrs["http"]), timeout, networks)
    return "probe has neither tcp nor http"
