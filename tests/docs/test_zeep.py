"""docs/zeep.md is a zeep session that works (issue 31): its Python blocks, in order, drive a
live portal with nothing but zeep and lxml and print what the page shows (numbers aside),
among them ``resolve(path="web/port").value``: zeep returned an empty object there while the
schema typed ``api:value`` as a mixed wildcard. The port it prints is the one the web server
says it listens on."""

from __future__ import annotations

import re

from tests.docs.pages import run_script


def test_the_zeep_page_runs_as_written(shared_portal, tmp_path):
    stdout, printed, shown = run_script("zeep.md", shared_portal.url, tmp_path)
    assert printed == shown, stdout
    port = re.search(r"^web/port: (\d+)$", stdout, re.M).group(1)
    assert "Serving HTTP on 0.0.0.0 port %s " % port in stdout
