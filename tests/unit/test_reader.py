"""The one reader of referenced and imported files (cddlm/application/loader.py): the library's
own names only, a walk that follows no link, and a size cap kept while reading."""

from __future__ import annotations

import os
import time

import pytest

from cddlm import ns
from cddlm.application import loader
from cddlm.application.loader import Loader, read_file
from cddlm.errors import ResolutionError

LIB = ns.LIBRARY_PREFIX


def refused(load, location: str, why: str) -> None:
    started = time.monotonic()
    with pytest.raises(ResolutionError) as e:
        load(location)
    assert why in e.value.message, (location, e.value.message)
    assert time.monotonic() - started < 1, location


def test_the_library_is_its_own_documents_by_plain_name():
    shipped = {n for n in os.listdir(loader.LIBRARY_DIR)
               if os.path.isfile(os.path.join(loader.LIBRARY_DIR, n))}
    assert loader.LIBRARY == shipped and "components.cdl" in shipped
    load = Loader()
    assert load(LIB + "components.cdl").lstrip().startswith(b"<?xml")
    for name in ("/etc/passwd", "../../../../etc/passwd", "./components.cdl", "components.cdl/",
                 "", "..", "library/components.cdl", "/proc/self/environ", "components.cdl\0"):
        refused(load, LIB + name, "no such library document")


def test_no_link_is_followed_on_the_way(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "d.xml").write_text("<x/>")
    (tmp_path / "root").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "root" / "swapped")
    assert read_file(str(tmp_path), ["real", "d.xml"], "here", 100) == b"<x/>"
    refused(lambda loc: read_file(str(tmp_path / "root"), ["swapped", "d.xml"], loc, 100), "there",
            "a folder on the way is a symbolic link")
    os.symlink(tmp_path / "real" / "d.xml", tmp_path / "root" / "f.xml")
    refused(lambda loc: read_file(str(tmp_path / "root"), ["f.xml"], loc, 100), "f",
            "a symbolic link")


def test_the_cap_holds_while_reading_whatever_the_size_said():
    """/proc files say they hold nothing: the cap is kept on what is read, not on fstat."""
    load = Loader(allowed_dirs=("/proc",), max_bytes=64)
    assert os.stat("/proc/self/maps").st_size == 0
    refused(load, "/proc/self/maps", "larger than 64 bytes")


def test_classpath_stays_below_the_import_path_and_reads_regular_files(tmp_path):
    lib = tmp_path / "lib"
    (lib / "sub").mkdir(parents=True)
    (lib / "sub" / "a.cdl").write_text("<a/>")
    (tmp_path / "outside.cdl").write_text("<o/>")
    os.mkfifo(lib / "pipe.cdl")
    load = Loader(import_path=(str(lib),))
    assert load("classpath:/sub/a.cdl") == b"<a/>" and load("classpath:sub//./a.cdl") == b"<a/>"
    refused(load, "classpath:/../outside.cdl", "below a folder of the import path")
    refused(load, "classpath:/sub/../../outside.cdl", "below a folder of the import path")
    refused(load, "classpath:/pipe.cdl", "not a regular file")
    refused(load, "classpath:/missing.cdl", "is not on the import path")
