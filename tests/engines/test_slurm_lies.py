"""A Slurm job's program that writes to the job array's manifest (on the folder the nodes
write, which its program, running as the portal's account, may write too): a line whose index
is no ASCII number (``²``, a 5,000-digit one) is left out, so the component's restart is
submitted (before, every start of the application failed its worker with a ValueError).

Tried and found sound (no test added): a job's watcher file is parsed byte by byte (a job of
its own, a pid in range, hexadecimal ports: tests/unit/test_procsh.py); a job's name and
comment, which its program may change with ``scontrol update``, reach no shell (Slurm is
called with argument lists) and only match a job to an application the portal names."""

from __future__ import annotations

from tests.engines.test_slurm import application, comps, deploy, finish, front, process, slurm  # noqa: F401

SPOIL = ('d=$(dirname "$CDDLM_WORKDIR"); r=$(dirname "$(dirname "$d")"); '
         'for f in "$r/arrays/$(basename "$d")"/*; do printf \'\\302\\262 x\\n%s x\\n\' "$(printf %05000d 7)" '
         '>> "$f"; done; sleep 1; exit 1')


def test_a_manifest_a_job_wrote_to_fails_no_start(slurm, front):  # noqa: F811
    app = deploy(front, application(
        process("stay", "sleep", "600", host="n3"),
        process("spoil", "sh", "-c", SPOIL, host="n3", restart="on-failure", restart_limit="1")),
        state="failed", timeout=90)
    c = comps(app)["spoil"]
    assert c["restarts"] == 1 and "exited with status 1" in (c["info"] or ""), c
    assert "failed unexpectedly" not in front.lp.log_path.read_text()
    finish(app)
