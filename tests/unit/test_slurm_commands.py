"""The Slurm commands the portal runs (slurmctl.Slurm.run) start in a session of their own: a
Ctrl-C at the portal's terminal reaches its whole foreground process group, and a ``sinfo``
in that group died with it, so a portal that was stopping anyway logged "sinfo failed (status
-2)". Here the command on ``SLURM_BIN`` is a stand-in that says which group and session it is in."""

from __future__ import annotations

import os
import sys

from cddlm.application.enactment.slurmctl import Slurm

SAYS_WHERE = "import os; print(os.getpid(), os.getpgid(0), os.getsid(0))"


def test_a_slurm_command_is_in_a_session_and_group_of_its_own(tmp_path, monkeypatch):
    sinfo = tmp_path / "sinfo"
    sinfo.write_text("#!/bin/sh\nexec %s -c '%s'\n" % (sys.executable, SAYS_WHERE))
    sinfo.chmod(0o755)
    monkeypatch.setenv("SLURM_BIN", str(tmp_path))
    pid, group, session = map(int, Slurm(timeout=30).run(["sinfo", "--json"]).split())
    assert group != os.getpgid(0) and session != os.getsid(0), (group, session)
    assert group == session == pid      # its own session's leader: no terminal's signals reach it
