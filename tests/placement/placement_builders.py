"""Small datacenters and requests for the placement tests, built as the plain dicts of CONTRACT
section 10 (the same data a datacenter file holds)."""

from __future__ import annotations

from cddlm.placement import api


def datacenter(racks=2, hosts=3, cpu=8, ram=32, *, zones=None, numa=False, traits=None,
               network=True, uplink=10_000, downlink=10_000):
    """room -> rack r<i> -> host h<i>_<j> (optionally two NUMA providers per host)."""
    traits = traits or {}
    racks_ = []
    for r in range(racks):
        hs = []
        for h in range(hosts):
            name = "h%d_%d" % (r, h)
            node = {"name": name, "level": "host", "agent": "local",
                    "traits": traits.get(name, [])}
            if numa:
                node["children"] = [{"name": "%s_n%d" % (name, k), "level": "numa",
                                     "capacity": {"cpu": cpu // 2, "ram": ram // 2}}
                                    for k in range(2)]
            else:
                node["capacity"] = {"cpu": cpu, "ram": ram}
            hs.append(node)
        racks_.append({"name": "r%d" % r, "level": "rack", "children": hs})
    dc = {"resources": ["cpu", "ram"], "levels": ["room", "rack", "host", "numa"],
          "location": {"name": "room", "level": "room", "children": racks_}}
    if network:
        dc["network"] = {"name": "core", "children": [
            {"name": "tor%d" % r, "bandwidth": uplink, "children": [
                {"host": "h%d_%d" % (r, h), "bandwidth": downlink} for h in range(hosts)]}
            for r in range(racks)]}
    if zones:
        dc["scopes"] = {"zone": zones}
    return dc


def components(names, cpu=1, ram=1, **extra):
    return [dict({"name": n, "demand": {"cpu": cpu, "ram": ram}}, **extra) for n in names]


def solve(dc_data, req_data, time_limit=5.0, **kw):
    dc = api.load_datacenter(dc_data)
    req = api.load_request(req_data, dc)
    result = api.solve(dc, req, time_limit=time_limit, **kw)
    return dc, req, result, api.result_json(dc, req, result)
