"""docs/python-client.md is a script that works: its Python blocks, in order, run against a live
portal (found through $CDDLM_PORTAL as the page says) and print what the page shows at its end
(ids, pids, ports and other numbers aside)."""

from __future__ import annotations

import subprocess
import sys

from tests.cli.helpers import ROOT, env_for, shape
from tests.docs.pages import blocks, page


def test_the_python_client_page_runs_as_written(shared_portal, tmp_path):
    text = page("python-client.md")
    script = tmp_path / "follow.py"
    script.write_text("".join(blocks(text, "python")))
    (printed,) = blocks(text, "text")
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env_for(shared_portal.url),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert shape(r.stdout.splitlines()) == shape(printed.splitlines()), r.stdout
