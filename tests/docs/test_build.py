"""The reference builds with MkDocs in strict mode (issue 31): a broken link or anchor, a page
missing from the navigation, or any other warning fails the build, and so this test. The
README's links into docs/ name pages that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.cli.helpers import ROOT
from tests.docs.pages import DOCS

MKDOCS = Path(sys.executable).parent / "mkdocs"


def test_mkdocs_builds_the_reference_without_a_warning(tmp_path):
    r = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "WARNING" not in r.stderr, r.stderr
    pages = sorted(p.stem for p in DOCS.glob("*.md"))
    built = sorted(p.parent.name if p.parent != tmp_path / "site" else "index"
                   for p in (tmp_path / "site").glob("*/index.html") if p.parent.name != "404")
    assert [p for p in pages if p != "index"] == [b for b in built if b != "index"]


def test_the_readme_links_only_to_pages_that_exist():
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert local, "the README links into docs/"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing


def test_the_readme_is_the_first_hour_not_the_reference():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    for heading in ("## Two commands", "## A five-minute tour", "## Where to go next"):
        assert heading in readme
