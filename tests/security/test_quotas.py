"""Quotas per owner (``--quota``): a user who would exceed one gets ext:QuotaExceededFault
naming it, and nothing changes; an administrator has none; destroying frees the place."""

from __future__ import annotations

import pytest

from cddlm import ns
from cddlm.client import Credentials, Listener, Portal, PortalFault
from tests.security import wire
from tests.security.conftest import PASSWORDS


@pytest.fixture(scope="module")
def quota_net(network_factory):
    return network_factory(["--quota", "applications=2", "--quota", "components=3",
                            "--quota", "descriptor_bytes=2000", "--quota", "subscriptions=1"])


def client(net, user):
    return Portal(net.url, credentials=Credentials(user, PASSWORDS[user]), failover=False)


def many(n: int, pad: int = 0) -> str:
    comps = "".join('<component name="c%d" type="process"><attribute name="argv"><item>sleep</item>'
                    '<item>60</item></attribute><attribute name="description">%s</attribute></component>'
                    % (i, "x" * pad) for i in range(n))
    return '<application xmlns="urn:cddlm:lang:components:1">%s</application>' % comps


def exceeded(info, quota: str) -> None:
    assert info.value.fault == "QuotaExceededFault", info.value
    assert info.value.detail.findtext("{%s}quota" % ns.EXT) == quota
    assert "quota exceeded" in info.value.message


def test_each_quota_refuses_cleanly(quota_net):
    net = quota_net
    bob = client(net, "bob")
    first = bob.create(name="q1")
    second = bob.create(name="q2")
    before = wire.snapshot(net.db)
    with pytest.raises(PortalFault) as info:
        bob.create(name="q3")
    exceeded(info, "applications")
    with pytest.raises(PortalFault) as info:                    # 4 components, 3 allowed
        first.initialize(wire.NATIVE, body=wire.fragment(many(4)))
    exceeded(info, "components")
    with pytest.raises(PortalFault) as info:                    # 2 components, 3 KB
        first.initialize(wire.NATIVE, body=wire.fragment(many(2, pad=1500)))
    exceeded(info, "descriptor_bytes")
    assert wire.snapshot(net.db) == before
    first.initialize(wire.NATIVE, body=wire.fragment(many(3)))   # within every quota
    second.terminate()
    second.wait_for("terminated", timeout=30)
    with Listener() as listener:
        sub = first.subscribe(listener.url("one"))
        before = wire.snapshot(net.db)
        with pytest.raises(PortalFault) as info:
            second.subscribe(listener.url("two"))
        exceeded(info, "subscriptions")
        assert wire.snapshot(net.db) == before
        second.destroy()                                      # frees an application's place
        before = wire.snapshot(net.db)
        with pytest.raises(PortalFault) as info:              # the create option counts too
            bob.create(name="q3", options={"urn:cddlm:option:subscribe": listener.url("three")})
        exceeded(info, "subscriptions")
        assert wire.snapshot(net.db) == before
        sub.unsubscribe()
    bob.create(name="q3")
    # an administrator is not held to the quotas
    carol = client(net, "carol")
    for i in range(3):
        carol.create(name="admin-%d" % i)
