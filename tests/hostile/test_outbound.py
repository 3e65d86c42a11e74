"""Other portals that attack the portal calling them (issue 27 item 3): a ``delegate``'s portal
or a host portal that answers one byte every 2 s, and one that streams 400 MB. Throughout, a
bystander's GetResourceProperty is answered within a second, the portal's RSS stays within
100 MiB of where it started, and what depended on the attacker fails with a clear reason (a
host: marked down after the lease). Notification consumers that do the same are in
tests/unit/test_outbound.py (the sender, bounded by its deadline and cap)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from xml.sax.saxutils import escape

from tests.conftest import kill_leftovers
from tests.hostile.conftest import NATIVE, Portal
from tests.rogue import Rogue, stream, trickle

MiB = 1024 * 1024
FLOOD = 400 * MiB
LIMITS = ["--agent-timeout", "2", "--agent-lease", "4"]


def pinned(host: str | None, name: str = "w") -> str:
    pin = '<attribute name="host">%s</attribute>' % host if host else ""
    return ('<application xmlns="%s"><component name="%s" type="process"><attribute name="argv">'
            '<item>sleep</item><item>3600</item></attribute>%s</component></application>'
            % (NATIVE, name, pin))


def delegating(portal: str) -> str:
    return ('<application xmlns="%s"><component name="there" type="delegate">'
            '<attribute name="portal">%s</attribute><attribute name="language">%s</attribute>'
            '<attribute name="descriptor">%s</attribute></component></application>'
            % (NATIVE, escape(portal), NATIVE, escape(pinned(None))))


class Bystander:
    """A well-behaved client reading the victim's state every 0.2 s, and the portal's RSS."""

    def __init__(self, p: Portal):
        self.p = p
        self.times: list[float] = []
        self.rss = [p.status("VmRSS")]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            a = self.p.prop(self.p.victim, "api:state", timeout=10)
            assert a.text("//api:state") == "running", a.data[:300]
            self.times.append(a.elapsed)
            self.rss.append(self.p.status("VmRSS"))

    def __enter__(self) -> "Bystander":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(15)

    def check(self) -> None:
        assert len(self.times) >= 10, self.times
        assert max(self.times) < 1.0, "the bystander waited %.2f s" % max(self.times)
        grown = (max(self.rss) - self.rss[0]) / 1024
        assert grown < 100, "the portal grew by %.0f MiB" % grown


def reason(p: Portal, app: str) -> str:
    return p.post(app, "<api:pingRequest/>").text("//api:terminationInfo/api:reason")


def test_delegates_portals_that_dribble_or_flood_hold_no_request_thread_and_no_memory(own_portal):
    with Rogue(trickle(2.0)) as slow, Rogue(stream(FLOOD)) as flood:
        p = own_portal(["--allow-delegate-url", slow.url, "--allow-delegate-url", flood.url] + LIMITS)
        with Bystander(p) as bystander:
            targets = [slow.url, flood.url] * 6           # 12 initializes at once, 8 server threads
            apps = [p.create() for _ in targets]

            def initialize(pair):
                app, url = pair
                return p.initialize(app, NATIVE, body=delegating(url))
            with ThreadPoolExecutor(len(apps)) as pool:
                answers = list(pool.map(initialize, zip(apps, targets)))
            waited = [a.elapsed for a in answers]
            # a request thread waits on other portals for one deadline (2 s), and only two at
            # once: the others are answered "busy" at once
            assert max(waited) < 2 + 1.5, waited
            busy = [a for a in answers if a.fault() == "ResourceUnavailableFault"]
            assert busy and "--agent-request-slots" in busy[0].description()
            taken = [(app, url) for app, url, a in zip(apps, targets, answers) if a.fault() is None]
            assert len(taken) + len(busy) == len(apps), [a.data[:300] for a in answers]
            for app, _ in taken:
                p.run(app)
            for app, url in taken:
                assert p.wait_state(app, "failed", timeout=40) == "failed"
                why = reason(p, app)
                assert ("no complete answer within 2s" if url == slow.url else
                        "answered more than 8388608 bytes") in why, why
        bystander.check()
        p.after()


def datacenter(folder: Path, slow: str, flood: str) -> Path:
    """A local host h0 (the victim's) and the host portals ``slow`` and ``flood`` (URLs)."""
    dc = folder / "datacenter.json"
    dc.write_text(json.dumps({"resources": ["slots"], "levels": ["host"], "location": [
        {"name": name, "level": "host", "capacity": {"slots": 100000}, **({"agent": url} if url else {})}
        for name, url in (("h0", None), ("slow", slow), ("flood", flood))]}))
    return dc


def test_host_portals_that_dribble_or_flood_are_marked_down_after_the_lease(tmp_path):
    with Rogue(trickle(2.0)) as slow, Rogue(stream(FLOOD)) as flood:
        dc = datacenter(tmp_path, slow.url, flood.url)
        p = Portal(tmp_path, ["--datacenter", str(dc)] + LIMITS).start()
        try:
            p.victim = p.deploy(pinned("h0"), name="victim")
            p.victim_before = p.victim_facts()
            with Bystander(p) as bystander:
                apps = {}
                for host in ("slow", "flood") * 3:
                    app = p.create()
                    assert p.initialize(app, NATIVE, body=pinned(host)).fault() is None
                    p.run(app)
                    apps[app] = host
                started = time.monotonic()
                for app, host in apps.items():
                    assert p.wait_state(app, "failed", timeout=40) == "failed"
                    assert "host %s is down: unreachable" % host in reason(p, app), reason(p, app)
                info = p.prop(p.url, "api:dynamicInfo")
                down = {h: info.text("//api:host[@name='%s']/@down" % h) for h in ("h0", "slow", "flood")}
                assert down == {"h0": "false", "slow": "true", "flood": "true"}, down
                assert time.monotonic() - started < 30
            bystander.check()
            p.after()
        finally:
            p.stop()
            kill_leftovers(tmp_path)        # the victim (on h0, where no fixture looks)
