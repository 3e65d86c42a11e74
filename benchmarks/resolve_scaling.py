"""How CDL resolution scales: generated documents of 1,000 and 10,000 components, each
extending a chain of 20 prototypes and referencing a sibling, resolved and checked as
``initialize`` would (``descriptors.resolve``: the CDL language, then ``library.check``).

    .venv/bin/python benchmarks/resolve_scaling.py [SIZES...]

Each size runs in a fresh process so that its peak memory is its own: the figure is the
growth of the peak resident set (getrusage) while resolving; lxml allocates outside Python,
so tracemalloc would miss most of it. Times are the best of five runs, wall clock and CPU
(the process's own, less disturbed by other work on the machine; the ratio is taken on it).
Targets: 10,000 components under 2 s, and no more than 12 times the 1,000 case.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

DEPTH = 20
HEAD = ('<cdl:cdl xmlns:cdl="http://www.gridforum.org/namespaces/2005/02/cddlm/CDL-1.0" '
        'xmlns:cmp="http://www.gridforum.org/cddlm/components/2005/02">'
        '<cdl:import location="urn:cddlm:library:components.cdl"/>')


def document(components: int) -> str:
    levels = ['<level0 cdl:extends="cmp:process" tier="0"><argv><item>sleep</item>'
              '<item>600</item></argv><env><TIER>0</TIER></env><grace>1</grace>'
              '<description>level 0</description></level0>']
    for k in range(1, DEPTH):
        extra = "<restart>on-failure</restart>" if k % 5 == 0 else ""
        levels.append('<level%d cdl:extends="level%d" tier="%d"><description>level %d</description>%s'
                      '</level%d>' % (k, k - 1, k, k, extra, k))
    system = ['<app cdl:extends="cmp:compound">']
    for i in range(components):
        peer = '<PEER cdl:ref="../../c%d/env/SELF"/>' % (i - 1) if i else ""
        system.append('<c%d cdl:extends="level%d"><env><SELF>c%d</SELF>%s</env></c%d>'
                      % (i, DEPTH - 1, i, peer, i))
    system.append("</app>")
    return "%s<cdl:configuration>%s</cdl:configuration><cdl:system>%s</cdl:system></cdl:cdl>" % (
        HEAD, "".join(levels), "".join(system))


def measure(components: int) -> dict:
    from cddlm import ns
    from cddlm.application import descriptors
    text = document(components)
    descriptors.resolve(document(10), ns.CDL)       # imports and first-use costs
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times, cpu = [], []
    for _ in range(5):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = descriptors.resolve(text, ns.CDL)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        count = result.deployment.count()
        del result
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert count == components + 1, count
    return {"components": components, "bytes": len(text), "seconds": min(times),
            "cpu": min(cpu), "peak_mib": (peak - before) / 1024}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        print(json.dumps(measure(int(argv[1]))))
        return 0
    sizes = [int(a) for a in argv] or [1_000, 10_000]
    rows = []
    for size in sizes:
        out = subprocess.run([sys.executable, __file__, "--one", str(size)], check=True,
                             capture_output=True, text=True).stdout
        rows.append(json.loads(out))
    print("%10s %12s %10s %10s %10s" % ("components", "input bytes", "wall s", "cpu s", "peak MiB"))
    for r in rows:
        print("%10d %12d %10.3f %10.3f %10.1f" % (r["components"], r["bytes"], r["seconds"], r["cpu"],
                                                  r["peak_mib"]))
    if len(rows) >= 2:
        print("cpu time ratio %d/%d: %.1f (target <= 12; 10,000 components target < 2 s)"
              % (rows[-1]["components"], rows[0]["components"], rows[-1]["cpu"] / rows[0]["cpu"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
