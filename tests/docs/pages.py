"""The reference's pages as the tests read them: a page's text, its fenced blocks by language,
and a page whose Python blocks are one script, run as a reader would."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.cli.helpers import ROOT, env_for, shape

DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text()


def blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``language`` (```python ... ```), in order."""
    return re.findall(r"^```%s\n(.*?)^```" % re.escape(language), text, re.S | re.M)


def run_script(name: str, portal_url: str, tmp_path: Path) -> tuple[str, list[str], list[str]]:
    """The page's Python blocks run in order as one script, in the repository (the examples'
    paths are relative to it) with ``$CDDLM_PORTAL`` set: what it printed, its shape, and the
    shape of the page's one ``text`` block, which shows what it prints."""
    text = page(name)
    script = tmp_path / "script.py"
    script.write_text("".join(blocks(text, "python")))
    (shown,) = blocks(text, "text")
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env_for(portal_url),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout, shape(r.stdout.splitlines()), shape(shown.splitlines())
