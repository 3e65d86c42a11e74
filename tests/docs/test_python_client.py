"""docs/python-client.md is a script that works: its Python blocks, in order, run against a live
portal (found through $CDDLM_PORTAL as the page says) and print what the page shows at its end
(ids, pids, ports and other numbers aside)."""

from __future__ import annotations

from tests.docs.pages import run_script


def test_the_python_client_page_runs_as_written(shared_portal, tmp_path):
    _, printed, shown = run_script("python-client.md", shared_portal.url, tmp_path)
    assert printed == shown
