"""The file component's no-follow file system work, and capped, followed component logs."""

from __future__ import annotations

import os
import time

import pytest

from cddlm.application.enactment import files, logs
from cddlm.budget import user_regex


def test_files_are_written_replaced_and_removed_without_following_links(tmp_path):
    root = tmp_path / "host"
    (root / "apps" / "a").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, root / "apps" / "a" / "f.txt")
    os.symlink(victim, root / "apps" / "a" / "f.txt.cddlm-tmp")
    path = files.write(str(root), ["apps", "a"], "f.txt", b"new", 0o640)
    assert victim.read_text() == "precious" and open(path).read() == "new"
    assert oct(os.stat(path).st_mode & 0o777) == "0o640"
    assert files.exists(str(root), ["apps", "a"], "f.txt")
    files.write(str(root), ["apps", "a"], "deep/er/g.txt", b"x", 0o600)      # folders made
    # a directory on the way replaced by a link: refused, and nothing behind it is touched
    os.rename(root / "apps" / "a" / "deep", tmp_path / "moved")
    os.symlink(tmp_path / "moved", root / "apps" / "a" / "deep")
    with pytest.raises(files.UnsafePath):
        files.write(str(root), ["apps", "a"], "deep/er/g.txt", b"y", 0o600)
    with pytest.raises(files.UnsafePath):
        files.remove(str(root), ["apps", "a"], "deep/er/g.txt")
    assert not files.exists(str(root), ["apps", "a"], "deep/er/g.txt")
    assert (tmp_path / "moved" / "er" / "g.txt").read_text() == "x"
    files.remove(str(root), ["apps", "a"], "f.txt")
    assert not os.path.lexists(path)
    for bad in ("/etc/passwd", "../x", "a/../../x", ""):
        with pytest.raises(files.UnsafePath):
            files.write(str(root), ["apps", "a"], bad, b"", 0o600)


def test_a_follower_reads_only_what_is_new_and_restarts_after_rotation(tmp_path):
    out = tmp_path / "stdout.log"
    follower = logs.Follower(str(tmp_path), user_regex("(?m)^ready$", 100))   # as local.py does
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
    assert logs.rotate(str(out), 1000)
    kept = (tmp_path / "stdout.log.1").read_bytes()
    assert len(kept) <= 1000 and kept.startswith(b"line ") and kept.endswith(b"line 009999\n")
    assert out.stat().st_size == 0
    assert not logs.rotate(str(out), 1000)


def test_the_capper_keeps_a_growing_log_near_its_cap(tmp_path):
    capper = logs.Capper()
    capper.watch(str(tmp_path), 64 * 1024)
    with open(tmp_path / "stderr.log", "ab") as f:
        for _ in range(40):
            f.write(b"y" * 8191 + b"\n")
            f.flush()
            time.sleep(0.02)
    capper.check()
    assert (tmp_path / "stderr.log").stat().st_size <= 64 * 1024
    assert (tmp_path / "stderr.log.1").exists()
    capper.forget_below(str(tmp_path.parent))
    assert capper.watched() == {}
