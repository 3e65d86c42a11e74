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
identified by (pid, start time); exit codes are known for this portal's own children (kept
after they are reaped, so every thread that asks hears the same) and reported as unknown for
processes adopted after a restart.

Many components are started and stopped at once (``start_many``, ``stop_many``): spawned or
signalled one after the other, then waited for together (readiness conditions, probes, grace
periods), each with its own deadline, and reported in lists as they end.

A component whose ``Target.user`` names an account (``--run-as``) runs as that account, with
no supplementary groups and umask 077; its directories are that account's, mode 0700, and the
portal reaches into them only through ``confine`` (no links followed, no FIFOs opened).
"""

from __future__ import annotations

import heapq
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from cddlm import affinity, netsafe
from cddlm.application import secrets
from cddlm.application.enactment import confine, logs, procfs, spawner, states
from cddlm.application.enactment.confine import Account, Escape
from cddlm.budget import PatternError, user_regex
from cddlm.config import Settings

STDERR_TAIL_LINES = 20
ENDED_KEPT = 65536          # exit statuses of reaped children remembered (see check_process)
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
    generation: int = 0                                # its application's generation


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
        self._children: dict[int, tuple[subprocess.Popen, str]] = {}   # pid -> (Popen, start)
        # how this process's children ended, kept after they are reaped: the exit watcher and
        # a liveness check (or a stop) may ask about one child at the same moment, and the
        # one that asks second must learn the same exit status, not "unknown"
        self._ended: OrderedDict[int, tuple[str, int]] = OrderedDict()   # pid -> (start, rc)
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
        return log_lines(data, start, offset, lines, max_bytes)

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
        """Start one component (``start_many`` of one)."""
        return _one(lambda report: self.start_many([(None, t, known_pid, known_start)],
                                                   keep_lease, report))

    def start_many(self, jobs: Iterable[tuple[Any, Target, int | None, str | None]],
                   keep_lease: Callable[[], None], report: Report) -> None:
        """Start components: ``jobs`` of (key, target, recorded pid, its start time). Processes
        are spawned (or adopted) one after the other and reported at once; those with a
        readiness condition, and probes, are then waited for together, each with its own
        deadline, and reported as they end. ``report`` gets lists of (key, outcome);
        ``keep_lease`` is called between spawns and while waiting, and may raise to abandon
        what is left."""
        _run_all(jobs, self._begin_start, keep_lease, report)

    def _begin_start(self, t: Target, known_pid: int | None,
                     known_start: str | None) -> "Outcome | _Wait":
        if t.type == "process":
            return self._start_process(t, known_pid, known_start)
        if t.type == "file":
            full = self._file_path(t)
            return Outcome("failed", "file %s is missing" % t.attributes.get("path")) \
                if full is None or not confine.exists(self.app_dir(t.app_id), str(t.attributes["path"])) \
                else Outcome("running", runtime={"location": full, "host": self.host})
        if t.type == "probe":
            return self._probe_wait(t)
        return Outcome("running")

    def _probe_wait(self, t: Target) -> "_Wait":
        deadline = time.monotonic() + max(5.0, 5 * float(t.attributes.get("timeout") or 2))

        def poll() -> Outcome | None:
            try:
                problem = probe(t.attributes, self.settings.probe_networks)
            except netsafe.Refused as e:     # the policy will not change: fail at once
                return Outcome("failed", "probe refused: %s" % e)
            if problem is None:
                return Outcome("running", runtime={"host": self.host})
            return Outcome("failed", problem) if time.monotonic() > deadline else None
        return _Wait(poll, 0.2)

    def adopt(self, t: Target) -> tuple[int, str] | None:
        """A live process left by an interrupted start (its pid file, read as every file below
        the application's directory is: never through a link, never blocking), if any."""
        try:
            data, _ = confine.read_tail(self.app_dir(t.app_id), t.path + "/pid", 32, 0)
            pid = int(data.strip() or 0)
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
        env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
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

    def _start_process(self, t: Target, known_pid, known_start) -> "Outcome | _Wait":
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
        logs.CAPPER.watch(self.app_dir(t.app_id), t.path, self.settings.limits.max_log_bytes)
        base = dict(pid=pid, pid_start=started,
                    runtime={"pid": pid, "host": self.host, "workdir": workdir})
        ready = t.attributes.get("readiness")
        if ready and not t.attributes.get("run_to_completion"):
            return self._readiness_wait(t, pid, started, ready, base)
        return Outcome("running", **base)

    def _spawn(self, t: Target, workdir: str):
        argv0 = t.attributes["argv"][0]
        try:
            account = self.account(t)
            env = self._env(t, workdir, account)
            # the start itself on a spawner thread: its descriptor table is not the portal's,
            # which holds one descriptor per running process (see ``spawner``)
            starter = spawner.spawner(self.settings.engine_workers)
            proc = starter.call(self._start, t, workdir, account, env)
        except (LookupError, Escape) as e:
            return Outcome("failed", "cannot start %s: %s" % (argv0, e))
        except OSError as e:
            return Outcome("failed", "cannot start %s: %s" % (argv0, e.strerror))
        started = procfs.start_time(proc.pid) or ""
        with self._lock:
            self._children[proc.pid] = (proc, started)
            self._ended.pop(proc.pid, None)
        return proc.pid, started

    def _start(self, t: Target, workdir: str, account: Account | None,
               env: dict[str, str]) -> subprocess.Popen:
        """Directories, logs and the process (on the spawner's thread: only descriptors of
        its own, see ``spawner``)."""
        self._make_dirs(t, account)
        cwd = self._cwd(t, workdir)
        pidfile = os.path.join(workdir, "pid")
        confine.remove_file(self.app_dir(t.app_id), t.path + "/pid")
        as_account = {} if account is None else dict(user=account.uid, group=account.gid,
                                                      extra_groups=[], umask=0o077)
        base = self.app_dir(t.app_id)
        out = confine.open_log(base, t.path + "/stdout.log", account)
        with open(out, "ab") as out_file:
            err = confine.open_log(base, t.path + "/stderr.log", account)
            # a component runs on every CPU, whatever the portal's own threads are pinned to
            with open(err, "ab") as err_file, affinity.unpinned():
                return subprocess.Popen(["/bin/sh", "-c", WRAPPER, pidfile] + list(t.attributes["argv"]),
                                        cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                        stdout=out_file, stderr=err_file,
                                        start_new_session=True, close_fds=True, **as_account)

    def _readiness_wait(self, t, pid, started, ready, base) -> "Outcome | _Wait":
        timeout = float(ready.get("timeout") or READINESS_TIMEOUT)
        interval = float(ready.get("interval") or 0.1)
        deadline = time.monotonic() + timeout
        app_dir = self.app_dir(t.app_id)
        follower = None
        if "log" in ready:
            try:
                # ^ and $ are the ends of a line, as in a log they are meant
                follower = logs.Follower(app_dir, t.path, user_regex(
                    "(?m)" + str(ready["log"]), self.settings.limits.max_pattern_chars + 4))
            except PatternError as e:
                # a pattern recorded before patterns were checked (or a lazy one): the
                # component fails with the reason, the portal goes on
                return self._failing(pid, started, Outcome(
                    "failed", "readiness log pattern: %s" % e, **base))

        def poll() -> Outcome | None:
            gone = self.check_process(pid, started)
            if gone is not None:
                return self._failure(gone, base, "exited before it was ready: ")
            try:
                problem = readiness(ready, app_dir, t.path, self.settings.probe_networks,
                                    follower)
            except netsafe.Refused as e:
                return wait.become(self._failing(pid, started, Outcome(
                    "failed", "readiness check refused: %s" % e, **base)))
            if problem is None:
                return Outcome("running", **base)
            if time.monotonic() > deadline:
                return wait.become(self._failing(pid, started, Outcome(
                    "failed", "not ready after %gs: %s" % (timeout, problem), **base)))
            return None
        wait = _Wait(poll, interval)
        return wait

    def _failing(self, pid: int, started: str | None, failed: Outcome) -> "_Wait":
        """``failed``, once the process group has stopped (TERM, KILL 2 s later): waited for
        with the rest of its batch, which goes on keeping its lease and reporting meanwhile."""
        return self._stopping(pid, started, "TERM", 2.0).ending_with(failed)

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
            child = self._children.get(pid)
            if child is not None:
                rc = child[0].poll()
                if rc is None:
                    return None
                # reaped: kept, so that whoever asks next (the exit watcher, a liveness pass,
                # a stop) hears the same status, whichever thread reaped it
                del self._children[pid]
                self._ended[pid] = (child[1], rc)
                while len(self._ended) > ENDED_KEPT:
                    self._ended.popitem(last=False)
            ended = self._ended.get(pid)
        if ended is not None and (not started or not ended[0] or ended[0] == started):
            rc = ended[1]
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
                logs.CAPPER.watch(self.app_dir(t.app_id), t.path,
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
        """Stop one component (``stop_many`` of one)."""
        return _one(lambda report: self.stop_many([(None, t, pid, started)], keep_lease, report))

    def stop_many(self, jobs: Iterable[tuple[Any, Target, int | None, str | None]],
                  keep_lease: Callable[[], None] | None, report: Report) -> None:
        """Stop components, ``jobs`` of (key, target, recorded pid, its start time): every
        process group is signalled first, then all are waited for together, each for its own
        grace period before KILL. ``report`` gets lists of (key, outcome) as they end."""
        _run_all(jobs, self._begin_stop, keep_lease, report)

    def _begin_stop(self, t: Target, pid: int | None, started: str | None) -> "Outcome | _Wait":
        if t.type != "process":
            return self._stop_other(t)
        if not pid:
            adopted = self.adopt(t)
            pid, started = adopted if adopted else (None, None)
        logs.CAPPER.forget(self.component_dir(t.app_id, t.path))
        if not pid:
            return Outcome("stopped")
        sig = str(t.attributes.get("stop_signal") or "TERM")
        grace = float(t.attributes.get("grace") if t.attributes.get("grace") is not None else 5)
        return self._stopping(pid, started, sig, grace)

    def _stop_other(self, t: Target) -> Outcome:
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

    def _stopping(self, pid: int, started: str | None, sig: str, grace: float) -> "_Wait":
        """Signal the process group now; the wait ends when the process has ended, with KILL
        after ``grace`` seconds, and gives up 5 s after that. Idempotent."""
        def stopped(ended: Outcome | None) -> Outcome:
            out = Outcome("stopped", pid=pid, pid_start=started)
            if ended is not None:
                out.exit_code, out.exit_signal = ended.exit_code, ended.exit_signal
            return out

        ended = self.check_process(pid, started)
        if ended is not None:
            return _Wait(lambda: stopped(ended), 0.0)
        self._killpg(pid, getattr(signal, "SIG" + sig, signal.SIGTERM))
        state = {"killed": False, "deadline": time.monotonic() + grace}

        def poll() -> Outcome | None:
            ended = self.check_process(pid, started)
            if ended is not None:
                if not state["killed"]:
                    self._killpg(pid, signal.SIGKILL)   # leftovers in its group
                return stopped(ended)
            if time.monotonic() >= state["deadline"]:
                if state["killed"]:
                    return stopped(None)
                self._killpg(pid, signal.SIGKILL)
                state.update(killed=True, deadline=time.monotonic() + 5)
            # most processes end within the first interval; one that takes its grace period
            # is looked at less and less often (a batch of thousands: fewer wait calls)
            wait.interval = min(STOP_POLL_MAX, wait.interval * 2)
            return None
        wait = _Wait(poll, 0.02)
        return wait

    @staticmethod
    def _killpg(pid: int, number: int) -> None:
        try:
            os.killpg(pid, number)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, number)
            except (ProcessLookupError, PermissionError):
                pass


Report = Callable[[list], None]     # gets [(key, Outcome), ...]
STOP_POLL_MAX = 0.2                 # seconds: the longest a stopping process goes unlooked-at


class _Wait:
    """One condition being waited for: ``poll`` says how it ended, or None for not yet."""

    def __init__(self, poll: Callable[[], Outcome | None], interval: float):
        self.poll = poll
        self.interval = interval
        self.key: Any = None
        self.outcome: Outcome | None = None

    def ending_with(self, outcome: Outcome) -> "_Wait":
        """This wait, ending with ``outcome`` instead of its own."""
        poll = self.poll
        self.poll = lambda: outcome if poll() is not None else None
        return self

    def become(self, other: "_Wait") -> None:
        """Go on as ``other`` (same key, same place in its batch; its interval as it changes).
        Returns None: not ended yet."""
        def poll() -> Outcome | None:
            got = other.poll()
            self.interval = other.interval
            return got
        self.poll, self.interval = poll, other.interval


def _run_all(jobs: Iterable[tuple], begin: Callable[..., "Outcome | _Wait"],
             keep_lease: Callable[[], None] | None, report: Report) -> None:
    """``begin`` each job (key, *arguments) in turn, then wait for those it did not end at
    once. Each outcome is reported as it comes (``report`` paces the records) and the lease is
    kept between jobs: a batch of thousands takes seconds to begin."""
    waits: list[_Wait] = []
    for key, *arguments in jobs:
        got = begin(*arguments)
        if isinstance(got, Outcome):
            report([(key, got)])
        else:
            got.key = key
            waits.append(got)
        if keep_lease is not None:
            keep_lease()    # paced by its owner; raises to abandon the rest
    _wait_all(waits, keep_lease, report)


def _wait_all(waits: list[_Wait], keep_lease: Callable[[], None] | None, report: Report) -> None:
    """Poll each wait at its own interval until each has an outcome (a heap by the time each
    is next due: a round looks only at those due); report each round's outcomes together
    (``report`` paces the records), and keep the lease between rounds."""
    due = [(0.0, n, w) for n, w in enumerate(waits)]    # already a heap: all due, in order
    order = len(due)
    while due:
        now = time.monotonic()
        done: list[tuple[Any, Outcome]] = []
        later: list[_Wait] = []
        while due and due[0][0] <= now:
            w = heapq.heappop(due)[2]
            w.outcome = w.poll()
            if w.outcome is None:
                later.append(w)
            else:
                done.append((w.key, w.outcome))
        now = time.monotonic()
        for w in later:
            heapq.heappush(due, (now + w.interval, order, w))
            order += 1
        if done:
            report(done)
        if not due:
            return
        if keep_lease is not None:
            keep_lease()
        time.sleep(max(0.0, due[0][0] - time.monotonic()))


def log_lines(data: bytes, start: int, offset: int | None, lines: int,
              max_bytes: int) -> tuple[list[str], int]:
    """What ``log_read`` answers for ``data`` read from byte ``start`` of a log: after
    ``offset``, its complete lines; without, its last ``lines`` lines (a partial first line
    dropped). Returns them and the offset to read on from."""
    if offset is not None:
        # complete lines only, so that the next read goes on where a line begins (a line
        # longer than max_bytes comes in pieces)
        cut = data.rfind(b"\n") + 1 or (len(data) if len(data) >= max_bytes else 0)
        return data[:cut].decode("utf-8", "replace").splitlines(), start + cut
    found = data.decode("utf-8", "replace").splitlines()
    if start > 0 and found:
        found = found[1:]
    return (found[-lines:] if lines > 0 else []), start + len(data)


def cap_lines(found: list[str], max_bytes: int, lines: int | None = None) -> tuple[list[str], int]:
    """What a ``log_read`` answers of ``found``: at most ``max_bytes`` of it, each line counted
    as its UTF-8 bytes and a newline. With ``lines`` (a tail), the last ``lines`` lines (0: none)
    that fit; without (after an offset), the first lines that fit, a first line longer than
    ``max_bytes`` cut to its first ``max_bytes`` (the rest is read next, as a piece of the
    file's would be). Returns them and how many bytes of the log they are."""
    if lines is not None:
        found = list(reversed(found[-lines:])) if lines > 0 else []
    kept: list[str] = []
    size = 0
    for line in found:
        n = len(line.encode("utf-8", "replace")) + 1
        if size + n > max_bytes:
            if lines is None and not kept:
                piece = line.encode("utf-8", "replace")[:max_bytes].decode("utf-8", "ignore")
                return [piece], len(piece.encode("utf-8", "replace"))
            break
        kept.append(line)
        size += n
    return (kept[::-1] if lines is not None else kept), size


def _one(run: Callable[[Report], None]) -> Outcome:
    """The outcome of a batch of one."""
    got: list[tuple[Any, Outcome]] = []
    run(got.extend)
    return got[0][1]


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


def readiness(ready: dict, app_dir: str, path: str, networks: tuple[str, ...],
              follower: logs.Follower | None = None) -> str | None:
    """None when the readiness condition holds, else what is missing: of the component ``path``
    below the application's directory ``app_dir`` (a ``file`` is looked for from there, one
    name at a time, never through a link). A ``log`` condition needs the ``follower`` that
    remembers how far the logs were read."""
    if "tcp" in ready:
        spec = str(ready["tcp"])
        return _tcp(spec if ":" in spec else "127.0.0.1:" + spec, 0.5, networks)
    if "http" in ready:
        return _http(str(ready["http"]), 1.0, networks)
    if "file" in ready:
        try:
            below = confine.inside(app_dir, str(ready["file"]))
        except Escape:
            below = None
        return None if below and confine.exists(app_dir, "/".join([path] + below)) \
            else "file %s does not exist" % ready["file"]
    if "log" in ready:
        if follower is not None and follower.seen():
            return None
        return "log line /%s/ not seen" % ready["log"]
    return None


def readiness_wait(tree: Any, c: Any, now: float) -> dict | None:
    """For a process that awaits its readiness (``c``, a component row of the deployment
    ``tree``): what it waits for and for how long (since it was marked starting), as
    ``waiting`` says; None for any other component."""
    if c.observed != states.STARTING or c.type != "process":
        return None
    node = tree.find(c.path)
    ready = node.attributes.get("readiness") if node is not None else None
    if not isinstance(ready, dict) or not ready or node.attributes.get("run_to_completion"):
        return None
    out = waiting(ready, c.updated, now)
    out["waitingFor"] = secrets.of(tree)(out["waitingFor"])     # a hidden pattern stays hidden
    return out


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
