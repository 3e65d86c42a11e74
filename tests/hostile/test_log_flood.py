"""A component that floods its logs while another application already runs (issue 27, item 12):
the log capper, asleep until its next look at the quiet application, must arm and look at the
new component's directory at once, not at its next sweep (384 MiB stayed on disk for 30 s)."""

from __future__ import annotations

import time
from xml.sax.saxutils import escape

from tests.hostile.conftest import NATIVE

MiB = 1024 * 1024
CAP = 1 * MiB
FLOOD = 64 * MiB                  # on each of stdout and stderr


def _on_disk(folder) -> int:
    total = 0
    for name in ("stdout.log", "stdout.log.1", "stderr.log", "stderr.log.1"):
        try:
            total += (folder / name).stat().st_blocks * 512
        except FileNotFoundError:
            pass
    return total


def test_a_second_applications_flood_is_capped_at_once(own_portal):
    p = own_portal(["--max-log-bytes", str(CAP)])      # the victim runs, quiet
    # the capper looks at the victim's new directory at once and again a moment later; then,
    # quiet, it is left to the kernel and the capper sleeps until its sweep (30 s)
    time.sleep(1.0)
    line = "0123456789abcdefghijklmnopqrstuvwxyz" * 2
    script = ('yes %s | head -c %d; yes %s | head -c %d >&2; touch written; exec sleep 600'
              % (line, FLOOD, line, FLOOD))
    body = ('<application xmlns="%s"><component name="flood" type="process"><attribute name="argv">'
            '<item>sh</item><item>-c</item><item>%s</item></attribute></component></application>'
            % (NATIVE, escape(script)))
    app = p.deploy(body)
    folder = p.app_dir(app) / "flood"
    deadline = time.monotonic() + 30
    while not (folder / "written").exists():
        assert time.monotonic() < deadline, "the component did not finish writing"
        time.sleep(0.02)
    written = time.monotonic()
    most = 4 * CAP + 64 * 1024            # two logs and their .1, each at most its cap
    while _on_disk(folder) > most and time.monotonic() - written < 2.0:
        time.sleep(0.02)
    held = _on_disk(folder)
    assert held <= most, "%.1f MiB on disk 2 s after the flood" % (held / MiB)
    for name in ("stdout.log.1", "stderr.log.1"):
        assert 0 < (folder / name).stat().st_size <= CAP, name
    assert p.terminate(app).fault() is None
    p.after()
