"""The datacenter as a picture: nested boxes (rooms, racks, hosts, NUMA nodes and devices), on
each provider its capacity bars and the components placed on it. Pure: the location tree of
``Views.datacenter`` in, positioned shapes out; ``templates/picture.html`` draws them as SVG.

Children flow left to right (wrapping) at even depths and stack at odd depths, so rooms sit side
by side, racks are columns of hosts, and a host's NUMA nodes sit side by side inside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

PAD = 8            # inside a box
GAP = 8            # between sibling boxes
HEAD = 20          # a box's title line
BAR = 16           # one capacity bar with its gap
CHIP = 20          # one component with its gap
LEAF_W = 220       # the narrowest box that holds bars or components
MAX_W = 1240       # the picture's width before children wrap
CHAR_W = 6.4       # average width of a character at the picture's font size


@dataclass
class Picture:
    width: float
    height: float
    boxes: list[dict] = field(default_factory=list)
    bars: list[dict] = field(default_factory=list)
    chips: list[dict] = field(default_factory=list)


def fit(text: str, width: float) -> str:
    """``text`` cut with an ellipsis to about ``width`` pixels."""
    room = max(1, int(width / CHAR_W))
    return text if len(text) <= room else text[:max(0, room - 1)] + "\u2026"


class _Box:
    def __init__(self, node: dict, depth: int, max_w: float):
        self.node, self.depth = node, depth
        self.dims = sorted(node.get("capacity") or {})
        self.comps = node.get("components") or []
        inner_max = max(LEAF_W, max_w - 2 * PAD)
        self.kids = [_Box(c, depth + 1, inner_max) for c in node.get("children") or []]
        own = len(self.dims) * BAR + len(self.comps) * CHIP
        title_w = len(_title(node)) * CHAR_W + 2 * PAD
        min_w = max(LEAF_W if (self.dims or self.comps) else 0, title_w)
        # where the children go, relative to the content origin
        self.offsets: list[tuple[float, float]] = []
        kids_w = kids_h = 0.0
        if self.kids and depth % 2 == 0:          # flow, wrapping at inner_max
            x = y = row_h = 0.0
            for k in self.kids:
                if x > 0 and x + k.w > inner_max:
                    x, y = 0.0, y + row_h + GAP
                    row_h = 0.0
                self.offsets.append((x, y))
                x += k.w + GAP
                row_h = max(row_h, k.h)
                kids_w = max(kids_w, x - GAP)
            kids_h = y + row_h
        elif self.kids:                           # stack
            y = 0.0
            for k in self.kids:
                self.offsets.append((0.0, y))
                y += k.h + GAP
                kids_w = max(kids_w, k.w)
            kids_h = y - GAP
        self.w = max(min_w, kids_w + 2 * PAD)
        self.h = HEAD + own + (kids_h + PAD if self.kids else 0) + PAD / 2

    def place(self, x: float, y: float, out: Picture, href: Callable[[str], str]) -> None:
        n = self.node
        status = "down" if n.get("down") else ("unreachable" if n.get("host") and not n.get("reachable", True)
                                             else "up")
        out.boxes.append({"x": x, "y": y, "w": self.w, "h": self.h, "depth": self.depth,
                          "name": n["name"], "level": n.get("level") or "", "host": bool(n.get("host")),
                          "status": status, "reason": n.get("reason"),
                          "title": fit(_title(n), self.w - 2 * PAD),
                          "full": _describe(n, status)})
        cy = y + HEAD
        width = self.w - 2 * PAD
        for dim in self.dims:
            total = float(n["capacity"][dim] or 0)
            used = float((n.get("used") or {}).get(dim, 0.0))
            share = used / total if total > 0 else (1.0 if used else 0.0)
            label = "%s %s/%s" % (dim, _num(used), _num(total))
            out.bars.append({"x": x + PAD, "y": cy, "w": width, "fill": width * min(share, 1.0),
                             "over": share > 1.0, "label": label,
                             "full": "%s: %s of %s used (%d%%)" % (n["name"], label.split(" ", 1)[1],
                                                                   _num(total), round(share * 100))})
            cy += BAR
        for c in self.comps:
            app = c.get("appName") or c["app"].rsplit(":", 1)[-1][:8]
            state = c["state"]
            out.chips.append({"x": x + PAD, "y": cy, "w": width, "state": state,
                              "label": fit("%s: %s" % (app, c["path"]), width - 70),
                              "href": href(c["app"]),
                              "full": "%s (%s) component %s (%s) on %s: %s" % (
                                  app, c["app"], c["path"], c["type"], n["name"], state)})
            cy += CHIP
        if self.kids:
            cy += PAD / 2
        for k, (dx, dy) in zip(self.kids, self.offsets):
            k.place(x + PAD + dx, cy + dy, out, href)


def draw(datacenter: dict, href: Callable[[str], str]) -> Picture:
    """Lay out ``datacenter`` (``Views.datacenter``); ``href(app_id)`` links a component."""
    root = {"name": "", "children": datacenter.get("roots") or []}
    top = _Box(root, 0, MAX_W + 2 * PAD)
    pic = Picture(0, 0)
    for k, (dx, dy) in zip(top.kids, top.offsets):
        k.place(dx, dy, pic, href)
    pic.width = max([b["x"] + b["w"] for b in pic.boxes] + [1.0])
    pic.height = max([b["y"] + b["h"] for b in pic.boxes] + [1.0])
    return pic


def _title(n: dict) -> str:
    level = n.get("level")
    text = "%s %s" % (level, n.get("name")) if level else str(n.get("name") or "")
    if n.get("host") and n.get("down"):
        text += " \u2014 DOWN"
    elif n.get("host") and not n.get("reachable", True):
        text += " \u2014 UNREACHABLE"
    return text


def _describe(n: dict, status: str) -> str:
    text = _title(n)
    if n.get("host") and status == "down" and n.get("reason"):
        text += ": " + str(n["reason"])
    if n.get("host"):
        text += " (served by %s)" % n.get("servedBy")
    if n.get("traits"):
        text += "; traits: " + ", ".join(map(str, n["traits"]))
    return text


def _num(value: Any) -> str:
    f = float(value)
    return str(int(f)) if f == int(f) else "%.2f" % f
