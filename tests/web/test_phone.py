"""The dashboard at a phone's width (390x844) in a real browser (issue 31): every column of the
components table is on the screen (each row a card, every cell labelled), so the ports, the
exit and the logs link are reachable without scrolling sideways; the applications' cards label
their dates; and a card counts running components as the CLI does (examples/webapp.cdl: three
processes in a compound, "3 running" in both). Screenshots go to the test's tmp folder."""

from __future__ import annotations

import re

from tests.cli.helpers import cddlm

PHONE = {"width": 390, "height": 844}

OFF_SCREEN = """sel => [...document.querySelectorAll(sel)].filter(el => {
    const r = el.getBoundingClientRect();
    return r.width === 0 || r.left < 0 || r.right > window.innerWidth + 1;
}).map(el => el.className + ' ' + el.textContent.trim().slice(0, 40))"""

LABEL = "el => getComputedStyle(el, '::before').content"


def test_the_phone_layout_shows_every_column_and_labels_the_dates(browser, live_portal, tmp_path):
    lp = live_portal()
    deployed = cddlm("deploy", "examples/webapp.cdl", portal=lp.url)
    assert "webapp: running (3 running)" in deployed.stdout, deployed.stdout
    app_id = re.search(r"\((urn:uuid:[0-9a-f-]+)\)", deployed.stdout).group(1)
    base = lp.url.rsplit("/cddlm/", 1)[0]
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    try:
        page.goto(base + "/")
        card = page.locator("table.apps tbody tr").first
        assert card.locator("td.comp-counts").inner_text() == "3 running"     # as the CLI says
        for cell, label in (("td.created", '"Created"'), ("td.started", '"Started"')):
            assert card.locator(cell).evaluate(LABEL) == label
            assert card.locator(cell + " time").is_visible()
        assert page.evaluate(OFF_SCREEN, "table.apps tbody td, table.apps tbody th") == []
        page.screenshot(path=str(tmp_path / "applications-phone.png"), full_page=True)

        page.goto(base + "/applications/" + app_id)
        rows = page.locator("table.components tbody tr")
        assert rows.count() == 4                                            # db, site, web1, web2
        assert page.evaluate(OFF_SCREEN, "table.components tbody td, table.components tbody th") == []
        assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
        web1 = page.locator('table.components tr[data-component="site/web1"]')
        assert web1.locator("td.ports").evaluate(LABEL) == '"Ports"'
        assert re.fullmatch(r"\d+", web1.locator("td.ports").inner_text().split()[-1])
        assert web1.locator("td.exit").evaluate(LABEL) == '"Exit"'
        page.screenshot(path=str(tmp_path / "application-phone.png"), full_page=True)
        web1.locator("td.detail a", has_text="logs").click()                 # reachable: a tap
        page.wait_for_url(re.compile(r"component=site(%2F|/)web1"))
        assert "Serving HTTP" in page.locator("#logs").inner_text()
    finally:
        context.close()
        cddlm("terminate", "webapp", portal=lp.url)
    print("\nscreenshots in", tmp_path)
