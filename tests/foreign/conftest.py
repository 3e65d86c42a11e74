from __future__ import annotations

import pytest

from tests.foreign import start


@pytest.fixture
def foreign(tmp_path):
    """A running foreign CDDLM portal (node-soap), stopped afterwards."""
    portal = start(tmp_path)
    yield portal
    portal.stop()
