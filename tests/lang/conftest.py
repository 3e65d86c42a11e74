"""Fixtures for the descriptor-language tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lang.helpers import corpus_dir


@pytest.fixture
def corpus() -> Path:
    folder = corpus_dir()
    if folder is None:
        pytest.skip("the SmartFrog CDL corpus (../shared/conformance/smartfrog-cdl) is not here")
    return folder
