"""Demands split over one host's nested providers (``placement.nested``), through the
allocation-candidates engine."""

import pytest

from cddlm.errors import PlacementError
from cddlm.placement import api, nested

DC = api.load_datacenter({
    "resources": ["cpu", "gpu", "disk"], "levels": ["host", "numa", "device"],
    "location": [
        {"name": "h1", "level": "host", "agent": "local", "capacity": {"disk": 100}, "children": [
            {"name": "n0", "level": "numa", "capacity": {"cpu": 4}, "children": [
                {"name": "g0", "level": "device", "capacity": {"gpu": 1}, "traits": ["CUSTOM_FAST"]}]},
            {"name": "n1", "level": "numa", "capacity": {"cpu": 4}}]},
        {"name": "h2", "level": "host", "agent": "local", "capacity": {"cpu": 8, "disk": 100}}]})
H1, H2 = DC.by_name["h1"], DC.by_name["h2"]


def test_only_a_demand_no_provider_has_every_resource_of_is_split():
    assert nested.needs_split(DC, {"cpu": 2, "gpu": 1})
    assert not nested.needs_split(DC, {"cpu": 2, "disk": 10})   # h2 has both
    assert not nested.needs_split(DC, {"gpu": 1})                # g0 alone
    assert not nested.needs_split(DC, {})


def test_allocations_take_each_resource_from_a_provider_of_one_tree():
    found = nested.allocations(DC, H1, {"cpu": 2, "gpu": 1}, {})
    assert found == [{"g0": {"gpu": 1.0}, "n0": {"cpu": 2.0}}, {"g0": {"gpu": 1.0}, "n1": {"cpu": 2.0}}]
    assert nested.anchor(DC, found[0]) == "n0" and nested.anchor(DC, found[1]) == "h1"
    assert nested.allocations(DC, H2, {"cpu": 2, "gpu": 1}, {}) == []


def test_used_capacity_and_traits_decide():
    assert nested.allocations(DC, H1, {"cpu": 2, "gpu": 1}, {"g0": {"gpu": 1}}) == []
    assert nested.allocations(DC, H1, {"cpu": 2, "gpu": 1}, {"n0": {"cpu": 3}}) == \
        [{"g0": {"gpu": 1.0}, "n1": {"cpu": 2.0}}]
    assert len(nested.allocations(DC, H1, {"cpu": 2, "gpu": 1}, {}, traits=["CUSTOM_FAST"])) == 2
    assert nested.allocations(DC, H1, {"cpu": 2, "gpu": 1}, {}, forbidden=["CUSTOM_FAST"]) == []


def test_split_amounts_are_whole():
    with pytest.raises(PlacementError, match="whole amounts"):
        nested.allocations(DC, H1, {"cpu": 1.5, "gpu": 1}, {})
