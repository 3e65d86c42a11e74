"""What the command prints reads as plain text (issue 31): no help shows reST's double
backquotes, and `token ls` and `user ls` are tables with a header row."""

from __future__ import annotations

import argparse
import subprocess
import sys

from cddlm.cli import build_parser
from tests.cli.helpers import ROOT, cddlm


def parsers(parser: argparse.ArgumentParser, name: str = "cddlm"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from parsers(child, "%s %s" % (name, sub))


def test_no_help_shows_rest_markup():
    marked = [name for name, p in parsers(build_parser()) if "``" in p.format_help()]
    assert not marked, marked
    r = cddlm("deploy", "--help")
    assert "resolved as cddlm lang resolve does, with the same file:line" in " ".join(r.stdout.split())


def test_token_ls_and_user_ls_have_a_header_row(tmp_path):
    users = str(tmp_path / "users.json")
    subprocess.run([sys.executable, "-m", "cddlm.cli", "user", "add", "alice", "--users", users],
                   input="a-password-1\n", text=True, check=True, capture_output=True, cwd=ROOT)
    assert cddlm("token", "ls", "alice", "--users", users).stdout == "alice has no tokens\n"
    for label in ("ci", "laptop"):
        cddlm("token", "create", "alice", "--users", users, "--label", label)
    header, first, second = cddlm("token", "ls", "alice", "--users", users).stdout.splitlines()
    assert header.split() == ["ID", "CREATED", "LABEL"]
    assert first.split()[-1] == "ci" and second.split()[-1] == "laptop"     # oldest first
    assert first.index(first.split()[1]) == header.index("CREATED")        # columns line up
    header, row = cddlm("user", "ls", "--users", users).stdout.splitlines()
    assert header.split() == ["NAME", "ROLE", "RUN", "AS", "TOKENS", "DIGEST"]
    assert row.split() == ["alice", "user", "-", "2", "no"]
