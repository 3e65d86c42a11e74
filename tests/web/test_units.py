"""The dashboard's pure parts: the descriptor highlighter, the datacenter picture's layout, and
the log tails it reads."""

from __future__ import annotations

import random
import time

import pytest

from cddlm import ns
from cddlm.application.enactment.local import LocalRunner
from cddlm.web import highlight, picture
from tests.web.scenario import SHOP

HOT = """heat_template_version: 2015-04-30
# a comment: with a colon
parameters:
  sleep: {type: number, default: 3600}
resources:
  worker:
    type: CDDLM::Process
    properties:
      argv: [sleep, {get_param: sleep}, "quoted: text", 'single']
      enabled: true
"""


@pytest.mark.parametrize("language, text", [(ns.NATIVE, SHOP), (ns.HOT, HOT), ("urn:x", "plain <b>")])
def test_highlighting_keeps_every_character(language, text):
    assert "".join(t for _, t in highlight.highlight(language, text)) == text


def test_highlighting_names_what_it_sees():
    xml = dict((t, k) for k, t in highlight.highlight(ns.NATIVE, SHOP))
    assert xml["<component"] == "tag" and xml["name"] == "attr" and xml['"site"'] == "value"
    yaml = dict((t, k) for k, t in highlight.highlight(ns.HOT, HOT))
    assert yaml["heat_template_version"] == "key" and yaml["# a comment: with a colon"] == "comment"
    assert yaml['"quoted: text"'] == "value" and yaml["true"] == "literal" and yaml["3600"] == "number"
    assert highlight.kind_of(ns.CDL, "") == "xml" and highlight.kind_of("urn:unknown", "text") == "text"


def test_highlighting_random_and_hostile_text_is_lossless_and_linear():
    rng = random.Random(7)
    alphabet = "<>/='\"\n :#-[]{},!?abc&;"
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 300)))
        for language in (ns.NATIVE, ns.HOT):
            assert "".join(t for _, t in highlight.highlight(language, text)) == text
    for worst in ('"a' * 50_000, "k" * 200_000, ("x " * 50_000) + ":", "<!--" + "-" * 100_000):
        start = time.perf_counter()
        for language in (ns.NATIVE, ns.HOT):
            highlight.highlight(language, worst)
        assert time.perf_counter() - start < 5.0


def _dc(racks: int, hosts: int, comps: int) -> dict:
    return {"roots": [{"name": "room", "level": "room", "children": [
        {"name": "rack%d" % r, "level": "rack", "children": [
            {"name": "h%d-%d" % (r, h), "level": "host", "host": True, "reachable": True,
             "capacity": {"cpu": 4, "ram": 8}, "used": {"cpu": 5}, "down": h == 0, "reason": "x",
             "components": [{"app": "urn:uuid:%d" % c, "appName": "application-with-a-long-name-%d" % c,
                             "path": "site/web", "type": "process", "state": "running"}
                            for c in range(comps)],
             "children": []} for h in range(hosts)]} for r in range(racks)]}]}


def test_the_picture_nests_children_inside_parents_without_overlap():
    pic = picture.draw(_dc(racks=9, hosts=4, comps=3), lambda app: "/applications/" + app)
    boxes = {b["name"]: b for b in pic.boxes}
    assert len(boxes) == 1 + 9 + 36 and len(pic.chips) == 36 * 3 and len(pic.bars) == 36 * 2
    assert pic.width <= picture.MAX_W + 2 * picture.PAD
    room = boxes["room"]
    for r in range(9):
        rack = boxes["rack%d" % r]
        assert _inside(rack, room)
        hosts = [boxes["h%d-%d" % (r, h)] for h in range(4)]
        for i, a in enumerate(hosts):
            assert _inside(a, rack)
            assert all(not _overlap(a, b) for b in hosts[i + 1:])
        assert all(not _overlap(rack, boxes["rack%d" % o]) for o in range(r + 1, 9))
    for chip in pic.chips:
        assert len(chip["label"]) * picture.CHAR_W <= chip["w"] and chip["label"].endswith("\u2026")
        assert chip["href"].startswith("/applications/urn:uuid:")
    over = [b for b in pic.bars if b["over"]]
    assert len(over) == 36 and all(b["fill"] == b["w"] for b in over)
    assert boxes["h0-0"]["status"] == "down" and "DOWN" in boxes["h0-0"]["title"]


def _inside(a, b):
    return a["x"] >= b["x"] and a["y"] >= b["y"] and a["x"] + a["w"] <= b["x"] + b["w"] + 0.01 \
        and a["y"] + a["h"] <= b["y"] + b["h"] + 0.01


def _overlap(a, b):
    return a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and \
        a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]


def test_log_tails_read_only_the_end(tmp_path):
    runner = LocalRunner("h1", str(tmp_path))
    folder = tmp_path / "apps" / "abc" / "web"
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_text("".join("line %d\n" % i for i in range(5000)))
    assert runner.log_tail("urn:uuid:abc", "web", "stdout", 3) == ["line 4997", "line 4998", "line 4999"]
    tail = runner.log_tail("urn:uuid:abc", "web", "stdout", 10_000, max_bytes=100)
    assert tail[-1] == "line 4999" and all(t.startswith("line ") for t in tail) and len(tail) < 12
    assert runner.log_tail("urn:uuid:abc", "web", "stderr", 5) == []
    with pytest.raises(ValueError):
        runner.log_tail("urn:uuid:abc", "web", "../../etc/passwd", 5)
