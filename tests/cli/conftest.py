"""One live portal per test module (the CLI tests use their own application names), and a
fresh one where a test needs its own."""

from __future__ import annotations

import pytest

from tests.conftest import LivePortal, kill_leftovers


@pytest.fixture(scope="module")
def shared_portal(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-portal")
    state = root / "state"
    state.mkdir()
    lp = LivePortal(state).start()
    yield lp
    lp.stop()
    kill_leftovers(root)
