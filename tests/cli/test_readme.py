"""The README's tour is the output exactly as printed (issue 13): its commands run against a
live portal, and every line they print has the README's shape (ids, times, numbers and paths
aside); the command reference (docs/cli.md) names every command there is, and its
troubleshooting table the messages printed."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from cddlm.cli import build_parser
from tests.cli.helpers import ROOT, banner, cddlm, env_for, popen, reader, shape
from tests.netns import wait_until

README = (ROOT / "README.md").read_text()
CLI = (ROOT / "docs" / "cli.md").read_text()


def console_blocks(section: str) -> list[list[str]]:
    text = README[README.index(section):]
    text = text[:text.index("\n## ", 1)]
    return [b.split("\n") for b in re.findall(r"```console\n(.*?)\n```", text, re.S)]


def commands(block: list[str]) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in block:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def run(command: str, url: str) -> list[str]:
    env = env_for(url)
    env["PATH"] = "%s:%s" % (Path(sys.executable).parent, env["PATH"])    # `cddlm`, activated
    r = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=120)
    assert r.returncode == 0, (command, r.stderr)
    return (r.stdout + r.stderr).splitlines()


def test_the_tour_prints_what_the_readme_shows(live_portal):
    lp = live_portal()
    serve, tour, watch = console_blocks("## A five-minute tour")
    assert serve[0] == "$ make serve"
    assert shape(banner(lp) + ["portal ready at " + lp.url], paths=True) == shape(serve[1:], paths=True)
    watcher = popen("watch", portal=lp.url, stderr=subprocess.STDOUT)
    seen: list[str] = []
    reading = reader(watcher, seen)
    try:
        assert wait_until(lambda: seen, 30), "watch said nothing"      # subscribed: it says so
        for command, expected in commands(tour):
            if command.startswith(". "):
                continue                                        # the test has cddlm on PATH
            printed = run(command, lp.url)
            assert shape(printed) == shape(expected), "%s printed:\n%s" % (command, "\n".join(printed))
            if command.startswith("kill "):                     # the portal sees the death
                deadline = time.monotonic() + 20
                while "state:   failed" not in cddlm("status", "hello", portal=lp.url).stdout:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
        # the last event reaches watch: awaited (a fixed second assumed it had by then)
        wait_until(lambda: len(seen) >= len(watch) - 1, 30)
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.wait(timeout=30)
        reading.join(timeout=5)
    assert watch[0] == "$ cddlm watch"
    assert shape(seen) == shape(watch[1:])


def test_the_command_table_names_every_command():
    table = CLI[CLI.index("## Commands"):CLI.index("## Exit codes")]
    parser = build_parser()
    missing = []
    for action in parser._subparsers._group_actions[0].choices.items():
        name, sub = action
        children = [a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction"]
        words = ["%s %s" % (name, c) for c in children[0].choices] if children else [name]
        missing += [w for w in words if "`cddlm %s" % w not in table]
    assert not missing, missing
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |", "| 130 |", "| 141 |"):
        assert code in CLI


def test_the_troubleshooting_messages_are_the_ones_printed(shared_portal, tmp_path):
    section = CLI[CLI.index("## Troubleshooting"):]
    r = cddlm("ls", "--portal", "127.0.0.1:1", check=False)
    assert ("no portal answers at URL (is `cddlm portal serve` running? Another portal: "
            "--portal URL or $CDDLM_PORTAL)").replace("`", "") in section.replace("`", "")
    assert "(is `cddlm portal serve` running? Another portal: --portal URL or $CDDLM_PORTAL)" \
        in r.stderr
    r = cddlm("deploy", "examples/hello.xml", "--option", "validate-only=true", check=False)
    assert "option name 'validate-only' is not a URI" in r.stderr and \
        "option name 'validate-only' is not a URI" in section
