"""One live portal for the pages' scripts."""

from tests.cli.conftest import shared_portal  # noqa: F401  (the fixture, for this folder too)
