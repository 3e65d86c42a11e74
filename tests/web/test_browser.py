"""The dashboard in a real browser (chromium through Playwright) against a live portal that
runs an application across a datacenter of local hosts: what the pages show, that markup in
names and logs stays text, and that a killed component turns the page to ``failed`` without a
reload. Screenshots go to the test's tmp folder (printed) for review."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request

import pytest
import yaml

from cddlm.client import Portal
from tests.web.scenario import DATACENTER, HOSTILE_NAME, HOSTILE_STDERR, shop_descriptor

NATIVE = "urn:cddlm:lang:components:1"
PHONE = {"width": 390, "height": 844}
WIDE = {"width": 1280, "height": 900}


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


@pytest.fixture
def shop(live_portal, tmp_path):
    """A live portal on the datacenter, h4 marked down, the shop application running on it,
    and an application whose name is markup."""
    dc = tmp_path / "dc.yaml"
    dc.write_text(yaml.safe_dump(DATACENTER))
    lp = live_portal(extra=["--datacenter", str(dc), "--liveness-interval", "0.5"])
    portal = Portal(lp.url)
    portal.set_host_state("h4", True, "disk <failing>")
    portal.create(name=HOSTILE_NAME)
    app = portal.create(name="shop")
    app.initialize(language=NATIVE, body=shop_descriptor())
    app.run()
    app.wait_for("running", timeout=30)
    base = lp.url.rsplit("/cddlm/", 1)[0]
    yield base, app
    app.terminate("test over")


def components(base: str, app_id: str) -> dict[str, dict]:
    data = get_json("%s/api/v1/applications/%s/components" % (base, app_id))
    return {c["path"]: c for c in data["components"]}


def new_page(browser, viewport):  # noqa: F811
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.on("dialog", lambda d: (_ for _ in ()).throw(AssertionError("a dialog opened: " + d.message)))
    page.console_errors = []        # what the browser's console says went wrong (a 404 ...)
    page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
    return context, page


def test_pages_show_the_application_escape_markup_and_turn_failed_live(browser, shop, tmp_path):  # noqa: F811
    base, app = shop
    shots = tmp_path / "screens"
    shots.mkdir()
    print("\nscreenshots in", shots)
    # wait until the web server listens, so its port is on the page
    deadline = time.monotonic() + 15
    while not components(base, app.id)["site/web"]["ports"]:
        assert time.monotonic() < deadline, components(base, app.id)["site/web"]
        time.sleep(0.2)
    comps = components(base, app.id)
    context, page = new_page(browser, WIDE)
    try:
        # the applications page: the markup name is text, states and counts are shown
        page.goto(base + "/")
        rows = page.locator("table.apps tbody tr")
        assert rows.count() == 2
        names = page.locator("table.apps tbody th a").all_inner_texts()
        assert HOSTILE_NAME in names and "shop" in names
        assert page.locator("table.apps img").count() == 0
        shop_row = page.locator("tr", has=page.get_by_role("link", name="shop", exact=True))
        assert "running" in shop_row.locator(".badge").inner_text()
        assert "3 running" in shop_row.locator(".comp-counts").inner_text()     # site holds two
        page.screenshot(path=str(shots / "applications-1280.png"), full_page=True)
        page.wait_for_load_state("networkidle")     # (the browser asks for an icon after the load)
        assert page.console_errors == []

        # one application: components with state, host, pid and ports; logs; audit; descriptor
        page.get_by_role("link", name="shop", exact=True).click()
        page.wait_for_selector("table.components")
        assert page.locator("#app-head .badge").inner_text().strip().endswith("running")
        for path in ("site", "site/web", "site/worker", "db"):
            row = page.locator('tr[data-component="%s"]' % path)
            assert row.count() == 1, path
        web = page.locator('tr[data-component="site/web"]')
        assert str(comps["site/web"]["ports"][0]) in web.inner_text()
        assert str(comps["site/web"]["pid"]) in web.locator(".pid").inner_text()
        assert comps["site/web"]["host"] in web.inner_text()
        hosts = {comps[p]["host"] for p in ("site/web", "site/worker", "db")}
        assert len(hosts) == 3 and "h4" not in hosts and "h5" not in hosts
        # the worker's stderr is on the page as the text it printed
        page.goto(page.url.split("?")[0] + "?component=site/worker#logs")
        assert HOSTILE_STDERR in page.locator("#logs").inner_text()
        assert "worker started" in page.locator("#logs").inner_text()
        assert page.evaluate("window.__pwned") is None
        audit = page.locator("table.audit tbody tr")
        assert audit.count() == 1 and "yes" in audit.inner_text() and "anti-collocation" in audit.inner_text()
        assert page.locator("svg.picture a.chip").count() == 3
        page.locator("#descriptor-h + details summary").click()
        assert page.locator("pre.code .tok-tag").count() > 10
        assert "<component" in page.locator("pre.code").inner_text()
        page.screenshot(path=str(shots / "application-1280.png"), full_page=True)

        # kill the worker: the page turns failed by itself, no reload
        page.evaluate("""() => {
            window.__sameDocument = true;
            const badge = () => document.querySelector('#app-head .badge').textContent;
            new MutationObserver(() => {
                if (!window.__failedAt && badge().includes('failed')) window.__failedAt = Date.now();
            }).observe(document.body, {childList: true, subtree: true, characterData: true});
        }""")
        os.kill(comps["site/worker"]["pid"], signal.SIGKILL)
        page.wait_for_function("() => window.__failedAt", timeout=15000)
        assert page.evaluate("window.__sameDocument") is True
        failed_at = next(h["at"] for h in get_json("%s/api/v1/applications/%s/history" % (base, app.id))["history"]
                         if h["state"] == "failed")
        shown_after = page.evaluate("window.__failedAt") / 1000.0 - failed_at
        print("page showed failed %.3f s after the lifecycle event (machine shared: noisy)" % shown_after)
        # within a second of the event (the poll is every 0.5 s); a little slack for a loaded machine
        assert shown_after < 1.5
        page.wait_for_selector('tr[data-component="site/worker"][data-state="failed"]')
        term = page.locator("section.termination").inner_text()
        assert "site/worker" in term and "KILL" in term
        assert page.evaluate("window.__pwned") is None
        page.screenshot(path=str(shots / "application-failed-1280.png"), full_page=True)

        # the datacenter: every host drawn, h4 down, h5 unreachable, components on providers
        page.goto(base + "/datacenter")
        assert page.locator('svg.picture g.node[data-node="h4"].node-down').count() == 1
        assert page.locator('svg.picture g.node[data-node="h5"].node-unreachable').count() == 1
        assert page.locator('svg.picture g.node[data-node="h3-numa0"]').count() == 1
        chips = page.locator("svg.picture a.chip")
        assert chips.count() == 3
        assert page.locator("svg.picture a.chip.st-failed").count() == 1
        page.screenshot(path=str(shots / "datacenter-1280.png"), full_page=True)

        page.goto(base + "/hosts")
        h4 = page.locator('tr[data-host="h4"]').inner_text()
        assert "down" in h4 and "disk <failing>" in h4
        assert "unreachable" in page.locator('tr[data-host="h5"]').inner_text()
        assert page.locator("table.peers tbody tr").count() == 1
        assert "this portal" in page.locator("table.peers").inner_text()
        page.screenshot(path=str(shots / "hosts-1280.png"), full_page=True)
    finally:
        context.close()

    # a phone-width window: nothing wider than the screen but the scrolling picture and tables
    context, page = new_page(browser, PHONE)
    try:
        for name, url in (("applications", base + "/"), ("application", base + "/applications/" + app.id)):
            page.goto(url)
            overflow = page.evaluate("""() => [...document.querySelectorAll('body *')].filter(el => {
                const r = el.getBoundingClientRect();
                return r.right > window.innerWidth + 1 && !el.closest('.table-scroll, .picture-scroll, pre');
            }).map(el => el.tagName + '.' + el.className)""")
            assert overflow == [], (name, overflow)
            page.screenshot(path=str(shots / ("%s-phone.png" % name)), full_page=True)
    finally:
        context.close()
