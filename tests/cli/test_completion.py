"""Shell completion (issue 13): ``cddlm completion bash|zsh`` prints a script generated from
the command's parser; sourced into a real bash or zsh it completes commands, options, files
and application names (asked of the portal)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import ROOT, cddlm, env_for


def complete(shell: str, script: Path, words: list[str], portal: str | None = None) -> list[str]:
    """The candidates for the command line ``words`` (the last one being completed). In zsh,
    as its bashcompinit does: ``compgen -F _cddlm`` (sh emulation, PREFIX set), then the
    candidates matching the word (zsh's compadd matches them)."""
    array = " ".join(shlex.quote(w) for w in words)
    last = shlex.quote(words[-1])
    if shell == "bash":
        call = "_cddlm; for w in \"${COMPREPLY[@]}\"; do echo \"$w\"; done"
    else:
        call = "PREFIX=%s; compgen -F _cddlm -- %s" % (last, last)
    program = "source %s; COMP_WORDS=(%s); COMP_CWORD=%d; %s" % (script, array, len(words) - 1, call)
    env = env_for(portal)
    env["PATH"] = "%s:%s" % (Path(sys.executable).parent, env["PATH"])   # where `cddlm` is
    r = subprocess.run([shell, "-c", program], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=60)
    assert r.returncode in (0, 1), r.stderr
    return [w for w in r.stdout.split() if w.startswith(words[-1])]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_in_a_real_shell(shell, tmp_path, shared_portal):
    if shutil.which(shell) is None:
        pytest.skip("%s is not installed (apt-get install %s)" % (shell, shell))
    script = tmp_path / ("cddlm." + shell)
    script.write_text(cddlm("completion", shell).stdout)
    assert complete(shell, script, ["cddlm", "de"]) == ["deploy", "destroy"]
    assert set(complete(shell, script, ["cddlm", "host", ""])) == {"ls", "down", "up"}
    assert "--cleanup-on-failure" in complete(shell, script, ["cddlm", "deploy", "--c"])
    assert complete(shell, script, ["cddlm", "portal", "serve", "--log-level", "w"]) == ["warning"]
    assert "examples/hello.xml" in complete(shell, script, ["cddlm", "deploy", "examples/h"])
    cddlm("deploy", "examples/hello.xml", "--name", "completed", "--no-run", portal=shared_portal.url)
    try:
        assert complete(shell, script, ["cddlm", "status", "comp"], portal=shared_portal.url) == \
            ["completed"]
        assert complete(shell, script, ["cddlm", "--portal", shared_portal.url, "logs", "comp"]) == \
            ["completed"]
        assert complete(shell, script, ["cddlm", "logs", "completed", ""],
                        portal=shared_portal.url) == []       # COMPONENT: not an application
    finally:
        cddlm("destroy", "completed", "--force", portal=shared_portal.url)
