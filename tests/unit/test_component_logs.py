"""Components' logs: capped and rotated, followed from where they were read, never through a link."""

from __future__ import annotations

import os
import threading
import time

from cddlm.application.enactment import confine, logs
from cddlm.budget import user_regex
from tests.netns import wait_until


def rotate(path, cap: int) -> bool:
    """``logs.rotate`` of the log at ``path`` (its directory opened as the capper does)."""
    folder = confine.open_dir(os.path.dirname(path), [], False)
    try:
        return logs.rotate(folder, os.path.basename(path), cap)
    finally:
        os.close(folder)


def watch(capper: logs.Capper, workdir, cap: int) -> None:
    """Watch ``workdir`` as a component directory below its parent (the application's)."""
    capper.watch(os.path.dirname(str(workdir)), os.path.basename(str(workdir)), cap)


def test_logs_replaced_by_links_or_fifos_are_neither_followed_nor_opened(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("ready\n" + "x" * 5000)
    work = tmp_path / "c"
    work.mkdir()
    os.symlink(victim, work / "stdout.log")
    os.mkfifo(work / "stderr.log")
    started = time.monotonic()
    assert not logs.Follower(str(tmp_path), "c", user_regex("(?m)^ready$", 100)).seen()
    assert not rotate(work / "stdout.log", 100)
    assert not rotate(work / "stderr.log", 100)
    assert time.monotonic() - started < 1 and victim.read_text().startswith("ready")
    os.unlink(work / "stdout.log")
    (work / "stdout.log").write_text("y" * 5000 + "\n")
    os.symlink(victim, work / "stdout.log.1")      # planted where the rotated part goes
    assert rotate(work / "stdout.log", 100)
    assert victim.read_text().startswith("ready") and not (work / "stdout.log.1").is_symlink()


def test_a_follower_reads_only_what_is_new_and_restarts_after_rotation(tmp_path):
    out = tmp_path / "stdout.log"
    follower = logs.Follower(str(tmp_path.parent), tmp_path.name, user_regex("(?m)^ready$", 100))
    assert not follower.seen()
    out.write_bytes(b"x" * (3 * logs.CHUNK) + b"\npartial rea")
    assert not follower.seen() and not follower.seen() and not follower.seen()
    with open(out, "ab") as f:
        f.write(b"dy\n")
    assert not follower.seen()                 # "partial ready" is not the line "ready"
    with open(out, "ab") as f:
        f.write(b"ready\n")
    assert follower.seen()
    out.write_bytes(b"ready\n")                # truncated and rewritten: read again from 0
    assert follower.seen()


def test_rotation_keeps_the_last_cap_bytes_from_a_line(tmp_path):
    out = tmp_path / "stdout.log"
    out.write_bytes(b"".join(b"line %06d\n" % i for i in range(10_000)))
    assert rotate(out, 1000)
    kept = (tmp_path / "stdout.log.1").read_bytes()
    assert len(kept) <= 1000 and kept.startswith(b"line ") and kept.endswith(b"line 009999\n")
    assert out.stat().st_size == 0
    assert not rotate(out, 1000)


def test_the_capper_keeps_a_growing_log_near_its_cap(tmp_path):
    capper = logs.Capper()
    watch(capper, str(tmp_path), 64 * 1024)
    with open(tmp_path / "stderr.log", "ab") as f:
        for _ in range(40):
            f.write(b"y" * 8191 + b"\n")
            f.flush()
            time.sleep(0.02)
    # the writes stopped: the next look (at most PERIOD away; the thread's, or this one when it
    # is due) leaves the log under its cap (between looks it may hold a period's writes more)
    deadline = time.monotonic() + 2 * logs.PERIOD + 0.5
    while (tmp_path / "stderr.log").stat().st_size > 64 * 1024 and time.monotonic() < deadline:
        capper.check()
        time.sleep(0.02)
    assert (tmp_path / "stderr.log").stat().st_size <= 64 * 1024
    assert (tmp_path / "stderr.log.1").exists()
    capper.forget_below(str(tmp_path.parent))
    assert capper.watched() == {}


def test_without_inotify_the_capper_looks_on_a_schedule(tmp_path, monkeypatch):
    def refused(*a, **k):
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(logs.inotify_simple, "INotify", refused)
    test_the_capper_keeps_a_growing_log_near_its_cap(tmp_path)


def test_a_quiet_log_that_starts_flooding_is_capped_at_once(tmp_path):
    """The kernel says when a log is written: a log quiet for seconds is looked at as soon as
    it is written again, not after the schedule's longest wait (QUIET)."""
    capper = logs.Capper()
    watch(capper, str(tmp_path), 64 * 1024)
    (tmp_path / "stdout.log").write_bytes(b"started\n")
    time.sleep(4.0)        # looks on a schedule: at 3.75 s, then 7.75 s (every QUIET seconds)
    with open(tmp_path / "stdout.log", "ab") as f:
        f.write((b"z" * 1023 + b"\n") * 256)
    # rotated at once (1.5 s at most, here): 3 s for a loaded machine, still before the
    # schedule's next look (3.75 s after the write)
    deadline = time.monotonic() + 3.0
    while not (tmp_path / "stdout.log.1").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert (tmp_path / "stdout.log.1").exists(), "not rotated within 3 s of the write"
        assert (tmp_path / "stdout.log").stat().st_size == 0
    finally:
        capper.forget_below(str(tmp_path))


def test_quiet_logs_are_not_looked_at(tmp_path, monkeypatch):
    """Hundreds of components that write nothing cost the capper no look at all (each would
    cost two stats every QUIET seconds on a schedule)."""
    capper = logs.Capper()
    dirs = []
    for i in range(300):
        d = tmp_path / ("c%d" % i)
        d.mkdir()
        (d / "stdout.log").write_bytes(b"hello\n")
        dirs.append(str(d))
        watch(capper, str(d), 1024)
    # the first looks, and the second (PERIOD after), which arm every directory: awaited (a
    # fixed second assumed 600 looks were made by then)
    assert wait_until(lambda: capper._until_next() > logs.SWEEP / 2, 30), capper._until_next()
    looks = []
    real_open_dir = confine.open_dir

    def counted(base, names, *a, **k):
        if base.startswith(str(tmp_path)):
            looks.append(os.path.join(base, *names))
        return real_open_dir(base, names, *a, **k)
    monkeypatch.setattr(logs.confine, "open_dir", counted)
    try:
        time.sleep(5.0)
        assert looks == []
        (tmp_path / "c7" / "stderr.log").write_bytes(b"x" * 2048)
        # at once, the kernel saying so (the next sweep is SWEEP away): 5 s for a loaded machine
        assert wait_until(lambda: (tmp_path / "c7" / "stderr.log.1").exists(), 5.0)
        assert set(looks) == {dirs[7]}
    finally:
        monkeypatch.setattr(logs.confine, "open_dir", real_open_dir)
        capper.forget_below(str(tmp_path))


def test_when_the_kernel_drops_its_word_every_log_is_looked_at_again(tmp_path):
    """An overflow of inotify's queue (events lost) makes the next pass look at every
    directory, so a log written meanwhile is still capped."""
    class Kernel:                             # inotify, as far as the capper uses it
        def __init__(self):
            self.watches, self.events = 0, []
            self.fd = os.eventfd(1)           # always has something to say

        def fileno(self):
            return self.fd

        def add_watch(self, path, mask):
            self.watches += 1
            return self.watches

        def rm_watch(self, wd):
            pass

        def read(self, timeout):
            events, self.events = self.events, []
            return events

    capper = logs.Capper()
    capper._thread = threading.current_thread()   # no thread of its own: this test drives it
    capper._notify = kernel = Kernel()
    work = [tmp_path / "a", tmp_path / "b"]
    for d in work:
        d.mkdir()
        watch(capper, str(d), 1024)
    capper.check()
    time.sleep(logs.PERIOD)
    capper.check()                            # quiet: left to the kernel (and SWEEP)
    (work[1] / "stdout.log").write_bytes(b"x" * 4096)
    time.sleep(logs.PERIOD)
    assert capper.check() == 0                # the kernel's word of it was lost
    kernel.events = [logs.inotify_simple.Event(-1, logs.inotify_simple.flags.Q_OVERFLOW, 0, "")]
    capper._hear(0)
    assert capper.check() == 1
    assert (work[1] / "stdout.log.1").exists()
    os.close(kernel.fd)


def test_forgotten_directories_do_not_wake_the_capper(tmp_path):
    """An application of thousands of components removed: the capper's next wake is for what
    it still watches, not for each forgotten directory's old next look."""
    capper = logs.Capper()
    capper._thread = threading.current_thread()   # no thread of its own: this test drives it
    capper._notify = None                         # on a schedule: looks every PERIOD..QUIET
    for i in range(2000):
        (tmp_path / "app" / str(i)).mkdir(parents=True)
        watch(capper, str(tmp_path / "app" / str(i)), 1024)
    (tmp_path / "other").mkdir()
    capper.check()
    assert capper._until_next() <= logs.PERIOD
    capper.forget_below(str(tmp_path / "app"))
    assert capper._until_next() == logs.SWEEP     # nothing watched: the longest wait
    watch(capper, str(tmp_path / "other"), 1024)
    assert capper._until_next() <= 0              # the new one: at once


def test_quiet_logs_are_swept_together_on_whole_seconds(tmp_path):
    """Every quiet log is looked at once per SWEEP, but those due within one SWEEP_GRAIN share
    one wake of the capper (1,000 components started over a minute woke it 33 times a
    second, one look each)."""
    capper = logs.Capper()
    capper._thread = threading.current_thread()   # no thread of its own: this test drives it
    capper._notify = logs.inotify_simple.INotify()
    work = []
    began = time.monotonic()
    for i in range(40):
        d = tmp_path / ("c%d" % i)
        d.mkdir()
        watch(capper, str(d), 1024)
        work.append(str(d))
        capper.check()                            # the first looks, spread over time
        time.sleep(0.01)
    time.sleep(logs.PERIOD)
    capper.check()                                # quiet now: left to the kernel and SWEEP
    spread = time.monotonic() - began
    due = {capper._seen[d][2] for d in work}
    assert all(when % logs.SWEEP_GRAIN == 0 for when in due), due
    # 40 looks over ~0.7 s: one or two wakes (a grain more for each second a loaded machine
    # spread them over)
    assert len(due) <= 2 + int(spread / logs.SWEEP_GRAIN), (due, spread)
    capper.forget_below(str(tmp_path))
    capper._notify.close()


def test_a_directory_newly_watched_is_armed_and_looked_at_at_once(tmp_path):
    """With one quiet component watched, the capper sleeps until its next sweep; a second
    component's directory, watched then, must not wait for it: flooded at once, it is capped
    within a look or two (it kept 384 MiB for 30 s)."""
    capper = logs.Capper()
    quiet, loud = tmp_path / "quiet", tmp_path / "loud"
    for d in (quiet, loud):
        d.mkdir()
    (quiet / "stdout.log").write_bytes(b"started\n")
    watch(capper, quiet, 64 * 1024)
    deadline = time.monotonic() + 5
    while capper._until_next() < 5:           # quiet, armed: next look at the sweep
        assert time.monotonic() < deadline, "the quiet directory is still looked at often"
        time.sleep(0.05)
    watch(capper, loud, 64 * 1024)
    with open(loud / "stdout.log", "ab") as f:
        f.write((b"z" * 1023 + b"\n") * 1024)    # 1 MiB, sixteen caps
    # within a look or two (1 s, here): 5 s for a loaded machine, where waiting for the
    # quiet one's sweep would take 30 s
    deadline = time.monotonic() + 5.0
    while not (loud / "stdout.log.1").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert (loud / "stdout.log.1").exists(), "not rotated within 5 s of the write"
        assert (loud / "stdout.log").stat().st_size <= 64 * 1024
    finally:
        capper.forget_below(str(tmp_path))


def test_logs_are_reached_from_the_application_directory_never_through_a_link(tmp_path):
    """A component renames a directory above its own and links it to another tenant's: the
    capper neither truncates nor writes there, a follower reads nothing there."""
    other = tmp_path / "other-tenant" / "web"
    other.mkdir(parents=True)
    big = b"BOBSECRET=hunter2\n" + b"y" * 200_000 + b"\n"
    (other / "stdout.log").write_bytes(big)
    app = tmp_path / "app"
    (app / "site" / "web").mkdir(parents=True)
    follower = logs.Follower(str(app), "site/web", user_regex("(?m)^BOBSECRET=hunter2$", 100))
    capper = logs.Capper()
    capper._thread = threading.current_thread()   # no thread of its own: this test drives it
    capper._notify = None
    capper.watch(str(app), "site/web", 1024)
    os.rename(app / "site", app / "site.old")
    os.symlink(tmp_path / "other-tenant", app / "site")
    assert capper.check() == 0
    assert not follower.seen()
    assert (other / "stdout.log").read_bytes() == big and not (other / "stdout.log.1").exists()
    assert str(app / "site" / "web") in capper.watched()      # still watched: the link may go
    os.unlink(app / "site")
    os.rename(app / "site.old", app / "site")
    (app / "site" / "web" / "stdout.log").write_bytes(b"BOBSECRET=hunter2\n" + b"x" * 4096)
    assert follower.seen()
    time.sleep(logs.PERIOD)                   # its next look (nothing grew where it could see)
    assert capper.check() == 1


def test_logs_another_machine_writes_are_looked_at_on_the_schedule(tmp_path, monkeypatch):
    """``heard=False`` (a Slurm job's logs, written on its node: NFS tells this machine's kernel
    nothing of it): no inotify watch is relied on; a quiet log is still looked at, at least
    every QUIET seconds, where a heard one is not looked at at all."""
    capper = logs.Capper()
    for name in ("far", "near"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "stdout.log").write_bytes(b"hello\n")
        capper.watch(str(tmp_path), name, 1024, heard=name == "near")
    # the first looks, and the second (PERIOD after), which arms "near" and leaves it to the
    # kernel and the sweep: awaited (a fixed second assumed they were made by then)
    near = str(tmp_path / "near")

    def near_quiet() -> bool:
        seen = capper._seen.get(near)
        return near in capper._armed and seen is not None and seen[2] - time.monotonic() > logs.SWEEP / 2
    assert wait_until(near_quiet, 30), capper._seen.get(near)
    looks = []
    real_open_dir = confine.open_dir

    def counted(base, names, *a, **k):
        if base.startswith(str(tmp_path)):
            looks.append(names[-1])
        return real_open_dir(base, names, *a, **k)
    monkeypatch.setattr(logs.confine, "open_dir", counted)
    try:
        time.sleep(logs.QUIET + 1.0)
        assert "far" in looks and "near" not in looks, looks
        assert list(capper._armed) == [str(tmp_path / "near")]
        (tmp_path / "far" / "stdout.log").write_bytes(b"x" * 2048)    # unheard: seen on schedule
        # (its next look at most QUIET away: 5 s more for a loaded machine, far below SWEEP)
        assert wait_until(lambda: (tmp_path / "far" / "stdout.log.1").exists(), logs.QUIET + 5.0)
    finally:
        monkeypatch.setattr(logs.confine, "open_dir", real_open_dir)
        capper.forget_below(str(tmp_path))
    assert capper._unheard == set()

