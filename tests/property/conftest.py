"""Hypothesis profiles for the property tests, and the live portal they share.

``make test`` runs the bounded ``ci`` profile: derandomized (a fixed seed, the same examples on
every run) and a few dozen examples, under two minutes. ``make soak`` runs the ``soak``
profile: random seeds (``--hypothesis-seed N`` replays one) and as many examples as
``CDDLM_SOAK_EXAMPLES`` says (default 500). A failure found either way is printed shrunk;
it then becomes a plain regression test.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.conftest import kill_leftovers
from tests.property.harness import PortalUnderTest

_COMMON = dict(deadline=None, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                      HealthCheck.data_too_large])
settings.register_profile("ci", derandomize=True, max_examples=25, **_COMMON)
settings.register_profile("soak", max_examples=int(os.environ.get("CDDLM_SOAK_EXAMPLES", "500")),
                          **_COMMON)
settings.load_profile(os.environ.get("CDDLM_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="module")
def put(tmp_path_factory):
    """One live portal for a module's examples (a portal per example would spend the time
    budget on start-ups); each example uses applications of its own."""
    root = tmp_path_factory.mktemp("property")
    harness = PortalUnderTest(root)
    harness.start()
    yield harness
    harness.close()
    kill_leftovers(root)
