"""Small inputs must not cost large resources (issue 16, second table)."""

from __future__ import annotations

import time

from tests.hostile.conftest import HOT, NATIVE

MiB = 1024


def merge_bomb(levels: int = 26) -> str:
    """About 1 KB whose merge keys double per level (PyYAML 6.0.3: a minute of CPU)."""
    lines = ["heat_template_version: 2015-04-30", "resources:",
             "  w:", "    type: CDDLM::Process", "    properties: {argv: [sleep, '600']}",
             "    metadata:", "      p0: &p0 {a: 1, b: 2}"]
    for i in range(1, levels + 1):
        lines.append("      p%d: &p%d {<<: [*p%d, *p%d], k%d: %d}" % (i, i, i - 1, i - 1, i, i))
    return "\n".join(lines) + "\n"


def str_replace_bomb(levels: int = 8) -> str:
    """Nested str_replace, each level ten times the last (511 bytes: 100 MB at level 8)."""
    value = "'xxxxxxxxxx'"
    for _ in range(levels):
        value = "{str_replace: {template: 'vvvvvvvvvv', params: {v: %s}}}" % value
    return ("heat_template_version: 2015-04-30\nresources:\n  w:\n    type: CDDLM::Process\n"
            "    properties:\n      argv: [sleep, '600']\n      env: {BIG: %s}\n" % value)


def test_merge_keys_that_double_per_level_cost_nothing(live):
    assert len(merge_bomb()) < 1500
    peak = live.status("VmHWM")
    app = live.create()
    answer = live.initialize(app, HOT, text=merge_bomb())
    assert answer.fault() is None and answer.elapsed < 2, answer.data[:500]
    assert live.status("VmHWM") - peak < 50 * MiB
    live.after()


def test_200000_attributes_are_refused_before_a_tree_is_built(live):
    attributes = " ".join('a%d=""' % i for i in range(200_000))
    peak = live.status("VmHWM")
    # on a SOAP element
    soap = live.post(live.url, "<api:createRequest %s/>" % attributes)
    assert soap.fault() == "BadArgumentFault" and "more than 256 attributes" in soap.description()
    # on a descriptor element, and spread over many elements
    app = live.create()
    on_app = live.initialize(app, NATIVE, body='<application xmlns="%s" %s/>' % (NATIVE, attributes))
    assert on_app.fault() == "BadArgumentFault" and "attributes" in on_app.description()
    spread = "".join('<component name="c%d" type="process" %s/>'
                     % (i, " ".join('x%d=""' % j for j in range(200))) for i in range(1500))
    many = live.initialize(app, NATIVE, body='<application xmlns="%s">%s</application>' % (NATIVE, spread))
    assert many.fault() == "BadArgumentFault" and "elements and attributes" in many.description()
    assert live.status("VmHWM") - peak < 60 * MiB      # was +299 MiB, kept for good
    assert live.state_of(app) == "instantiated"
    live.after()


def test_nested_str_replace_is_refused_before_it_builds_the_value(live):
    template = str_replace_bomb()
    assert len(template) < 600
    peak = live.status("VmHWM")
    app = live.create()
    answer = live.initialize(app, HOT, text=template)
    assert answer.fault() == "DescriptorFault" and answer.text("//api:kind") == "too-large"
    assert answer.elapsed < 2
    assert live.status("VmHWM") - peak < 30 * MiB      # was 75 -> 462 MiB, and 100 MB stored
    assert live.state_of(app) == "instantiated"
    live.after()


def test_a_component_writing_without_end_is_capped_and_read_incrementally(own_portal):
    p = own_portal(["--max-log-bytes", str(1024 * 1024)])
    writer = ('<application xmlns="%s"><component name="flood" type="process">'
              '<attribute name="argv"><item>python3</item><item>-c</item><item>'
              'import sys, time\nline = "x" * 4095 + "\\n"\nwhile True:\n'
              '    sys.stdout.write(line * 64); sys.stdout.flush(); time.sleep(0.01)</item></attribute>'
              '<attribute name="readiness"><item name="log">never printed</item>'
              '<item name="timeout">6</item></attribute></component></application>' % NATIVE)
    app = p.create()
    assert p.initialize(app, NATIVE, body=writer).fault() is None
    workdir = p.app_dir(app)
    rss, cpu = p.status("VmRSS"), p.cpu_seconds()
    p.run(app)
    started = time.monotonic()
    biggest = 0
    while time.monotonic() - started < 5:            # about 100 MB written meanwhile
        p.witness()
        logs = list(workdir.rglob("stdout.log"))
        if logs:
            biggest = max(biggest, logs[0].stat().st_size)
        time.sleep(0.2)
    used = p.cpu_seconds() - cpu
    log = next(workdir.rglob("stdout.log"))
    rotated = log.with_name("stdout.log.1")
    assert rotated.exists() and rotated.stat().st_size <= 1024 * 1024
    assert biggest < 16 * 1024 * 1024, biggest       # the cap plus a period's writing, not 100 MB
    assert used < 2.5, used                          # was 9.5 s of CPU in 12 s
    assert p.status("VmRSS") - rss < 40 * MiB        # was 83 -> 466 MiB
    assert p.wait_state(app, "failed", timeout=15) == "failed"
    p.after()
