"""node-soap (npm ``soap``, installed into the same cache as tests/foreign's portal) drives a
live portal from its served WSDL: ``client.js``. Skips, saying so, without node or npm."""

from __future__ import annotations

import os
import shutil

from tests.foreign import node_modules
from tests.interop import DESCRIPTOR, HERE, check_session, run_client


def test_a_node_soap_client_runs_a_session(live_portal):
    modules = node_modules()              # skips without node and npm
    url = live_portal().url
    lines = run_client([shutil.which("node"), str(HERE / "client.js"), url, "node-app", DESCRIPTOR],
                       env=dict(os.environ, NODE_PATH=str(modules)))
    check_session(lines, url, "node-app")
