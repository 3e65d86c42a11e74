"""The reference's pages as the tests read them: a page's text, its fenced blocks by language."""

from __future__ import annotations

import re

from tests.cli.helpers import ROOT

DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text()


def blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``language`` (```python ... ```), in order."""
    return re.findall(r"^```%s\n(.*?)^```" % re.escape(language), text, re.S | re.M)
